"""Sweep administration on MongoDB (`core.store.roles.SweepAdmin`, for the API and the
scheduler): create a sweep, cancel it, requeue its stale trials, retry its failed ones,
delete it, ask running attempts to stop early, and repair its counts.

Its transitions are the same conditional ``update_one``s as the trial lifecycle's
(`core.store.lifecycle`): of concurrent callers exactly one moves a trial, and that caller
moves the sweep's counts. Cancelling drops the planned trials through the feeding role
(`core.store.feeding`), which owns them; a sweep's later windows are that role's too.
"""

from __future__ import annotations

import logging
import secrets
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import bson
from pymongo import UpdateOne
from pymongo.errors import PyMongoError

from core.errors import InvalidQuery, InvalidTransition
from core.settings import DEFAULT_MAX_ATTEMPTS
from core.spec.sweep import SweepSpec
from core.states import TrialState
from core.store import summaries
from core.store.lifecycle import not_pruned, poison_reason
from core.store.query import check_attempt, check_id, check_max_attempts, check_seconds
from core.store.records import (
    REQUEUED_FIELDS,
    TrialPointLike,
    change_entry,
    full_counts,
    history_entry,
    sweep_document,
    trial_document,
)
from core.store.roles import Artifacts, Feeding, SweepAdmin
from core.store.state import StoreState, available
from core.store.texts import store_texts

__all__ = ["MongoSweepAdmin"]

log = logging.getLogger(__name__)

_QUEUED = TrialState.QUEUED.value
_RUNNING = TrialState.RUNNING.value
_FAILED = TrialState.FAILED.value
_CANCELLED = TrialState.CANCELLED.value


#: The entries a sweep's history keeps (the latest): a size a document always has room for.
MAX_CHANGES = 1000


def _kept(entry: dict[str, Any]) -> dict[str, Any]:
    """A ``$push`` of `entry` to a sweep's ``changes`` that keeps the last `MAX_CHANGES`."""
    return {"$each": [entry], "$slice": -MAX_CHANGES}


class MongoSweepAdmin(SweepAdmin):
    """`SweepAdmin` on the store's shared state (`core.store.state`); `feeding` is the
    store's feeding role, which drops a cancelled sweep's planned trials; `artifacts` its
    artifacts role, which a deleted sweep's models and checkpoints go with."""

    def __init__(
        self, state: StoreState, feeding: Feeding, artifacts: Artifacts | None = None
    ) -> None:
        self._s = state
        self._feeding = feeding
        self._artifacts = artifacts

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
        # Trials go in first, in batches, and the sweep document last, so a visible sweep is
        # complete; the sweep document (which holds the whole spec) and the first trial are
        # encoded before anything is written, so a value BSON cannot store changes nothing.
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
            objectives=[o.model_dump() for o in spec.objectives],
            constraints=[c.to_dict() for c in spec.constraints],
        )
        if total is not None:
            sweep["planned"] = total - len(trials)
            sweep["sending"] = [f"{sweep_id}-{p.id}" for p in trials]
        sweep.update(sweep_fields or {})

        def doc_of(p: TrialPointLike) -> dict[str, Any]:
            config = p.config or spec.seeded_config(p.params, p.seed, base)
            doc = trial_document(sweep_id, p, config, now)
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
                store_texts(self._s.texts, sweep_id, docs, now)  # before the trials
                self._s.trials.insert_many(docs, ordered=False)
            self._s.sweeps.insert_one(sweep)
        except BaseException:
            try:
                self._s.trials.delete_many({"sweep_id": sweep_id})
                self._s.texts.delete(sweep_id)
            except PyMongoError as exc:
                log.warning("could not remove the trials of failed sweep %s: %s", sweep_id, exc)
            raise
        self._s.objectives[sweep_id] = (spec.objective.metric, spec.objective.direction)
        summaries.on_created(self._s.db, sweep_id, spec.objective.direction)
        log.info("created sweep %s (%s) with %d trials", sweep_id, spec.name, len(trials))
        return sweep_id

    @available
    def cancel_sweep(self, sweep_id: str) -> dict[str, int]:
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
        self._feeding.shrink_plan(sweep_id)  # planned trials are never created
        stopping = self._s.trials.update_many(
            {"state": _RUNNING, "sweep_id": sweep_id, "stop_requested": False},
            {"$set": {"stop_requested": True, "updated_at": now}},
        )
        return {"cancelled": ended.modified_count, "stopping": stopping.modified_count}

    @available
    def pause_sweep(self, sweep_id: str, *, by: str | None = None) -> bool:
        doc = self._s.sweep(sweep_id)
        if doc.get("cancelled_at") is not None:
            raise InvalidTransition("cancelled", "paused", "a cancelled sweep cannot be paused")
        now = self._s.clock()
        # The flag is what a claim's counter write asks for (`core.store.lifecycle`): from
        # this write on no claim of the sweep's trials starts one.
        paused = self._s.sweeps.update_one(
            {"_id": sweep_id, "cancelled_at": None, "paused_at": None},
            {"$set": {"paused_at": now, "updated_at": now},
             "$push": {"changes": _kept(change_entry("pause", "paused", by, now))}},
        )  # fmt: skip
        return bool(paused.modified_count)

    @available
    def resume_sweep(self, sweep_id: str, *, by: str | None = None) -> bool:
        self._s.sweep(sweep_id)
        now = self._s.clock()
        resumed = self._s.sweeps.update_one(
            {"_id": sweep_id, "paused_at": {"$ne": None}},
            {"$set": {"paused_at": None, "updated_at": now},
             "$push": {"changes": _kept(change_entry("resume", "resumed", by, now))}},
        )  # fmt: skip
        return bool(resumed.modified_count)

    @available
    def change_spec(
        self,
        sweep_id: str,
        rev: int,
        spec: Mapping[str, Any],
        summary: str,
        *,
        by: str | None = None,
    ) -> int:
        doc = self._s.sweep(sweep_id)
        if doc.get("cancelled_at") is not None:
            raise InvalidTransition("cancelled", "changed", "a cancelled sweep cannot be changed")
        now = self._s.clock()
        entry = change_entry("change", summary, by, now)
        entry["rev"] = rev + 1
        # A sweep never changed has no spec_rev: None matches it.
        changed = self._s.sweeps.update_one(
            {"_id": sweep_id, "cancelled_at": None, "spec_rev": rev or None},
            {"$set": {"spec": dict(spec), "spec_rev": rev + 1, "updated_at": now},
             "$push": {"changes": _kept(entry)}},
        )  # fmt: skip
        if not changed.modified_count:
            raise InvalidTransition(
                "changed", "changed", "the sweep was changed or cancelled meanwhile; try again"
            )
        return rev + 1

    @available
    def requeue_stale(
        self,
        stale_after: float,
        sweep_id: str | None = None,
        *,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        count_lost: bool = True,
    ) -> list[str]:
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
    def fail_undelivered(self, trial_ids: Sequence[str], reason: str) -> list[str]:
        for trial_id in trial_ids:
            check_id("trial_id", trial_id)
        now = self._s.clock()
        docs = list(self._s.trials.find({"_id": {"$in": list(trial_ids)}, "state": _QUEUED},
                                        {"sweep_id": 1, "attempt": 1}))  # fmt: skip
        ended: list[str] = []
        moves: dict[str, Counter[str]] = {}
        try:
            for doc in docs:
                moved = self._s.trials.update_one(
                    {"_id": doc["_id"], "state": _QUEUED, "attempt": doc["attempt"]},
                    {"$set": {"state": _FAILED, "finished_at": now, "updated_at": now,
                              "progress": None, "error": reason}},
                )  # fmt: skip
                if moved.modified_count:
                    ended.append(doc["_id"])
                    moves.setdefault(doc["sweep_id"], Counter()).update({_QUEUED: -1, _FAILED: 1})
                    log.warning("trial %s failed: %s", doc["_id"], reason)
        finally:
            for sid, move in moves.items():
                self._s.bump(sid, move, now)
            if ended:
                self._s.log_finished(ended)
        return ended

    @available
    def retry_failed(self, sweep_id: str) -> list[str]:
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
        texts = self._s.texts.delete(sweep_id)
        artifacts = self._artifacts.delete_sweep(sweep_id) if self._artifacts else 0
        log.info("deleted sweep %s: %d trials, %d metric rows, %d texts, %d artifacts",
                 sweep_id, trials, metrics, texts, artifacts)  # fmt: skip
        return {"trials": trials, "metrics": metrics, "texts": texts, "artifacts": artifacts}

    @available
    def recount(self, sweep_id: str) -> dict[str, int]:
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
    def request_prune(self, requests: Mapping[str, tuple[int, int]]) -> list[str]:
        if not isinstance(requests, Mapping):
            raise InvalidQuery(
                "requests", f"must map trial ids to (attempt, epoch), got {requests!r}"
            )
        return write_prunes(self._s, requests)


def write_prunes(
    state: StoreState, requests: Mapping[str, tuple[int, int]], others: Sequence[UpdateOne] = ()
) -> list[str]:
    """Write the prune requests (`request_prune`'s, checked first) with `others` (other
    updates of the trials collection: `Feeding.mark_judged`'s verdicts) in one bulk write;
    the ids this call marked."""
    now = state.call_time()
    checked = {t: _prune_request(t, r) for t, r in requests.items()}
    ops = [
        UpdateOne(
            {"_id": trial_id, "state": _RUNNING, "attempt": attempt, **not_pruned(attempt)},
            {"$set": {"prune_requested": {"attempt": attempt, "epoch": epoch, "at": now}}},
        )
        for trial_id, (attempt, epoch) in checked.items()
    ]
    if not ops and not others:
        return []
    done = state.trials.bulk_write([*others, *ops], ordered=False)
    if not ops:
        return []
    if done.modified_count == len(others) + len(ops):
        marked = list(checked)
    elif done.modified_count == 0:
        marked = []
    else:  # rare: some were finished, lost or asked already; which did this call mark?
        docs = state.docs(checked, {"prune_requested": 1})
        marked = [
            t
            for t, (attempt, _) in checked.items()
            if (docs.get(t, {}).get("prune_requested") or {}).get("at") == now
            and docs[t]["prune_requested"].get("attempt") == attempt
        ]
    log.info("prune requested for %d of %d trial(s)", len(marked), len(checked))
    return marked


def _prune_request(trial_id: Any, request: Any) -> tuple[int, int]:
    """A checked (attempt, epoch) pair of a prune request (`InvalidQuery` naming the field)."""
    check_id("trial_id", trial_id)
    if not isinstance(request, tuple | list) or len(request) != 2:
        raise InvalidQuery(
            f"requests.{trial_id}", f"must be an (attempt, epoch) pair, got {request!r}"
        )
    attempt, epoch = request
    check_attempt(attempt)
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise InvalidQuery("epoch", f"must be an integer >= 0, got {epoch!r}")
    return attempt, epoch
