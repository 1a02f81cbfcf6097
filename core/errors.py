"""The one exception family of Sweepstack.

Every error a user can cause names the field, the rule and the value. Callers catch
`SweepstackError` at entry points (CLI, API) and turn it into an exit code or an HTTP
status; code in between lets it pass.
"""

from __future__ import annotations

from dataclasses import dataclass


class SweepstackError(Exception):
    """Base class of every error Sweepstack raises on purpose."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input: where it is (a dotted path) and which rule broke."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class SpecError(SweepstackError):
    """A sweep spec broke one or more rules; `problems` lists every one of them.

    `spec` is the spec as far as it could still be built (or None), so that a caller's own
    later checks (the server's limits, this host's files) report their problems in the same
    run instead of the next one.
    """

    def __init__(self, problems: list[Problem], spec: object | None = None) -> None:
        self.problems = list(problems)
        self.spec = spec
        super().__init__("\n".join(str(p) for p in self.problems))


class TooManyTrials(SpecError):
    """A spec expands to more trials than its limit allows.

    `at_least`: counting stopped once past the limit, so `count` is a lower bound.
    """

    def __init__(
        self, count: int, limit: int, path: str = "limits.max_trials", *, at_least: bool = False
    ) -> None:
        self.count = count
        self.limit = limit
        self.at_least = at_least
        many = f"at least {count:,}" if at_least else f"{count:,}"
        super().__init__(
            [Problem(path, f"the sweep expands to {many} trials, over the limit of {limit:,}")]
        )


class ConfigError(SweepstackError):
    """A setting read from the environment is malformed."""


class AttemptLost(SweepstackError):
    """An attempt that cannot go on for a reason outside the trial: a data-parallel rank's
    process killed by a signal (the OOM killer, kill -9, a lost host). Not the trial's result:
    the attempt ends lost, as if its worker had died, and the trial is retaken (counted by
    the poison rule, `SWEEPSTACK_MAX_ATTEMPTS`), from its last checkpoint where it has one."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class RanksNotGathered(AttemptLost):
    """A data-parallel trial over several hosts (`execution.parallel.hosts`) whose ranks on
    the other hosts did not all join within ``execution.parallel.gather_timeout``: not enough
    workers were free. Not the trial's result, nor a lost attempt: the worker puts the trial
    back in the queue and frees itself, so that two such trials never wait on each other."""


class TrainingError(SweepstackError):
    """Training could not go on (NaN loss, out of memory, an unbuildable shape).

    This is a result, not a crash: the trial ends `failed` with `reason`, the worker goes on.
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class StoreUnavailable(SweepstackError):
    """The store could not be reached or did not answer in time; callers retry with backoff."""


class NotFound(SweepstackError):
    """A sweep or trial does not exist (or is not visible to the owner asking)."""

    def __init__(self, kind: str, ident: object) -> None:
        self.kind = kind
        self.ident = ident
        super().__init__(f"{kind} {ident!r} not found")


class NoModel(NotFound):
    """A trial the caller may see that has no kept model, and why: `reason` is
    ``not_complete`` (only a complete trial's model is kept), ``not_kept`` (the sweep's
    ``artifacts:`` policy did not keep it, or no longer does) or ``gone`` (its bytes are
    missing from the store); the message says it in words."""

    def __init__(self, trial_id: str, reason: str, message: str) -> None:
        super().__init__("model", trial_id)
        self.reason = reason
        self.message = message
        self.args = (message,)

    def __str__(self) -> str:
        return self.message


class InvalidTransition(SweepstackError):
    """A trial was asked to move between states the lifecycle does not connect."""

    def __init__(self, from_state: str, to_state: str, rule: str) -> None:
        self.from_state = from_state
        self.to_state = to_state
        super().__init__(f"{from_state} -> {to_state}: {rule}")


class InvalidQuery(SweepstackError):
    """A store call got a field or value it refuses: an operator, an unknown field, a bad cursor.

    `problems` holds one `Problem` naming the field and the rule, as `SpecError` does.
    """

    def __init__(self, field: str, rule: str) -> None:
        self.field = field
        self.rule = rule
        self.problems = [Problem(field, rule)]
        super().__init__(f"{field}: {rule}")
