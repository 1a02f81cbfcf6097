"""The trial lifecycle as store writes: claim, heartbeat, report, finish.

Creating a sweep and its trials is in `core.feeding`; whole-sweep actions (cancel, requeue
stale, retry failed, delete) are in `core.sweep_actions`.

Every transition is one ``update_one`` whose filter names the state and attempt it
expects, so of concurrent callers exactly one changes the trial; that caller then moves
the sweep's counts. Why this shape, and not ``find_one_and_update``, is in `core.store`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from pymongo.errors import DuplicateKeyError

from core import summaries
from core.errors import InvalidQuery, InvalidTransition, NotFound
from core.query import check_attempt, check_id, check_keys, check_seconds
from core.records import (
    RESERVED_TRIAL_FIELDS,
    finite_number,
    history_entry,
)
from core.settings import DEFAULT_MAX_ATTEMPTS
from core.states import FINISH_STATES, Heartbeat, TrialState
from core.views import Views, available, summaries_projection

log = logging.getLogger(__name__)

_QUEUED = TrialState.QUEUED.value
_RUNNING = TrialState.RUNNING.value
_FAILED = TrialState.FAILED.value
_CANCELLED = TrialState.CANCELLED.value
_STATES = frozenset(s.value for s in TrialState)
# What `finish` accepts: a finish state, or cancelled after a stop request.
_FINISHES = frozenset(s.value for s in FINISH_STATES) | {_CANCELLED}


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


#: The path of the attempt a prune request names (`core.prune_requests`).
PRUNE_ATTEMPT = "prune_requested.attempt"


def not_pruned(attempt: int) -> dict[str, Any]:
    """The filter clause of an attempt that no prune request names (an older attempt's
    request, or none at all, leaves it alone)."""
    return {PRUNE_ATTEMPT: {"$ne": attempt}}


def running_fields(worker: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """What a claim sets on a trial that starts an attempt (with the attempt's number moved
    by the caller): one shape for the careful claim and the batched one."""
    return {
        "state": _RUNNING,
        "worker": worker,
        "started_at": now,
        "heartbeat_at": now,
        "updated_at": now,
        "progress": None,
    }


class Lifecycle(Views):
    """The writes of the trial lifecycle (see `core.states` for the diagram)."""

    insert_batch = 1000
    _indexed: bool

    def ensure_indexes(self) -> None:
        """Create the store's indexes; `core.store.Store` defines them."""
        raise NotImplementedError

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
        doc = self._trials.find_one({"_id": trial_id})
        if doc is None:
            raise NotFound("trial", trial_id)
        now = self._clock()
        if doc["state"] == _QUEUED:
            if self._cancelled(doc["sweep_id"]):
                self._cancel_queued(doc, now)
                return None
            expect = {"_id": trial_id, "state": _QUEUED, "attempt": doc["attempt"]}
            if not self._start_attempt(expect, worker, now):
                return None
            self._bump(doc["sweep_id"], {_QUEUED: -1, _RUNNING: 1}, now)
            return self._trials.find_one({"_id": trial_id})
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
        if doc.get("stop_requested") or self._cancelled(doc["sweep_id"]):
            ended = self._trials.update_one(
                expect,
                {
                    "$set": {"state": _CANCELLED, "finished_at": now, "updated_at": now},
                    "$push": {"history": lost},
                },
            )
            if ended.modified_count:
                self._bump(doc["sweep_id"], {_RUNNING: -1, _CANCELLED: 1}, now)
            return None
        if doc.get("lost_attempts", 0) + 1 >= max_attempts:
            self._end_poisoned(doc, expect, lost, max_attempts, now)
            return None
        if not self._start_attempt(expect, worker, now, lost=lost):
            return None
        log.info("trial %s: attempt %d lost (%s); taken over", trial_id, attempt, why)
        return self._trials.find_one({"_id": trial_id})

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
        return self._trials.update_one(expect, update).modified_count == 1

    def _log_finished(self, trial_ids: Sequence[str]) -> None:
        """Enter trials that a write without a read just ended into their sweeps' summaries
        (`core.summaries`): one read of their rows, one summary write per sweep."""
        if not trial_ids:
            return
        by_sweep: dict[str, list[dict[str, Any]]] = {}
        fields = summaries_projection(["sweep_id"])
        for doc in self._trials.find({"_id": {"$in": list(trial_ids)}}, fields):
            by_sweep.setdefault(doc["sweep_id"], []).append(doc)
        for sweep_id, docs in by_sweep.items():
            summaries.on_finished(self.db, sweep_id, docs)

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
        ended = self._trials.update_one(
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
        self._bump(doc["sweep_id"], {_RUNNING: -1, _FAILED: 1}, now)
        self._log_finished([doc["_id"]])
        log.warning("trial %s failed: %s", doc["_id"], error)
        return True

    def _cancel_queued(self, doc: Mapping[str, Any], now: datetime) -> None:
        done = self._trials.update_one(
            {"_id": doc["_id"], "state": _QUEUED, "attempt": doc["attempt"]},
            {"$set": {"state": _CANCELLED, "finished_at": now, "updated_at": now}},
        )
        if done.modified_count:
            self._bump(doc["sweep_id"], {_QUEUED: -1, _CANCELLED: 1}, now)

    @available
    def heartbeat(self, trial_id: str, attempt: int) -> Heartbeat:
        """Record that `attempt` is alive; say whether it should go on (see `Heartbeat`).

        ``ok``: it holds the claim. ``stop``: it holds the claim but its sweep was
        cancelled. ``prune``: it holds the claim and a prune request names this attempt.
        ``lost``: it no longer holds the claim (requeued or taken over).
        Raises `NotFound` for an unknown trial.
        """
        check_id("trial_id", trial_id)
        check_attempt(attempt)
        now = self._clock()
        beat = {"$set": {"heartbeat_at": now, "updated_at": now}}
        holder = {"_id": trial_id, "state": _RUNNING, "attempt": attempt}
        going_on = {**holder, "stop_requested": False, **not_pruned(attempt)}
        if self._trials.update_one(going_on, beat).matched_count:
            return Heartbeat.OK
        if self._trials.update_one({**holder, "stop_requested": True}, beat).matched_count:
            return Heartbeat.STOP
        if self._trials.update_one({**holder, PRUNE_ATTEMPT: attempt}, beat).matched_count:
            return Heartbeat.PRUNE
        if self._trials.find_one({"_id": trial_id}, {"_id": 1}) is None:
            raise NotFound("trial", trial_id)
        return Heartbeat.LOST

    @available
    def report(self, trial_id: str, attempt: int, epoch: int, metrics: Mapping[str, Any]) -> None:
        """Store one epoch's metrics of an attempt; the same (attempt, epoch) again is a no-op.

        The first report of an (attempt, epoch) is kept, never overwritten. The trial's
        ``progress`` shows the latest report while the attempt holds the claim.
        """
        check_id("trial_id", trial_id)
        check_attempt(attempt)
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise InvalidQuery("epoch", f"must be an integer >= 0, got {epoch!r}")
        metrics = check_keys("metrics", metrics)
        now = self._clock()
        shown = self._trials.update_one(
            {"_id": trial_id, "state": _RUNNING, "attempt": attempt},
            {"$set": {"progress": {"epoch": epoch, "metrics": metrics}, "updated_at": now}},
        )
        if shown.matched_count:
            sweep_id = trial_id.partition("-")[0]
        else:
            doc = self._trials.find_one({"_id": trial_id}, {"sweep_id": 1, "attempt": 1})
            if doc is None:
                raise NotFound("trial", trial_id)
            if attempt > doc["attempt"]:
                raise InvalidQuery(
                    "attempt", f"trial {trial_id} has had {doc['attempt']} attempts, got {attempt}"
                )
            sweep_id = doc["sweep_id"]
        # A concurrent identical report may insert the row first; one row it is.
        with contextlib.suppress(DuplicateKeyError):
            self._metrics.update_one(
                {"trial_id": trial_id, "attempt": attempt, "epoch": epoch},
                {"$setOnInsert": {"sweep_id": sweep_id, "metrics": metrics, "reported_at": now}},
                upsert=True,
            )

    @available
    def finish(
        self,
        trial_id: str,
        attempt: int,
        state: TrialState | str,
        *,
        result: Mapping[str, Any] | None = None,
        error: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> bool:
        """End the running `attempt` in `state`; True if this call did, False if a no-op.

        Only the attempt that holds the claim can finish, once: a second finish, or one by
        an attempt that lost the claim, changes nothing and returns False. `state` is
        complete, failed or pruned (`InvalidTransition` otherwise); cancelled is accepted
        from an attempt whose sweep asked it to stop. `result` holds the final metrics; its
        ``objective`` (or else the sweep's objective metric) is also stored at top level.
        `extra` fields (param_count, train_seconds, device, dtype, versions, ...) are stored
        at top level and may not name a lifecycle field.
        """
        check_id("trial_id", trial_id)
        check_attempt(attempt)
        target = self._finish_state(state)
        result = check_keys("result", result) if result is not None else None
        extra = check_keys("extra", extra) if extra is not None else {}
        reserved = sorted(set(extra) & RESERVED_TRIAL_FIELDS)
        if reserved:
            raise InvalidQuery(f"extra.{reserved[0]}", "is a lifecycle field that finish sets")
        if error is not None and not isinstance(error, str):
            raise InvalidQuery("error", f"must be a string, got {error!r}")
        doc = self._trials.find_one({"_id": trial_id})
        if doc is None:
            raise NotFound("trial", trial_id)
        if doc["state"] != _RUNNING or doc["attempt"] != attempt:
            log.info("trial %s: finish by attempt %d ignored (%s)", trial_id, attempt, doc["state"])
            return False
        if target == _CANCELLED and not doc.get("stop_requested"):
            raise InvalidTransition(
                _RUNNING,
                _CANCELLED,
                "only an attempt whose sweep was cancelled may finish cancelled; "
                "use complete, failed or pruned",
            )
        now = self._clock()
        fields = {
            **extra,
            "state": target,
            "finished_at": now,
            "updated_at": now,
            "result": result,
            "objective": self._objective_of(doc["sweep_id"], result),
            "error": error,
        }
        done = self._trials.update_one(
            {"_id": trial_id, "state": _RUNNING, "attempt": attempt},
            {"$set": fields, "$push": {"history": history_entry(doc, target, now, error)}},
        )
        if not done.modified_count:
            return False
        self._bump(doc["sweep_id"], {_RUNNING: -1, target: 1}, now)
        summaries.on_finished(self.db, doc["sweep_id"], [{**doc, **fields}])
        return True

    @staticmethod
    def _finish_state(state: Any) -> str:
        value = getattr(state, "value", state)
        names = ", ".join(sorted(s.value for s in FINISH_STATES))
        if value not in _STATES:
            raise InvalidTransition(
                _RUNNING, str(value), f"not a trial state; finish accepts {names}"
            )
        if value not in _FINISHES:
            raise InvalidTransition(_RUNNING, value, f"not a finish; finish accepts {names}")
        return value

    def _bump(self, sweep_id: str, moves: Mapping[str, int], now: datetime) -> None:
        inc: dict[str, int] = {f"counts.{state}": n for state, n in moves.items() if n}
        if inc:
            inc["counts_rev"] = 1
            self._sweeps.update_one({"_id": sweep_id}, {"$inc": inc, "$set": {"updated_at": now}})

    def _objective_of(self, sweep_id: str, result: Mapping[str, Any] | None) -> float | None:
        if not result:
            return None
        if "objective" in result:
            return finite_number(result["objective"])
        return finite_number(result.get(self._objective(sweep_id)[0]))
