"""Store writes that act on a whole sweep's trials: cancel, requeue stale, retry, delete.

They use the same conditional ``update_one`` transitions as `core.lifecycle` (of concurrent
callers exactly one moves a trial) and move the sweep's counts with `Lifecycle._bump`.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import timedelta
from typing import Any

from core import summaries
from core.errors import InvalidTransition
from core.feeding import Feeding
from core.lifecycle import check_max_attempts, poison_reason
from core.query import check_id, check_seconds
from core.records import REQUEUED_FIELDS, history_entry
from core.settings import DEFAULT_MAX_ATTEMPTS
from core.states import TrialState
from core.views import available

log = logging.getLogger(__name__)

_QUEUED = TrialState.QUEUED.value
_RUNNING = TrialState.RUNNING.value
_FAILED = TrialState.FAILED.value
_CANCELLED = TrialState.CANCELLED.value


class SweepActions(Feeding):
    """Cancel, requeue, retry and delete, sweep by sweep."""

    @available
    def cancel_sweep(self, sweep_id: str) -> dict[str, int]:
        """Cancel a sweep: queued trials become cancelled, running ones are asked to stop,
        planned ones are dropped (the sweep's ``trial_count`` shrinks to those created).

        Returns ``{"cancelled": n, "stopping": m}`` for what this call changed. From now
        on a claim or requeue of one of its trials cancels it instead.
        """
        self._sweep(sweep_id)
        now = self._clock()
        # The flag goes first, so a claim that reads it after this point cancels instead.
        self._sweeps.update_one(
            {"_id": sweep_id, "cancelled_at": None},
            {"$set": {"cancelled_at": now, "updated_at": now}},
        )
        self._objectives.pop(sweep_id, None)
        ended = self._trials.update_many(
            {"state": _QUEUED, "sweep_id": sweep_id},
            {"$set": {"state": _CANCELLED, "finished_at": now, "updated_at": now}},
        )
        n = ended.modified_count
        self._bump(sweep_id, {_QUEUED: -n, _CANCELLED: n}, now)
        self.shrink_plan(sweep_id)  # planned trials are never created (`core.feeding`)
        stopping = self._trials.update_many(
            {"state": _RUNNING, "sweep_id": sweep_id, "stop_requested": False},
            {"$set": {"stop_requested": True, "updated_at": now}},
        )
        return {"cancelled": ended.modified_count, "stopping": stopping.modified_count}

    @available
    def requeue_stale(
        self,
        stale_after: float,
        sweep_id: str | None = None,
        *,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        count_lost: bool = True,
    ) -> list[str]:
        """Send running trials whose heartbeat is older than `stale_after` s back to the queue.

        The lost attempt goes into history and counts in ``lost_attempts``; the next claim
        is attempt + 1. The loss that makes `max_attempts` ends the trial ``failed`` instead
        (as `Lifecycle.claim` does). Returns the ids this call requeued (each by exactly one
        of any concurrent callers), so the caller can publish them again. A trial whose
        sweep was cancelled is cancelled instead; neither it nor a failed one is returned.
        ``count_lost=False`` requeues without counting: for a caller that stopped those
        attempts itself (a resumed ``sweepstack run``), whose trials are no poison.
        """
        stale = timedelta(seconds=check_seconds("stale_after", stale_after))
        check_max_attempts(max_attempts)
        now = self._clock()
        query: dict[str, Any] = {"state": _RUNNING}
        if sweep_id is not None:
            query["sweep_id"] = check_id("sweep_id", sweep_id)
        query["heartbeat_at"] = {"$lt": now - stale}
        fields = {
            "sweep_id": 1,
            "attempt": 1,
            "heartbeat_at": 1,
            "stop_requested": 1,
            "lost_attempts": 1,
        }
        candidates = list(self._trials.find(query, {**fields, "worker": 1, "started_at": 1}))
        requeued: list[str] = []
        poisoned_ids: list[str] = []
        moves: dict[str, Counter[str]] = {}
        try:
            for doc in candidates:
                beat = doc["heartbeat_at"]
                lost = history_entry(doc, "lost", now, f"no heartbeat since {beat.isoformat()}")
                cancel = doc.get("stop_requested") or self._cancelled(doc["sweep_id"])
                losses = doc.get("lost_attempts", 0) + 1
                poisoned = count_lost and not cancel and losses >= max_attempts
                if cancel:
                    to = _CANCELLED
                    change = {"state": _CANCELLED, "finished_at": now, "updated_at": now}
                elif poisoned:
                    to = _FAILED
                    change = {
                        "state": _FAILED,
                        "finished_at": now,
                        "updated_at": now,
                        "progress": None,
                        "error": poison_reason(doc, max_attempts),
                    }
                else:
                    to = _QUEUED
                    change = {**REQUEUED_FIELDS, "queued_at": now, "updated_at": now}
                # Filter and count in one update: of concurrent callers one counts the loss.
                moved = self._trials.update_one(
                    {
                        "_id": doc["_id"],
                        "state": _RUNNING,
                        "attempt": doc["attempt"],
                        "heartbeat_at": beat,
                    },
                    {
                        "$set": change,
                        "$push": {"history": lost},
                        "$inc": {"lost_attempts": 1 if count_lost else 0},
                    },
                )
                if moved.modified_count:
                    moves.setdefault(doc["sweep_id"], Counter()).update({_RUNNING: -1, to: 1})
                    if to == _QUEUED:
                        requeued.append(doc["_id"])
                    elif to == _FAILED:
                        poisoned_ids.append(doc["_id"])
                        log.warning("trial %s failed: %s", doc["_id"], change["error"])
        finally:
            for sid, move in moves.items():
                self._bump(sid, move, now)
            self._log_finished(poisoned_ids)
        if requeued:
            log.info("requeued %d stale trials", len(requeued))
        return requeued

    @available
    def retry_failed(self, sweep_id: str) -> list[str]:
        """Queue a sweep's failed trials again; their failed attempts stay in history.

        A retry starts the count of lost attempts afresh (``lost_attempts`` back to 0): a
        trial that failed because its worker died `max_attempts` times gets that many again,
        as the user asked for it. Returns the ids this call queued. `InvalidTransition` if
        the sweep is cancelled.
        """
        sweep = self._sweep(sweep_id)
        if sweep.get("cancelled_at") is not None:
            raise InvalidTransition(_FAILED, _QUEUED, f"sweep {sweep_id} is cancelled")
        now = self._clock()
        failed = list(self._trials.find({"state": _FAILED, "sweep_id": sweep_id}, {"attempt": 1}))
        queued: list[str] = []
        try:
            for doc in failed:
                moved = self._trials.update_one(
                    {"_id": doc["_id"], "state": _FAILED, "attempt": doc["attempt"]},
                    {
                        "$set": {
                            **REQUEUED_FIELDS,
                            "stop_requested": False,
                            "lost_attempts": 0,
                            "queued_at": now,
                            "updated_at": now,
                        }
                    },
                )
                if moved.modified_count:
                    queued.append(doc["_id"])
        finally:
            self._bump(sweep_id, {_FAILED: -len(queued), _QUEUED: len(queued)}, now)
        return queued

    @available
    def delete_sweep(self, sweep_id: str, *, owner: str | None = None) -> dict[str, int]:
        """Remove a sweep, its trials and their metrics; how many trials and metric rows went.

        Refused with `InvalidTransition` while any trial is queued or running: a queued
        trial still has a message on the broker, so cancel the sweep first and wait for its
        running trials to stop. The trials themselves are checked, not the counters. The
        sweep document goes first, so it is invisible (`NotFound`) while the rest goes.
        `NotFound` if missing or not `owner`'s.
        """
        self._sweep(sweep_id, owner)
        active = {
            state: self._trials.find_one({"state": state, "sweep_id": sweep_id}, {"_id": 1})
            for state in (_QUEUED, _RUNNING)
        }
        if any(active.values()):
            counts = self.counts(sweep_id)
            raise InvalidTransition(
                "active",
                "deleted",
                f"sweep {sweep_id} has {counts[_QUEUED]} queued and {counts[_RUNNING]} "
                "running trials; cancel it and wait for the running ones to stop",
            )
        self._sweeps.delete_one({"_id": sweep_id})
        self._objectives.pop(sweep_id, None)
        self._best = {key: value for key, value in self._best.items() if key[0] != sweep_id}
        trials = self._trials.delete_many({"sweep_id": sweep_id}).deleted_count
        metrics = self._metrics.delete_many({"sweep_id": sweep_id}).deleted_count
        summaries.clear(self.db, sweep_id)
        log.info("deleted sweep %s: %d trials, %d metric rows", sweep_id, trials, metrics)
        return {"trials": trials, "metrics": metrics}
