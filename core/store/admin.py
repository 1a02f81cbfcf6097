"""Sweep administration, the store's role for the API and the scheduler: create a sweep,
cancel it, requeue its stale trials, retry its failed ones, delete it, ask running
attempts to stop early, and repair its counts and summaries.

Its transitions are the same conditional ``update_one``s as the trial lifecycle's
(`core.store.lifecycle`): of concurrent callers exactly one moves a trial, and that caller moves
the sweep's counts. The scheduler's writes while it feeds a sweep in windows are
`core.store.feeding`'s; the prune request's write is in `core.store.prune_requests`.
"""

from __future__ import annotations

import logging
import secrets
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import bson
from pymongo.errors import PyMongoError

from core.errors import InvalidQuery, InvalidTransition
from core.settings import DEFAULT_MAX_ATTEMPTS
from core.spec.sweep import SweepSpec
from core.states import TrialState
from core.store import prune_requests, summaries
from core.store.feeding import shrink_plan, trial_doc
from core.store.lifecycle import check_max_attempts, poison_reason
from core.store.query import check_id, check_seconds
from core.store.records import (
    REQUEUED_FIELDS,
    TrialPointLike,
    full_counts,
    history_entry,
    sweep_document,
)
from core.store.state import StoreState, available

log = logging.getLogger(__name__)

_QUEUED = TrialState.QUEUED.value
_RUNNING = TrialState.RUNNING.value
_FAILED = TrialState.FAILED.value
_CANCELLED = TrialState.CANCELLED.value


class SweepAdmin:
    """What acts on whole sweeps: for the API (a user's requests) and the scheduler.

    `create_sweep` stores a sweep and its first trials; `cancel_sweep`, `retry_failed` and
    `delete_sweep` act on a user's request; `requeue_stale` sends trials whose worker went
    silent back to the queue; `request_prune` asks running attempts to stop early;
    `recount` and `rebuild_summaries` repair what a process killed between two writes left
    behind.
    """

    def __init__(self, state: StoreState) -> None:
        self._s = state

    @available
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
        beyond these are planned (`core.store.feeding`), counted as queued, and these are noted
        in the sweep's ``sending`` list until the caller has sent them (`end_sending`).
        `extras` adds fields per trial id (the search's ``optuna`` record), `sweep_fields`
        to the sweep document (the submitter's feeding ``lease``).

        Trials go in first, in batches, and the sweep document last: a sweep that is
        visible is complete. The sweep document (which holds the whole spec) and the first
        trial are encoded before anything is written, so a value BSON cannot store is
        refused with nothing written. Should anything fail part way (the store, an encoding,
        an interrupt), what was inserted is removed (best effort) and the error is raised.
        Not idempotent: a retry makes another sweep.
        """
        if owner is not None and not isinstance(owner, str):
            raise InvalidQuery("owner", f"must be a string, got {owner!r}")
        indexes = [p.index for p in trials]
        if len({p.id for p in trials}) != len(trials) or len(set(indexes)) != len(trials):
            raise InvalidQuery("trials", "ids and indexes must be unique within a sweep")
        if any(not isinstance(i, int) or i < 0 for i in indexes):
            raise InvalidQuery("trials", "indexes must be integers >= 0")
        if total is not None and (
            isinstance(total, bool) or not isinstance(total, int) or total < len(trials)
        ):
            raise InvalidQuery("total", f"must be an integer >= {len(trials)}, got {total!r}")
        if not self._s.indexed:
            self._s.ensure_indexes()
        sweep_id = secrets.token_hex(6)
        now = self._s.clock()
        base = spec.base_config()
        sweep = sweep_document(
            sweep_id,
            name=spec.name,
            description=spec.description,
            spec=spec.document,
            metric=spec.objective.metric,
            direction=spec.objective.direction,
            owner=owner,
            trial_count=len(trials) if total is None else total,
            max_index=max(indexes, default=-1) if total is None else max([*indexes, total - 1]),
            now=now,
        )
        if total is not None:
            sweep["planned"] = total - len(trials)
            sweep["sending"] = [f"{sweep_id}-{p.id}" for p in trials]
        sweep.update(sweep_fields or {})

        def doc_of(p: TrialPointLike) -> dict[str, Any]:
            doc = trial_doc(sweep_id, spec, base, p, now)
            doc.update((extras or {}).get(p.id, {}))
            return doc

        first = [doc_of(p) for p in trials[:1]]
        try:
            for doc in (sweep, *first):
                bson.encode(doc)
        except (bson.errors.InvalidDocument, OverflowError) as exc:
            raise InvalidQuery("spec", f"cannot be stored: {exc}") from exc
        try:
            for start in range(0, len(trials), self._s.insert_batch):
                batch = trials[start : start + self._s.insert_batch]
                docs = [doc_of(p) for p in batch]
                self._s.trials.insert_many(docs, ordered=False)
            self._s.sweeps.insert_one(sweep)
        except BaseException:
            try:
                self._s.trials.delete_many({"sweep_id": sweep_id})
            except PyMongoError as exc:
                log.warning("could not remove the trials of failed sweep %s: %s", sweep_id, exc)
            raise
        self._s.objectives[sweep_id] = (spec.objective.metric, spec.objective.direction)
        summaries.on_created(self._s.db, sweep_id, spec.objective.direction)
        log.info("created sweep %s (%s) with %d trials", sweep_id, spec.name, len(trials))
        return sweep_id

    @available
    def cancel_sweep(self, sweep_id: str) -> dict[str, int]:
        """Cancel a sweep: queued trials become cancelled, running ones are asked to stop,
        planned ones are dropped (the sweep's ``trial_count`` shrinks to those created).

        Returns ``{"cancelled": n, "stopping": m}`` for what this call changed. From now
        on a claim or requeue of one of its trials cancels it instead.
        """
        self._s.sweep(sweep_id)
        now = self._s.clock()
        # The flag goes first, so a claim that reads it after this point cancels instead.
        self._s.sweeps.update_one(
            {"_id": sweep_id, "cancelled_at": None},
            {"$set": {"cancelled_at": now, "updated_at": now}},
        )
        self._s.objectives.pop(sweep_id, None)
        ended = self._s.trials.update_many(
            {"state": _QUEUED, "sweep_id": sweep_id},
            {"$set": {"state": _CANCELLED, "finished_at": now, "updated_at": now}},
        )
        n = ended.modified_count
        self._s.bump(sweep_id, {_QUEUED: -n, _CANCELLED: n}, now)
        shrink_plan(self._s, sweep_id)  # planned trials are never created (`core.store.feeding`)
        stopping = self._s.trials.update_many(
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
        (as `TrialLifecycle.claim` does). Returns the ids this call requeued (each by exactly one
        of any concurrent callers), so the caller can publish them again. A trial whose
        sweep was cancelled is cancelled instead; neither it nor a failed one is returned.
        ``count_lost=False`` requeues without counting: for a caller that stopped those
        attempts itself (a resumed ``sweepstack run``), whose trials are no poison.
        """
        stale = timedelta(seconds=check_seconds("stale_after", stale_after))
        check_max_attempts(max_attempts)
        now = self._s.clock()
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
        candidates = list(self._s.trials.find(query, {**fields, "worker": 1, "started_at": 1}))
        requeued: list[str] = []
        poisoned_ids: list[str] = []
        moves: dict[str, Counter[str]] = {}
        try:
            for doc in candidates:
                beat = doc["heartbeat_at"]
                lost = history_entry(doc, "lost", now, f"no heartbeat since {beat.isoformat()}")
                cancel = doc.get("stop_requested") or self._s.cancelled(doc["sweep_id"])
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
                moved = self._s.trials.update_one(
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
                self._s.bump(sid, move, now)
            self._s.log_finished(poisoned_ids)
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
        sweep = self._s.sweep(sweep_id)
        if sweep.get("cancelled_at") is not None:
            raise InvalidTransition(_FAILED, _QUEUED, f"sweep {sweep_id} is cancelled")
        now = self._s.clock()
        failed = list(self._s.trials.find({"state": _FAILED, "sweep_id": sweep_id}, {"attempt": 1}))
        queued: list[str] = []
        try:
            for doc in failed:
                moved = self._s.trials.update_one(
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
            self._s.bump(sweep_id, {_FAILED: -len(queued), _QUEUED: len(queued)}, now)
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
        self._s.sweep(sweep_id, owner)
        active = {
            state: self._s.trials.find_one({"state": state, "sweep_id": sweep_id}, {"_id": 1})
            for state in (_QUEUED, _RUNNING)
        }
        if any(active.values()):
            counts = self._s.sweep(sweep_id)["counts"]
            raise InvalidTransition(
                "active",
                "deleted",
                f"sweep {sweep_id} has {counts[_QUEUED]} queued and {counts[_RUNNING]} "
                "running trials; cancel it and wait for the running ones to stop",
            )
        self._s.sweeps.delete_one({"_id": sweep_id})
        self._s.forget(sweep_id)
        trials = self._s.trials.delete_many({"sweep_id": sweep_id}).deleted_count
        metrics = self._s.metrics.delete_many({"sweep_id": sweep_id}).deleted_count
        summaries.clear(self._s.db, sweep_id)
        log.info("deleted sweep %s: %d trials, %d metric rows", sweep_id, trials, metrics)
        return {"trials": trials, "metrics": metrics}

    @available
    def recount(self, sweep_id: str) -> dict[str, int]:
        """Count by state from the trials themselves (slow), and repair the stored counts.

        The repair is skipped if a transition of the sweep happened while counting.
        """
        sweep = self._s.sweep(sweep_id)
        rev = sweep.get("counts_rev", 0)
        rows = self._s.trials.aggregate(
            [{"$match": {"sweep_id": sweep_id}}, {"$group": {"_id": "$state", "n": {"$sum": 1}}}]
        )
        exact = full_counts({row["_id"]: row["n"] for row in rows})
        # Planned trials (`core.store.feeding`) are not created yet but count as queued.
        # (A write between the reads moves counts_rev: the repair below is then skipped.)
        exact["queued"] += int(sweep.get("planned") or 0)
        self._s.sweeps.update_one(
            {"_id": sweep_id, "counts_rev": rev},
            {"$set": {"counts": exact}, "$inc": {"counts_rev": 1}},
        )
        return exact

    @available
    def rebuild_summaries(self, sweep_id: str) -> None:
        """Make the sweep's summaries again from its trials (slow: reads every finished
        trial); for a summary left short by a process killed mid-finish (see `recount`)."""
        _metric, direction = self._s.objective(sweep_id)
        summaries.clear(self._s.db, sweep_id)
        self._s.build_summaries(sweep_id, direction)

    def request_prune(self, requests: Mapping[str, tuple[int, int]]) -> list[str]:
        """Ask running attempts to stop early; the ids this call marked, in input order.

        `requests` maps a trial id to (attempt, epoch the decision was taken at). Each trial
        still ``running`` at that attempt gets ``prune_requested: {attempt, epoch, at}``,
        all in one round trip (a bulk write of conditional updates). Idempotent: a trial
        already asked for that attempt keeps its first request and is not returned again;
        a trial in another state or at another attempt, or unknown, is left alone and not
        returned. The input is checked before anything is written.
        """
        return prune_requests.request_prune(self._s, requests)
