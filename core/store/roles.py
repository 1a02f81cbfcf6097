"""The store's roles: what each service may ask of the store, and what it can count on.

This page is the store's interface. Each service holds the one role it needs, as an
attribute of `core.store.store.Store`, and may type against these Protocols:

- `TrialLifecycle` (``store.lifecycle``, the workers): claim, heartbeat, report and finish
  the attempts of trials, many per round trip;
- `SweepAdmin` (``store.admin``, the API and the scheduler): create, cancel, requeue stale,
  retry failed, delete, ask running attempts to stop early, recount;
- `Feeding` (``store.feeding``, the scheduler): a sweep fed in windows after its first;
- `Reads` (``store.reads``, the API, the dashboard, the CLI and the analysis): sweeps,
  trial pages, the best, a trial and its curve, the change feed of a live page;
- `Sessions` (``store.sessions``, the web layer): the dashboard's logins;
- `Artifacts` (``store.artifacts``, the workers, the API and the CLI): trials' models,
  checkpoints and files;
- `Shares` (``store.shares``, the scheduler, the API and the dashboard): the fair share's
  inputs (`core.shares`).

Each role has one implementation, on MongoDB: `core.store.lifecycle.MongoTrialLifecycle`,
`core.store.admin.MongoSweepAdmin`, `core.store.feeding.MongoFeeding` and
`core.store.reads.MongoReads`, which subclass these Protocols and hold the code of every
method here. What the documents look like is in `core.store.records`; the collections, indexes
and invariants in `core.store.store`; the states and their transitions in `core.states`.

What every method of every role holds to:

- A lost or unreachable server raises `StoreUnavailable`; the caller retries.
- Bad input raises `InvalidQuery` naming the field, the rule and the value, before anything
  is written; an id the store does not have raises `NotFound` where a method says so.
- A trial's state has one writer at a time: every transition names the state (and attempt)
  it expects, so of any number of concurrent callers exactly one changes a trial, and that
  caller moves the sweep's counts. A write that finds the trial elsewhere changes nothing.
- Times are timezone-aware UTC, to the millisecond, from the writing process's clock.
- Ids are strings: a sweep's is 12 hex digits, a trial's ``f"{sweep_id}-{point id}"``.
- A trial's config is stored with its large texts (a Caffe net's prototxt, a long string
  parameter) as references, each text kept once per sweep (`core.store.texts`): a method
  that gives configs says whether they hold the texts or the references.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple, Protocol

from core.settings import DEFAULT_MAX_ATTEMPTS
from core.spec.sweep import SweepSpec
from core.states import Heartbeat, TrialState
from core.store.records import JUDGED_ALL, TrialPointLike, Verdict

__all__ = [
    "JUDGED_ALL",
    "Artifacts",
    "Awaiting",
    "CompleteCurves",
    "EpochRow",
    "Feeding",
    "Finish",
    "Reads",
    "Sessions",
    "SweepAdmin",
    "TrialLifecycle",
    "Verdict",
]


class CompleteCurves(NamedTuple):
    """Complete trials a worker's pruner has not seen yet (`TrialLifecycle.complete_curves`):
    by trial id, (objective, {epoch: value}); and where the next call may start reading."""

    curves: dict[str, tuple[float | None, dict[int, float]]]
    since: datetime | None


class Awaiting(NamedTuple):
    """A running attempt's latest reported epoch, not judged yet, and that epoch's metrics
    (`Feeding.awaiting`)."""

    attempt: int
    epoch: int
    metrics: dict[str, Any]


@dataclass(frozen=True)
class EpochRow:
    """One epoch's metrics of one attempt, for `TrialLifecycle.report_many`."""

    trial_id: str
    attempt: int
    epoch: int
    metrics: Mapping[str, Any]


@dataclass(frozen=True)
class Finish:
    """How one attempt ended, for `TrialLifecycle.finish_many`: the `state` it ended in
    (complete, failed, pruned; cancelled after a stop request), its `result` (final
    metrics), `error` (why it failed) and `extra` record fields (see `finish_many`)."""

    trial_id: str
    attempt: int
    state: TrialState | str
    result: Mapping[str, Any] | None = None
    error: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


class TrialLifecycle(Protocol):
    """The writes of a trial's attempts, for the workers that run them (`workers/`).

    A worker claims a trial (`claim_queued` for those its message says are queued, `claim`
    the careful way for the rest), sends `heartbeat_many` for the attempts it holds, writes
    their epochs with `report_many` and ends them with `finish_many`. Only the attempt
    that holds the claim can change a trial; a stale attempt's write is a no-op. It also
    reads the little a worker needs: a `trial` as it stands, a sweep's `objective`, and for
    a pruner it runs itself the sweep's `pruning` section and its `complete_curves`.
    """

    @abstractmethod
    def claim(
        self,
        trial_id: str,
        worker: Mapping[str, Any],
        *,
        stale_after: float,
        takeover_attempt: int | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> dict[str, Any] | None:
        """Start a new attempt of a trial for `worker`; the trial after the claim, or None.

        Claims a queued trial, or a running one whose attempt is presumed dead: its
        heartbeat is older than `stale_after` seconds, or its attempt is `takeover_attempt`
        (the caller knows that attempt's process is gone). The dead attempt goes into
        ``history`` as ``lost`` and counts in ``lost_attempts``; the one that makes it
        `max_attempts` ends the trial ``failed`` instead (a poison trial: whatever kills its
        worker would kill the next one too). None when the trial is terminal, held by a live
        attempt or ended so. A trial of a cancelled sweep is cancelled instead of claimed;
        a queued one of a paused sweep stays queued, noted in the sweep's ``held`` list for
        its feeder to send again on resume (None). `NotFound` for a trial the store does not
        have. The config holds its texts.
        """

    @abstractmethod
    def resolve_texts(self, sweep_id: str, config: Mapping[str, Any]) -> dict[str, Any]:
        """`config` (a message's copy, `scheduler.enqueue`) with its references replaced by
        the sweep's texts (`core.store.texts`): what the worker trains. One read for the texts
        this process has not read before; none for a config without references."""

    @abstractmethod
    def claim_queued(self, expected: Mapping[str, int], worker: Mapping[str, Any]) -> list[str]:
        """Claim queued trials for `worker` in one write; the ids this call claimed, in order.

        `expected` maps each trial id to the attempt it is queued at (0 for a new trial; a
        message carries it, `scheduler.enqueue`); a claimed trial runs attempt
        ``expected + 1`` and its document need not be read. A trial in another state or at
        another attempt, unknown, or of a cancelled or paused sweep is left alone and not
        returned (a paused sweep's held: see `claim`): the caller asks `claim`, which takes
        over dead attempts and cancels.
        """

    @abstractmethod
    def heartbeat_many(self, attempts: Mapping[str, int]) -> dict[str, Heartbeat]:
        """Record that each attempt (trial id -> attempt) is alive, in one write; what each
        should do (`Heartbeat`).

        ``ok``: it holds the claim. ``stop``: it holds the claim but its sweep was
        cancelled (finish it ``cancelled``). ``prune``: it holds the claim and a prune
        request names this attempt (finish it ``pruned``); ``stop`` wins over ``prune``.
        ``lost``: it no longer holds the claim (requeued, taken over, or the trial is gone).
        """

    @abstractmethod
    def judged(self, attempts: Mapping[str, int]) -> dict[str, Verdict]:
        """Where each attempt (trial id -> attempt) stands with the scheduler, a `Verdict`:
        ``ok`` and the epoch of its latest verdict to go on (`Feeding.mark_judged`; -1
        before the first), or the answer `heartbeat_many` would give an attempt that is
        to end (``prune``: `SweepAdmin.request_prune`; ``stop``; ``lost``), for which no
        other decision is coming. One read, no write; what a worker that waits for the
        decision at a pruner's epoch asks (`workers.claims`), so that it needs no
        heartbeat to learn how to end."""

    @abstractmethod
    def report_many(self, rows: Sequence[EpochRow]) -> None:
        """Store many epochs' metrics (of any trials and attempts) in two writes.

        The first row of an (attempt, epoch) is kept, never overwritten: a repeated one
        changes nothing. Each trial's ``progress`` shows its latest epoch of the batch while
        the attempt holds the claim. `NotFound` for an unknown trial and `InvalidQuery` for
        an attempt it has not had (or a bad field), before any row is written.
        """

    @abstractmethod
    def finish_many(self, finishes: Sequence[Finish]) -> dict[str, bool]:
        """End running attempts; by trial id, True where this call ended it.

        Only the attempt that holds the claim can finish, once: a second finish, or one by
        an attempt that lost the claim, changes nothing (False). A `Finish`'s state is
        complete, failed or pruned (`InvalidTransition` otherwise); cancelled is accepted
        from an attempt whose sweep asked it to stop. Its `result` holds the final metrics,
        whose ``objective`` (or else the sweep's objective metric) is also stored at top
        level; its `extra` fields (param_count, train_seconds, device, dtype, versions, ...)
        are stored at top level and may not name a lifecycle field. The ended attempt goes
        into the trial's ``history``, and the trial into its sweep's summaries.

        The input is checked before anything is written (a bad field, or a trial named
        twice, raises and changes nothing). A trial the store does not have (`NotFound`), or
        a cancelled finish without a stop request (`InvalidTransition`), is found after the
        write: the others of the call are written, and the error is raised.
        """

    @abstractmethod
    def hand_back(self, trial_id: str, attempt: int, reason: str) -> bool:
        """Put running `attempt` back in the queue, as its worker shuts down (a scale-down,
        `workers.shutdown`): the trial is ``queued`` again at the same attempt number, the
        attempt goes into ``history`` as ``handed_back`` with `reason`, and it does not
        count in ``lost_attempts`` (a worker that stops in order is no poison). Its rows
        and checkpoint stay: the next attempt resumes from the checkpoint (`resume`).
        False, changing nothing, when the attempt no longer holds the trial."""

    @abstractmethod
    def resume(self, trial_id: str, attempt: int, from_attempt: int, epoch: int) -> bool:
        """Let running `attempt` go on from a checkpoint that attempt `from_attempt` saved
        after `epoch`: that attempt's rows up to `epoch` become this attempt's (so the
        trial's curve is whole and no epoch is written twice), taken from a later attempt
        that resumed from the same checkpoint and died before one of its own, if one
        did; the resume is noted in the trial's ``resumed`` list. False, changing nothing,
        when the attempt no longer holds the trial."""

    @abstractmethod
    def note(self, trial_id: str, attempt: int, text: str) -> bool:
        """Add a line to running `attempt`'s notes (``notes``: what a reader should know of
        how the trial ran, such as a checkpoint that could not be read); False when the
        attempt no longer holds the trial."""

    @abstractmethod
    def trial(self, trial_id: str) -> dict[str, Any]:
        """The trial as it stands (no metric rows; its config's texts as references);
        `NotFound` if the store does not have it."""

    @abstractmethod
    def objective(self, sweep_id: str) -> dict[str, Any]:
        """The sweep's primary objective, ``{metric, direction}``, and ``measure``: every
        metric its objectives and constraints name, which a worker measures into
        ``result["values"]`` (`core.spec.objectives.Goals.metrics`); `NotFound` for an
        unknown sweep."""

    @abstractmethod
    def pruning(self, sweep_id: str) -> dict[str, Any]:
        """The sweep's ``pruning`` section as its spec gives it (``{}`` when it has none):
        what a worker builds the sweep's pruner from (`workers.pruning`); `NotFound` for an
        unknown sweep."""

    @abstractmethod
    def complete_curves(
        self, sweep_id: str, metric: str, known: Collection[str], since: datetime | None
    ) -> CompleteCurves:
        """The sweep's complete trials not in `known`, each with its objective and the values
        of `metric` its final attempt reported, by epoch (finite values only): what a
        worker's pruner judges a running trial against (`workers.pruning`).

        One small read of the sweep's counts while they count exactly ``len(known)``
        complete trials; else the trials changed since `since` (every complete one when
        None) and their rows. Pass the answer's `CompleteCurves.since` to the next call.
        A trial's rows are all written before it is complete (`finish_many` comes last), so
        a curve read here is whole."""


class SweepAdmin(Protocol):
    """What acts on whole sweeps: for the API (a user's requests) and the scheduler.

    `create_sweep` stores a sweep and its first trials; `cancel_sweep`, `retry_failed` and
    `delete_sweep` act on a user's request; `requeue_stale` sends trials whose worker went
    silent back to the queue; `request_prune` asks running attempts to stop early;
    `recount` repairs the counts that a process killed between two writes left off.
    """

    @abstractmethod
    def create_sweep(
        self,
        spec: SweepSpec,
        trials: Sequence[TrialPointLike],
        *,
        owner: str | None = None,
        total: int | None = None,
        extras: Mapping[str, Mapping[str, Any]] | None = None,
        sweep_fields: Mapping[str, Any] | None = None,
    ) -> str:
        """Store a sweep and its trials (queued, attempt 0); return the new sweep id.

        `total` (at least ``len(trials)``), when given, is the sweep's size: the trials
        beyond these are planned (`Feeding`), counted as queued, and these are noted in the
        sweep's ``sending`` list until the caller has sent them (`Feeding.end_sending`).
        `extras` adds fields per trial id (the search's ``optuna`` record), `sweep_fields`
        to the sweep document (the submitter's feeding lease, `Feeding.lease_for`). A
        point without a config gets the one its spec makes of its params and seed.

        A sweep that is visible is complete: readers never see part of one. Trial ids and
        indexes must be unique within the sweep (`InvalidQuery`); a value the store cannot
        keep is refused (`InvalidQuery` naming ``spec``) with nothing written. Should
        anything fail part way (the store, an interrupt), what was written is removed (best
        effort) and the error is raised. Not idempotent: a retry makes another sweep.
        """

    @abstractmethod
    def pause_sweep(self, sweep_id: str, *, by: str | None = None) -> bool:
        """Pause a sweep: nothing new starts (a claim of one of its queued trials leaves it
        queued and notes it in the sweep's ``held`` list, for the feeder to send again on
        resume); running trials finish. Noted in the sweep's ``changes`` history with
        `by`. Whether this call paused it (False: already paused). `InvalidTransition` for
        a cancelled sweep, `NotFound` for an unknown one."""

    @abstractmethod
    def resume_sweep(self, sweep_id: str, *, by: str | None = None) -> bool:
        """Resume a paused sweep (its held trials are sent again by its feeder), noted in
        its history; whether this call resumed it (False: it was not paused)."""

    @abstractmethod
    def change_spec(
        self,
        sweep_id: str,
        rev: int,
        spec: Mapping[str, Any],
        summary: str,
        *,
        by: str | None = None,
    ) -> int:
        """Replace a sweep's spec by `spec` (`core.spec.changes.apply_change`'s), if its
        ``spec_rev`` is still `rev`, and note `summary` in its history; the new revision.
        The sweep's feeder sees the revision move, rebuilds on the new spec and sets the
        planned trials (`Feeding.replan`). `InvalidTransition` if the sweep was cancelled
        or changed meanwhile (its revision moved), `NotFound` for an unknown one."""

    @abstractmethod
    def cancel_sweep(self, sweep_id: str) -> dict[str, int]:
        """Cancel a sweep: queued trials become cancelled, running ones are asked to stop
        (their heartbeats answer ``stop``), planned ones are dropped (the sweep's
        ``trial_count`` shrinks to those created).

        Returns ``{"cancelled": n, "stopping": m}`` for what this call changed. From now
        on a claim or requeue of one of its trials cancels it instead. `NotFound` for an
        unknown sweep.
        """

    @abstractmethod
    def requeue_stale(
        self,
        stale_after: float,
        sweep_id: str | None = None,
        *,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        count_lost: bool = True,
    ) -> list[str]:
        """Send running trials whose heartbeat is older than `stale_after` s back to the queue
        (of one sweep, or of every sweep when `sweep_id` is None).

        The lost attempt goes into history and counts in ``lost_attempts``; the next claim
        is attempt + 1. The loss that makes `max_attempts` ends the trial ``failed`` instead
        (as `TrialLifecycle.claim` does). Returns the ids this call requeued (each by exactly
        one of any concurrent callers), so the caller can publish them again. A trial whose
        sweep was cancelled is cancelled instead; neither it nor a failed one is returned.
        ``count_lost=False`` requeues without counting: for a caller that stopped those
        attempts itself (a resumed ``sweepstack run``), whose trials are no poison.
        """

    @abstractmethod
    def fail_undelivered(self, trial_ids: Sequence[str], reason: str) -> list[str]:
        """End ``failed`` with `reason` those of the trials that are ``queued``: their message
        was dropped by the broker (a quorum queue's delivery limit), so no message of theirs
        is left and nothing else would end them. A running trial is left to its holder (and
        to `requeue_stale` if that holder is gone); an ended one is left alone. Returns the
        ids this call ended (each by exactly one of any concurrent callers); an unknown id
        is skipped."""

    @abstractmethod
    def retry_failed(self, sweep_id: str) -> list[str]:
        """Queue a sweep's failed trials again; their failed attempts stay in history.

        A retry starts the count of lost attempts afresh (``lost_attempts`` back to 0): a
        trial that failed because its worker died `max_attempts` times gets that many again,
        as the user asked for it. Returns the ids this call queued. `InvalidTransition` if
        the sweep is cancelled, `NotFound` if the store does not have it.
        """

    @abstractmethod
    def delete_sweep(self, sweep_id: str, *, owner: str | None = None) -> dict[str, int]:
        """Remove a sweep, its trials, their metrics, its summaries, its texts and its
        artifacts; how many went (``{"trials": n, "metrics": m, "texts": t, "artifacts": a}``).

        Refused with `InvalidTransition` while any trial is queued or running: a queued
        trial still has a message on the broker, so cancel the sweep first and wait for its
        running trials to stop. The trials themselves are checked, not the counters. The
        sweep is invisible (`NotFound`) from the moment its removal starts. `NotFound` if
        missing or not `owner`'s.
        """

    @abstractmethod
    def recount(self, sweep_id: str) -> dict[str, int]:
        """Count by state from the trials themselves (slow: reads the whole sweep), and
        repair the stored counts, which a process killed between a trial's write and its
        count's leaves one off. Planned trials count as queued.

        The repair is skipped if a transition of the sweep happened while counting; the
        exact counts are returned either way.
        """

    @abstractmethod
    def request_prune(self, requests: Mapping[str, tuple[int, int]]) -> list[str]:
        """Ask running attempts to stop early; the ids this call marked, in input order.

        `requests` maps a trial id to (attempt, epoch the decision was taken at: Optuna's
        pruners in `scheduler.search_session`). Each trial still ``running`` at that attempt
        gets ``prune_requested: {attempt, epoch, at}``, all in one round trip; the worker
        that holds the attempt learns it from its next heartbeat (``prune``), stops within
        an epoch and finishes ``pruned`` with ``pruned_epoch``, the last epoch it trained
        (`workers.runner`). The request names the attempt, so one for an attempt lost
        meanwhile never stops the attempt after it, and the finish keeps it on the record.

        Idempotent: a trial already asked for that attempt keeps its first request and is
        not returned again; a trial in another state or at another attempt, or unknown, is
        left alone and not returned. The input is checked before anything is written.
        """


class Feeding(Protocol):
    """The scheduler's writes and reads while it feeds a sweep (`scheduler.feed`,
    `scheduler.feeders`) once its first window is stored (`SweepAdmin.create_sweep`).

    A sweep fed in windows is stored with its first window of trials only; the rest are
    **planned**: the sweep's ``planned`` says how many trials are still to be created, and
    they count as ``queued`` in ``counts`` (and in ``trial_count``) from the first second,
    so every reader sees the whole sweep. `add_trials` creates more (idempotently) and moves
    them from planned to real; `shrink_plan` drops planned trials a search cannot ask (a
    space used up); cancelling a sweep drops them all.

    A window's trial ids are noted (`begin_sending`) before the trials are created, and the
    note is cleared once their messages are sent (`end_sending`): a feeder that restarts
    sends again those of the list that exist and were never claimed (a duplicate message is
    harmless, a missing one would strand the trial).

    One feeder per sweep: the feeding lease ``{owner, expires}`` (`take_lease`) is held by
    one scheduler at a time, and another takes over once the holder stops renewing it.
    """

    @abstractmethod
    def add_trials(
        self,
        sweep_id: str,
        spec: SweepSpec,
        points: Sequence[TrialPointLike],
        extras: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> list[str]:
        """Create these trials of the sweep (queued, attempt 0); the ids this call created.

        `extras` adds fields per point id (the search's ``optuna`` record). A point already
        stored is left as it is. Created trials move from the sweep's planned count to real
        ones (counts unchanged: planned ones already count as queued); if the plan was
        dropped meanwhile (a cancel), they are counted afresh, and a cancelled sweep's new
        trials are cancelled at once.
        """

    @abstractmethod
    def begin_sending(self, sweep_id: str, trial_ids: Sequence[str]) -> None:
        """Note the ids of a window about to be created and sent (the sweep's ``sending``)."""

    @abstractmethod
    def end_sending(self, sweep_id: str) -> None:
        """The window's messages are sent: nothing to send again after a restart."""

    @abstractmethod
    def shrink_plan(self, sweep_id: str, n: int | None = None) -> int:
        """Drop `n` planned trials (all when None): the search cannot ask them. How many went.

        Neither a concurrent `add_trials` nor a cancel is ever counted twice.
        """

    @abstractmethod
    def repair_plan(self, sweep_id: str, total: int, created: int) -> None:
        """Set ``planned`` to `total` - `created` (a feeder killed between creating trials
        and moving the count leaves it high). The queued count stays: it counted those
        trials as planned and counts them now as created (`add_trials` moves it the same).
        Nothing for a cancelled or unknown sweep, nor when planned is not high."""

    @abstractmethod
    def feed_trials(
        self, sweep_id: str, ids: Sequence[str] | None = None, *, with_config: bool = False
    ) -> list[dict[str, Any]]:
        """The sweep's trials (or those of `ids`) with what a feeder's rebuild needs: ``key``,
        ``index``, ``params``, ``state``, ``attempt``, ``objective``, ``optuna``, and
        ``config`` (its texts in place) when `ids` is None or `with_config`."""

    @abstractmethod
    def replan(self, sweep_id: str, rev: int, planned: int) -> None:
        """Set the sweep's planned trials to `planned` (its ``trial_count`` and queued count
        moved with them) and note revision `rev` of its spec applied: what the feeder of a
        changed sweep does, the lease held (`SweepAdmin.change_spec`)."""

    @abstractmethod
    def release_held(self, sweep_id: str, trial_ids: Sequence[str]) -> None:
        """Take these trials off the sweep's ``held`` list: sent again after a resume."""

    @abstractmethod
    def set_study_attrs(self, sweep_id: str, attrs: Mapping[str, Any]) -> None:
        """Keep the search's study state (QMC's position) on the sweep, for a rebuild."""

    @abstractmethod
    def take_lease(self, sweep_id: str, owner: str, seconds: float) -> bool:
        """Take or renew the feeding lease of a sweep for `seconds`; whether `owner` holds it.

        Taken when free, expired or `owner`'s already. Of concurrent callers at most one
        gets a free lease.
        """

    @abstractmethod
    def lease_for(self, owner: str, seconds: float) -> dict[str, Any]:
        """The lease ``{owner, expires}`` that `owner` holds for `seconds` from now (by the
        store's clock): what `take_lease` writes, and what a sweep created by its feeder
        carries from the start (`SweepAdmin.create_sweep`'s `sweep_fields`)."""

    @abstractmethod
    def release_lease(self, sweep_id: str, owner: str) -> None:
        """Give the lease back, if `owner` holds it, so another scheduler may feed at once."""

    @abstractmethod
    def unfinished_sweeps(self) -> list[dict[str, Any]]:
        """Sweeps that may need feeding: not cancelled, and with planned or live trials
        (``_id``, ``planned``, ``counts``, ``lease``; not the spec, which may be large: the
        scheduler asks this every pass, of every sweep ever submitted)."""

    @abstractmethod
    def epoch_rows(
        self, attempts: Mapping[str, int], after: Mapping[str, int]
    ) -> dict[str, dict[int, dict[str, Any]]]:
        """New epoch rows of running trials: for each id of `attempts` (its attempt), the
        metrics of each epoch past ``after[id]`` (-1: every epoch). For the pruning decision."""

    @abstractmethod
    def awaiting(self, ids: Sequence[str]) -> dict[str, Awaiting | None]:
        """Which of these trials may wait for a decision: for each one running whose latest
        reported epoch (its ``progress``) its attempt has not had judged yet, an `Awaiting`
        (attempt, that epoch and its metrics); for each one that ended (neither queued nor
        running), None. One small read by id, what a scheduler asks often between two steps
        (`scheduler.feed.Feeder.judge`) before it reads any row, and which tells it that a
        place in the window freed. A worker writes the progress before the epoch's rows
        (`TrialLifecycle.report_many`): the metrics here may be ahead of them."""

    @abstractmethod
    def mark_judged(
        self,
        verdicts: Mapping[str, tuple[int, int]],
        prune: Mapping[str, tuple[int, int]] | None = None,
    ) -> list[str]:
        """Record that the pruner let each running attempt go on after an epoch (trial id ->
        (attempt, epoch)), and ask those of `prune` to stop (as `SweepAdmin.request_prune`),
        all in one write, so that each worker waiting at that epoch (`TrialLifecycle.judged`)
        learns its decision with one read. An attempt no longer running is left alone; the
        epochs of one attempt only grow. The ids of `prune` this call marked."""


class Artifacts(Protocol):
    """Trials' models, checkpoints and files (`core.store.artifacts`): one document each in
    the store, the bytes in GridFS or under the artifact root (`core.blobs`)."""

    @abstractmethod
    def put(
        self,
        trial_id: str,
        kind: str,
        name: str,
        data: bytes,
        *,
        sweep_id: str,
        attempt: int,
        epoch: int | None = None,
        objective: float | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Store (or replace) the trial's artifact of this kind (``model``, ``checkpoint``,
        ``file``) and name; its document. The old bytes go only once the new ones are in.
        `ArtifactTooLarge` over the ceiling per file or per sweep, `InvalidQuery` for a bad
        kind, name or id."""

    @abstractmethod
    def find(self, trial_id: str, kind: str, name: str) -> dict[str, Any] | None:
        """The artifact's document, or None."""

    @abstractmethod
    def of_trials(self, trial_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        """Each trial's artifacts' documents (without where the bytes lie)."""

    @abstractmethod
    def open(self, doc: Mapping[str, Any]) -> Iterator[bytes]:
        """An artifact's bytes, in chunks, to stream; `NotFound` when they are gone."""

    @abstractmethod
    def read(self, doc: Mapping[str, Any]) -> bytes:
        """An artifact's bytes whole, checked against its SHA-256 (`InvalidQuery` if not)."""

    @abstractmethod
    def models(self, sweep_id: str, direction: str = "minimize") -> list[dict[str, Any]]:
        """The sweep's kept models, best objective first."""

    @abstractmethod
    def usage(self, sweep_id: str) -> int:
        """The bytes the sweep's artifacts take."""

    @abstractmethod
    def ranks_within(
        self, sweep_id: str, objective: float | None, direction: str, keep: int | None
    ) -> bool:
        """Whether a model of this objective would be among the sweep's `keep` best (None:
        every one is kept; 0: none)."""

    @abstractmethod
    def trim_models(self, sweep_id: str, direction: str, keep: int | None) -> int:
        """Delete the sweep's models beyond its `keep` best; how many went."""

    @abstractmethod
    def delete(self, trial_id: str, kind: str | None = None) -> int:
        """Delete the trial's artifacts (of one kind); how many went."""

    @abstractmethod
    def delete_sweep(self, sweep_id: str) -> int:
        """Delete every artifact of the sweep; how many went."""

    @abstractmethod
    def policy(self, sweep_id: str) -> dict[str, Any] | None:
        """The sweep's spec's ``artifacts`` section as stored (None: not given)."""


class Sessions(Protocol):
    """The dashboard's logins, kept in the store so that a logout ends one everywhere
    (`web.auth`): a browser's cookie holds only a session's random id, signed."""

    @abstractmethod
    def open_session(self, name: str, seconds: float) -> str:
        """Start a login of token owner `name` for `seconds`; its id (random, 256 bits).
        Sessions past their end are removed meanwhile."""

    @abstractmethod
    def session_owner(self, session_id: str) -> str | None:
        """The owner of a live session, or None (ended, expired, unknown, malformed)."""

    @abstractmethod
    def close_session(self, session_id: str) -> None:
        """End a session (a logout); nothing for one that is not there."""


class Reads(Protocol):
    """What a page or a client reads of the store: sweeps (`list_sweeps`, `get_sweep`,
    `counts`), trials (`trials`, `best`, `get_trial`, `trials_by_id`, `trials_at`), a
    running trial's curve (`metrics_after`), the change feed of a live page
    (`changed_rows`, `sweep_rows`), a sweep's pace (`throughput`) and views stored for
    the next reader (`view_snapshot`, `keep_view_snapshot`).

    Reads change nothing the other roles write: the one write, `keep_view_snapshot`, is a
    cache of a read, and a sweep without summaries gets them from its first read that
    needs them (`best`, `sweep_rows`).
    """

    @abstractmethod
    def list_sweeps(
        self, *, owner: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Sweeps (`owner`'s only, when given), newest first, each with ``counts`` by state;
        and the next page's cursor (None at the end)."""

    @abstractmethod
    def get_sweep(self, sweep_id: str, *, owner: str | None = None) -> dict[str, Any]:
        """A sweep with ``counts`` by state; `NotFound` if missing or not `owner`'s."""

    @abstractmethod
    def counts(self, sweep_id: str) -> dict[str, int]:
        """How many trials of the sweep are in each state (every state a key)."""

    @abstractmethod
    def trials(
        self,
        sweep_id: str,
        *,
        state: str | Sequence[str] | None = None,
        params: Mapping[str, Any] | None = None,
        sort: str = "index",
        descending: bool = False,
        limit: int = 50,
        cursor: str | None = None,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of a sweep's trials, and the cursor of the next page (None at the end).

        `state`: a state or a list of them. `params`: ``{"model.hidden_units": 64}`` (or a
        sub-section's ``{"execution.parallel.tau": 5}``), exact values (strings, numbers,
        booleans, None for "not set"). `sort`: ``index``, ``objective``, ``train_seconds``,
        ``finished_at``, ``started_at``, ``updated_at``, ``param_count``, ``attempt``,
        ``result.<metric>`` or a parameter path; ties are broken by index; missing values
        sort first ascending (MongoDB's order). The cursor is only valid for the same sweep,
        filters and sort. A page costs about its own size in index order, and about the
        filtered trials otherwise (`core.store.store`). Configs hold references to their
        texts (`get_trial` gives them with their texts).
        """

    @abstractmethod
    def best(self, sweep_id: str, k: int = 10) -> list[dict[str, Any]]:
        """The `k` complete trials with the best finite objective, by the sweep's direction
        (equal objectives: the lower index first).

        A few ms at any sweep size for `k` up to `core.store.summaries.TOP_K`, read from
        the sweep's top summary; past it, every complete trial is read. Configs hold
        references to their texts, as in `trials`.
        """

    @abstractmethod
    def trials_by_id(
        self, trial_ids: Iterable[str], fields: Sequence[str]
    ) -> dict[str, dict[str, Any]]:
        """`fields` (dotted paths) of these trials, by id, in batched reads; `NotFound` for an
        id that is not in the store. A ``config`` holds references to its texts, as a
        message carries it."""

    @abstractmethod
    def trials_at(
        self, sweep_id: str, indexes: Iterable[int], fields: Sequence[str]
    ) -> list[dict[str, Any]]:
        """`fields` (dotted paths; ``_id`` and ``index`` always) of the sweep's trials at
        these indexes (at most `core.store.query.MAX_LIMIT`), by index; an index it does
        not have is left out. One read."""

    @abstractmethod
    def get_trial(self, trial_id: str, *, with_metrics: bool = True) -> dict[str, Any]:
        """A trial, its config with its texts (as submitted, not references); with
        ``metrics``: its reports (``attempt``, ``epoch``, ``metrics``, ``reported_at``) sorted
        by attempt and epoch. `NotFound` if the store does not have it."""

    @abstractmethod
    def changed_rows(
        self, sweep_id: str, since: datetime | None, fields: Sequence[str]
    ) -> tuple[list[dict[str, Any]], datetime]:
        """Trials of the sweep changed after `since` (every trial when None), `fields` of each,
        in change order, and the watermark to pass as the next `since`.

        `fields` are dotted paths (``state``, ``params``, ``config.model.hidden_units``);
        every row also has ``_id``, ``index`` and ``updated_at``. Each change comes at least
        once: those younger than the store's `change_lag` may come again, so replace rows by
        ``_id``. The first read (`since` None) costs about the whole sweep (50,000 trials,
        13 fields: ~7 s on SecantusDB on a busy 2-core machine); later reads cost what
        changed.
        """

    @abstractmethod
    def sweep_rows(
        self, sweep_id: str, fields: Sequence[str]
    ) -> tuple[list[dict[str, Any]], datetime]:
        """Every trial of a sweep, `fields` of each, and a watermark for `changed_rows`:
        what ``changed_rows(sweep_id, None, fields)`` answers, read mostly from the sweep's
        finish log (`core.store.summaries`) rather than the trials when `fields` are among
        the log's (50,000 finished trials: ~0.5 s against ~7-11 s).

        Should the log not account for every trial (a finish whose log write was lost),
        the trials are read, and the log is made again from them.
        """

    @abstractmethod
    def throughput(self, sweep_id: str, minutes: int = 10) -> dict[str, Any]:
        """How fast a sweep finishes trials lately, and when it should be done.

        ``per_minute``: trials finished (complete, failed, pruned) per minute over the last
        `minutes` (1 to 10080), or since the sweep was created if that is later (None
        before the first finish); ``window_seconds``: that span; ``remaining``: queued +
        running; ``eta_seconds``: remaining / rate (0 when nothing remains, None without a
        rate or once cancelled). Costs about what finished in the window, plus the running
        trials.
        """

    @abstractmethod
    def epoch_rows(self, attempts: Mapping[str, int]) -> dict[str, dict[int, dict[str, Any]]]:
        """The epochs' metrics of these attempts (trial id -> attempt), by trial and epoch, in
        one read: many trials' curves at once (the per-epoch export, `core.store.export`)."""

    @abstractmethod
    def metrics_after(
        self, trial_id: str, attempt: int = 0, epoch: int = -1
    ) -> list[dict[str, Any]]:
        """A trial's metric rows after (`attempt`, `epoch`), by attempt and epoch.

        The defaults give every row. A page following a running trial passes the last row
        it has, so each poll reads only the attempt in progress.
        """

    @abstractmethod
    def view_snapshot(self, sweep_id: str, name: str) -> tuple[str, bytes] | None:
        """A view of the sweep a reader stored (`keep_view_snapshot`): (version, bytes), or
        None."""

    @abstractmethod
    def keep_view_snapshot(self, sweep_id: str, name: str, version: str, data: bytes) -> None:
        """Store a view computed from a whole sweep (at most 8 MB) under the `version` of
        the sweep it shows (the reader decides what a version is), for the next process
        that starts; a newer one replaces it. Removed with the sweep."""


class Shares(Protocol):
    """What the fair share of workers reads and admins set (`core.shares`; the scheduler
    sizes each sweep's window from it, the API checks quotas with it, the dashboard shows
    it): the active sweeps, the users' weights, allowances and quotas, the workers online.

    Everything lives in the store, so every scheduler computes the same shares, and one
    killed and restarted computes them again from nothing."""

    @abstractmethod
    def active_sweeps(self, owner: str | None = None) -> list[dict[str, Any]]:
        """The sweeps not cancelled that still have trials planned, queued or running
        (`owner`'s only, when given), with ``owner``, ``priority``, ``weight``, ``counts``,
        ``planned``, ``created_at`` and ``spec.search.parallelism``."""

    @abstractmethod
    def users(self) -> dict[str, dict[str, Any]]:
        """Every user an admin set something for, by name: ``weight``, ``high_priority``
        and ``quotas`` (``running``, ``trials``, ``sweeps``), each absent where unset."""

    @abstractmethod
    def user(self, name: str) -> dict[str, Any]:
        """One user's settings (`users`), ``{}`` where none were set."""

    @abstractmethod
    def set_user(self, name: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        """Set a user's ``weight`` (> 0), ``high_priority`` (a bool) and ``quotas`` (each
        an integer > 0, or None for the deployment's default); the user's settings after."""

    @abstractmethod
    def set_sweep(self, sweep_id: str, *, weight: float) -> None:
        """Set a sweep's weight among its owner's sweeps (> 0; 1 by default); `NotFound`
        if the sweep does not exist. (Its priority is its spec's, fixed at submit.)"""

    @abstractmethod
    def usage(self, owner: str) -> dict[str, int]:
        """What `owner` uses now, as the quotas count it: ``running`` (trials running),
        ``trials`` (trials stored, planned ones included) and ``sweeps`` (sweeps active)."""

    @abstractmethod
    def note_workers(self, count: int | None) -> None:
        """Record the worker processes online, as a scheduler found them (None: none
        answered), for the processes that cannot ask (the API's submit)."""

    @abstractmethod
    def workers(self, max_age_seconds: float = 300.0) -> int | None:
        """The worker processes online as last recorded, None where unknown or older than
        `max_age_seconds`."""
