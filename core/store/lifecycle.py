"""The trial lifecycle, the store's role for workers: claim, heartbeat, report, finish.

`TrialLifecycle` is all a worker needs of the store (`workers/`): it claims trials, beats
for the attempts it holds, reports their epochs and finishes them, many trials per round
trip where it can (the batched writes are in `core.store.batch_writes`). Creating a sweep and
whole-sweep actions (cancel, requeue stale, retry failed, delete, prune requests) are the
administration's (`core.store.admin`); see `core.states` for the diagram of states.

Every transition is one ``update_one`` (or ``update_many``) whose filter names the state
and attempt it expects, so of concurrent callers exactly one changes the trial; that caller
then moves the sweep's counts. Why this shape, and not ``find_one_and_update``, is in
`core.store.store`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from core.errors import InvalidQuery, NotFound
from core.settings import DEFAULT_MAX_ATTEMPTS
from core.states import Heartbeat, TrialState
from core.store import batch_writes
from core.store.batch_writes import EpochRow, Finish, running_fields
from core.store.query import check_attempt, check_id, check_keys, check_seconds
from core.store.records import history_entry
from core.store.state import StoreState, available

__all__ = ["EpochRow", "Finish", "TrialLifecycle", "check_max_attempts", "poison_reason"]

log = logging.getLogger(__name__)

_QUEUED = TrialState.QUEUED.value
_RUNNING = TrialState.RUNNING.value
_FAILED = TrialState.FAILED.value
_CANCELLED = TrialState.CANCELLED.value


def check_max_attempts(max_attempts: Any) -> int:
    """`max_attempts` must be an integer >= 1 (`InvalidQuery` otherwise)."""
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise InvalidQuery("max_attempts", f"must be an integer >= 1, got {max_attempts!r}")
    return max_attempts


def poison_reason(doc: Mapping[str, Any], max_attempts: int) -> str:
    """Why a trial whose worker died `max_attempts` times ended failed: what is known of the
    last holder (host, pid, worker name, last heartbeat)."""
    holder = doc.get("worker") or {}
    beat = doc.get("heartbeat_at")
    known = [key for key in ("host", "pid", "name") if holder.get(key) not in (None, "")]
    where = ", ".join(f"{key} {holder[key]}" for key in known)
    return (
        f"its worker died {max_attempts} times: attempt {doc.get('attempt')} "
        f"({where or 'holder unknown'}) last sent a heartbeat at "
        f"{beat.isoformat() if beat else 'its start'}; killed by the out-of-memory killer, a "
        "crash or a signal? (SWEEPSTACK_MAX_ATTEMPTS sets the limit; retry to try again)"
    )


class TrialLifecycle:
    """The writes of a trial's attempts, for the workers that run them.

    A worker claims a trial (`claim_queued` for those its message says are queued, `claim`
    the careful way for the rest), sends `heartbeat_many` for the attempts it holds, writes
    their epochs with `report_many` and ends them with `finish_many`. Only the attempt
    that holds the claim can change a trial; a stale attempt's write is a no-op. It also
    reads the little a worker needs: a `trial` as it stands and a sweep's `objective`.
    """

    def __init__(self, state: StoreState) -> None:
        self._s = state

    @available
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
        attempt or ended so. A trial of a cancelled sweep is cancelled instead of claimed.
        """
        check_id("trial_id", trial_id)
        worker = check_keys("worker", worker)
        stale = timedelta(seconds=check_seconds("stale_after", stale_after))
        if takeover_attempt is not None:
            check_attempt(takeover_attempt)
        check_max_attempts(max_attempts)
        doc = self._s.trials.find_one({"_id": trial_id})
        if doc is None:
            raise NotFound("trial", trial_id)
        now = self._s.clock()
        if doc["state"] == _QUEUED:
            if self._s.cancelled(doc["sweep_id"]):
                self._cancel_queued(doc, now)
                return None
            expect = {"_id": trial_id, "state": _QUEUED, "attempt": doc["attempt"]}
            if not self._start_attempt(expect, worker, now):
                return None
            self._s.bump(doc["sweep_id"], {_QUEUED: -1, _RUNNING: 1}, now)
            return self._s.trials.find_one({"_id": trial_id})
        if doc["state"] != _RUNNING:
            return None
        attempt, beat = doc["attempt"], doc.get("heartbeat_at")
        dead = takeover_attempt is not None and takeover_attempt == attempt
        if not dead and beat is not None and beat >= now - stale:
            return None
        expect = {"_id": trial_id, "state": _RUNNING, "attempt": attempt}
        if not dead:
            expect["heartbeat_at"] = beat  # unchanged since read: no heartbeat came in between
        why = (
            f"attempt {attempt} was taken over: its process is gone"
            if dead
            else f"no heartbeat since {beat.isoformat() if beat else 'the start'}"
        )
        lost = history_entry(doc, "lost", now, why)
        if doc.get("stop_requested") or self._s.cancelled(doc["sweep_id"]):
            ended = self._s.trials.update_one(
                expect,
                {
                    "$set": {"state": _CANCELLED, "finished_at": now, "updated_at": now},
                    "$push": {"history": lost},
                },
            )
            if ended.modified_count:
                self._s.bump(doc["sweep_id"], {_RUNNING: -1, _CANCELLED: 1}, now)
            return None
        if doc.get("lost_attempts", 0) + 1 >= max_attempts:
            self._end_poisoned(doc, expect, lost, max_attempts, now)
            return None
        if not self._start_attempt(expect, worker, now, lost=lost):
            return None
        log.info("trial %s: attempt %d lost (%s); taken over", trial_id, attempt, why)
        return self._s.trials.find_one({"_id": trial_id})

    def _start_attempt(
        self,
        expect: dict[str, Any],
        worker: dict[str, Any],
        now: datetime,
        lost: dict[str, Any] | None = None,
    ) -> bool:
        update: dict[str, Any] = {"$set": running_fields(worker, now), "$inc": {"attempt": 1}}
        if lost is not None:
            update["$push"] = {"history": lost}
            update["$inc"]["lost_attempts"] = 1
        return self._s.trials.update_one(expect, update).modified_count == 1

    @available
    def claim_queued(self, expected: Mapping[str, int], worker: Mapping[str, Any]) -> list[str]:
        """Claim queued trials for `worker` in one write; the ids this call claimed, in order.

        `expected` maps each trial id to the attempt it is queued at (0 for a new trial; a
        message carries it, `scheduler.enqueue`); a claimed trial runs attempt
        ``expected + 1`` and its document need not be read. A trial in another state or at
        another attempt, unknown, or of a cancelled sweep is left alone and not returned:
        the caller asks `claim`, which takes over dead attempts and cancels.
        """
        return batch_writes.claim_queued(self._s, expected, worker)

    @available
    def heartbeat_many(self, attempts: Mapping[str, int]) -> dict[str, Heartbeat]:
        """Record that each attempt (trial id -> attempt) is alive, in one write; what each
        should do (`Heartbeat`).

        ``ok``: it holds the claim. ``stop``: it holds the claim but its sweep was
        cancelled (finish it ``cancelled``). ``prune``: it holds the claim and a prune
        request names this attempt (finish it ``pruned``); ``stop`` wins over ``prune``.
        ``lost``: it no longer holds the claim (requeued, taken over, or the trial is gone).
        """
        return batch_writes.heartbeat_many(self._s, attempts)

    @available
    def report_many(self, rows: Sequence[EpochRow]) -> None:
        """Store many epochs' metrics (of any trials and attempts) in two writes.

        The first row of an (attempt, epoch) is kept, never overwritten: a repeated one
        changes nothing. Each trial's ``progress`` shows its latest epoch of the batch while
        the attempt holds the claim. `NotFound` for an unknown trial and `InvalidQuery` for
        an attempt it has not had (or a bad field), before any row is written.
        """
        batch_writes.report_many(self._s, rows)

    @available
    def finish_many(self, finishes: Sequence[Finish]) -> dict[str, bool]:
        """End running attempts; by trial id, True where this call ended it.

        Only the attempt that holds the claim can finish, once: a second finish, or one by
        an attempt that lost the claim, changes nothing (False). A `Finish`'s state is
        complete, failed or pruned (`InvalidTransition` otherwise); cancelled is accepted
        from an attempt whose sweep asked it to stop. Its `result` holds the final metrics,
        whose ``objective`` (or else the sweep's objective metric) is also stored at top
        level; its `extra` fields (param_count, train_seconds, device, dtype, versions, ...)
        are stored at top level and may not name a lifecycle field. The ended attempt goes
        into the trial's ``history``.

        The input is checked before anything is written (a bad field raises and changes
        nothing). Then each finish is one conditional update that builds the attempt's
        history entry on the server (a pipeline update: no read first). A trial the store
        does not have (`NotFound`), or a cancelled finish without a stop request
        (`InvalidTransition`), is found after the write: the others of the call are
        written, and the error is raised.
        """
        return batch_writes.finish_many(self._s, finishes)

    @available
    def trial(self, trial_id: str) -> dict[str, Any]:
        """The trial as it stands (no metric rows); `NotFound` if the store does not have it."""
        check_id("trial_id", trial_id)
        doc = self._s.trials.find_one({"_id": trial_id})
        if doc is None:
            raise NotFound("trial", trial_id)
        return doc

    @available
    def objective(self, sweep_id: str) -> dict[str, str]:
        """The sweep's objective, ``{metric, direction}``; `NotFound` for an unknown sweep."""
        metric, direction = self._s.objective(sweep_id)
        return {"metric": metric, "direction": direction}

    def _end_poisoned(
        self,
        doc: Mapping[str, Any],
        expect: dict[str, Any],
        lost: dict[str, Any],
        max_attempts: int,
        now: datetime,
    ) -> bool:
        """End a running trial `failed` whose attempts died `max_attempts` times; True if
        this call did (`expect` is the filter that proves the attempt is still the dead one)."""
        error = poison_reason(doc, max_attempts)
        ended = self._s.trials.update_one(
            expect,
            {
                "$set": {
                    "state": _FAILED,
                    "finished_at": now,
                    "updated_at": now,
                    "error": error,
                    "progress": None,
                },
                "$inc": {"lost_attempts": 1},
                "$push": {"history": lost},
            },
        )
        if not ended.modified_count:
            return False
        self._s.bump(doc["sweep_id"], {_RUNNING: -1, _FAILED: 1}, now)
        self._s.log_finished([doc["_id"]])
        log.warning("trial %s failed: %s", doc["_id"], error)
        return True

    def _cancel_queued(self, doc: Mapping[str, Any], now: datetime) -> None:
        done = self._s.trials.update_one(
            {"_id": doc["_id"], "state": _QUEUED, "attempt": doc["attempt"]},
            {"$set": {"state": _CANCELLED, "finished_at": now, "updated_at": now}},
        )
        if done.modified_count:
            self._s.bump(doc["sweep_id"], {_QUEUED: -1, _CANCELLED: 1}, now)
