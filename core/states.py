"""The trial lifecycle: states, which of them are final, and what a heartbeat answers.

```
queued ──claim──► running ──finish──► complete | failed | pruned
   ▲                 │  ▲                          │
   │   requeue_stale │  └─ claim takes over a      │ retry_failed (failed only)
   └─────────────────┘     stale or dead attempt   │
   ▲                                               │
   └───────────────────────────────────────────────┘
queued ──cancel_sweep──► cancelled      running ──(stop requested)──► cancelled
                                        running ──(prune requested)──► pruned
```

A takeover or a stale requeue counts the attempt lost (``lost_attempts``); the loss that
makes ``max_attempts`` (`SWEEPSTACK_MAX_ATTEMPTS`) ends the trial ``failed`` instead: a
poison trial, whose worker dies whenever it trains it, does not take every worker down with
it. ``retry_failed`` starts the count afresh.

States are lowercase strings in JSON and in the store; `TrialState` is a `StrEnum`, so a
state compares equal to its value (``TrialState.QUEUED == "queued"``).
"""

from __future__ import annotations

from enum import StrEnum


class TrialState(StrEnum):
    """Where a trial is in its lifecycle."""

    QUEUED = "queued"
    RUNNING = "running"
    COMPLETE = "complete"
    FAILED = "failed"
    PRUNED = "pruned"
    CANCELLED = "cancelled"


#: A trial in one of these states stays there until an explicit retry (failed only).
TERMINAL_STATES = frozenset(
    {TrialState.COMPLETE, TrialState.FAILED, TrialState.PRUNED, TrialState.CANCELLED}
)

#: The states a worker may finish an attempt in. `cancelled` is accepted as well, but only
#: from an attempt whose sweep asked it to stop (see `TrialLifecycle.finish_many`).
FINISH_STATES = frozenset({TrialState.COMPLETE, TrialState.FAILED, TrialState.PRUNED})

#: Every state, in lifecycle order: the keys of every `counts` mapping.
ALL_STATES = tuple(TrialState)


class Heartbeat(StrEnum):
    """What `TrialLifecycle.heartbeat_many` answers an attempt.

    ``ok``: the attempt holds the claim; go on. ``stop``: it still holds the claim, but its
    sweep was cancelled; stop and finish (``cancelled`` is accepted). ``prune``: it holds
    the claim and the scheduler asked this attempt to stop early (`SweepAdmin.request_prune`);
    stop at the end of the epoch and finish ``pruned``. ``lost``: another attempt took the
    trial over or it was requeued; stop and do not finish (a finish would be a no-op).
    A cancelled sweep's stop wins over a prune request.

    Truthy only for ``ok``, so ``if not answers[trial_id]`` means "stop training".
    """

    OK = "ok"
    STOP = "stop"
    PRUNE = "prune"
    LOST = "lost"

    def __bool__(self) -> bool:
        return self is Heartbeat.OK
