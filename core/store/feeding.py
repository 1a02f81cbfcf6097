"""The feeding role on MongoDB (`core.store.roles.Feeding`, for the scheduler that feeds a
sweep in windows: `scheduler.feed`, `scheduler.feeders`); what planned trials, the window
being sent and the feeding lease are, is on the role's page.

Planned trials live on the sweep document: ``planned`` (how many are still to be created),
counted in ``counts.queued`` and ``trial_count``, moved by conditional ``$inc``s on the
count read, so a concurrent addition or cancel is never counted twice. `add_trials` is
idempotent because a trial's ``_id`` is its sweep and point id: a repeat insert is a
duplicate key that changes nothing. The window being sent is one write per window on the
sweep document (``sending``), not one per trial: SecantusDB takes ~14 ms per trial for an
``update_many`` by ``_id $in``. The lease is taken and renewed by one conditional
``update_one`` (free, expired, or already ours), so of two schedulers exactly one feeds.
A changed spec (`core.store.changes`) is planned by the lease holder alone (`replan`, which
notes ``applied_rev``); until then `unfinished_sweeps` lists the sweep, finished or not.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from pymongo import UpdateOne
from pymongo.errors import BulkWriteError

from core.errors import InvalidQuery
from core.spec.sweep import SweepSpec
from core.states import TrialState
from core.store.admin import write_prunes
from core.store.query import check_attempt, check_id, check_seconds
from core.store.records import JUDGED_FIELDS, TrialPointLike, trial_document, verdict
from core.store.roles import Awaiting, Feeding
from core.store.state import StoreState, available
from core.store.texts import store_texts

__all__ = ["FEED_FIELDS", "MongoFeeding"]

log = logging.getLogger(__name__)

_QUEUED = TrialState.QUEUED.value
_RUNNING = TrialState.RUNNING.value
_CANCELLED = TrialState.CANCELLED.value
_DUPLICATE_KEY = 11000
#: What `feed_trials` reads of each trial: what a feeder's rebuild needs.
FEED_FIELDS = {
    "key": 1,
    "index": 1,
    "params": 1,
    "state": 1,
    "attempt": 1,
    "objective": 1,
    "objectives": 1,
    "constraints": 1,
    "optuna": 1,
    "config": 1,
}


class MongoFeeding(Feeding):
    """`Feeding` on the store's shared state (`core.store.state`)."""

    def __init__(self, state: StoreState) -> None:
        self._s = state

    @available
    def add_trials(
        self,
        sweep_id: str,
        spec: SweepSpec,
        points: Sequence[TrialPointLike],
        extras: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> list[str]:
        check_id("sweep_id", sweep_id)
        if not points:
            return []
        now = self._s.clock()
        base = spec.base_config()
        docs = []
        for p in points:
            config = p.config or spec.seeded_config(p.params, p.seed, base)
            doc = trial_document(sweep_id, p, config, now)
            doc.update((extras or {}).get(p.id, {}))
            docs.append(doc)
        store_texts(self._s.texts, sweep_id, docs, now)
        dup: set[str] = set()
        try:
            self._s.trials.insert_many(docs, ordered=False)
        except BulkWriteError as exc:
            for error in exc.details.get("writeErrors", []):
                if error.get("code") != _DUPLICATE_KEY:
                    raise
                dup.add(docs[error["index"]]["_id"])
        created = [d["_id"] for d in docs if d["_id"] not in dup]
        n = len(created)
        if not n:
            return []
        top = max(d["index"] for d in docs)
        moved = self._s.sweeps.update_one(
            {"_id": sweep_id, "planned": {"$gte": n}},
            {
                "$inc": {"planned": -n, "counts_rev": 1},
                "$max": {"max_index": top},
                "$set": {"updated_at": now},
            },
        )
        if not moved.modified_count:
            self._s.sweeps.update_one(
                {"_id": sweep_id},
                {
                    "$inc": {"trial_count": n, f"counts.{_QUEUED}": n, "counts_rev": 1},
                    "$max": {"max_index": top},
                    "$set": {"updated_at": now},
                },
            )
        if self._s.cancelled(sweep_id):
            ended = self._s.trials.update_many(
                {"_id": {"$in": created}, "state": _QUEUED},
                {"$set": {"state": _CANCELLED, "finished_at": now, "updated_at": now}},
            )
            k = ended.modified_count
            self._s.bump(sweep_id, {_QUEUED: -k, _CANCELLED: k}, now)
        return created

    @available
    def begin_sending(self, sweep_id: str, trial_ids: Sequence[str]) -> None:
        self._s.sweeps.update_one({"_id": sweep_id}, {"$set": {"sending": list(trial_ids)}})

    @available
    def end_sending(self, sweep_id: str) -> None:
        self._s.sweeps.update_one({"_id": sweep_id}, {"$set": {"sending": []}})

    @available
    def shrink_plan(self, sweep_id: str, n: int | None = None) -> int:
        check_id("sweep_id", sweep_id)
        while True:  # conditional on the planned count read; again until it holds
            doc = self._s.sweeps.find_one({"_id": sweep_id}, {"planned": 1})
            planned = int((doc or {}).get("planned") or 0)
            k = planned if n is None else min(n, planned)
            if k <= 0:
                return 0
            moved = self._s.sweeps.update_one(
                {"_id": sweep_id, "planned": planned},
                {
                    "$inc": {
                        "planned": -k,
                        "trial_count": -k,
                        f"counts.{_QUEUED}": -k,
                        "counts_rev": 1,
                    },
                    "$set": {"updated_at": self._s.clock()},
                },
            )
            if moved.modified_count:
                return k

    @available
    def repair_plan(self, sweep_id: str, total: int, created: int) -> None:
        while True:
            doc = self._s.sweeps.find_one({"_id": sweep_id}, {"planned": 1, "cancelled_at": 1})
            if doc is None or doc.get("cancelled_at") is not None:
                return
            planned = int(doc.get("planned") or 0)
            diff = planned - max(total - created, 0)
            if diff <= 0:
                return
            moved = self._s.sweeps.update_one(
                {"_id": sweep_id, "planned": planned},
                {"$inc": {"planned": -diff, "counts_rev": 1}},
            )
            if moved.modified_count:
                log.info("sweep %s: %d planned trials were already created", sweep_id, diff)
                return

    @available
    def replan(self, sweep_id: str, rev: int, planned: int) -> None:
        check_id("sweep_id", sweep_id)
        if planned < 0:
            raise InvalidQuery("planned", f"must be >= 0, got {planned}")
        while True:  # conditional on the planned count read; again until it holds
            doc = self._s.sweeps.find_one({"_id": sweep_id}, {"planned": 1, "cancelled_at": 1})
            if doc is None or doc.get("cancelled_at") is not None:
                return
            before = int(doc.get("planned") or 0)
            diff = planned - before
            moved = self._s.sweeps.update_one(
                {"_id": sweep_id, "planned": doc.get("planned")},
                {
                    "$inc": {
                        "planned": diff,
                        "trial_count": diff,
                        f"counts.{_QUEUED}": diff,
                        "counts_rev": 1,
                    },
                    "$set": {"applied_rev": rev, "updated_at": self._s.clock()},
                },
            )
            if moved.modified_count:
                if diff:
                    log.info("sweep %s: %+d planned trials (spec revision %d)", sweep_id,
                             diff, rev)  # fmt: skip
                return

    @available
    def release_held(self, sweep_id: str, trial_ids: Sequence[str]) -> None:
        check_id("sweep_id", sweep_id)
        if trial_ids:
            self._s.sweeps.update_one(
                {"_id": sweep_id}, {"$pull": {"held": {"$in": list(trial_ids)}}}
            )

    @available
    def feed_trials(
        self, sweep_id: str, ids: Sequence[str] | None = None, *, with_config: bool = False
    ) -> list[dict[str, Any]]:
        check_id("sweep_id", sweep_id)
        query: dict[str, Any] = {"_id": {"$in": list(ids)}} if ids is not None else {}
        query["sweep_id"] = sweep_id
        fields = dict(FEED_FIELDS)
        if ids is not None and not with_config:
            fields.pop("config")
            return list(self._s.trials.find(query, fields))
        fields["sweep_id"] = 1
        return self._s.texts.resolve_docs(list(self._s.trials.find(query, fields)))

    @available
    def set_study_attrs(self, sweep_id: str, attrs: Mapping[str, Any]) -> None:
        self._s.sweeps.update_one({"_id": sweep_id}, {"$set": {"study_attrs": dict(attrs)}})

    @available
    def take_lease(self, sweep_id: str, owner: str, seconds: float) -> bool:
        check_id("sweep_id", sweep_id)
        now = self._s.clock()
        lease = self.lease_for(owner, seconds)
        taken = self._s.sweeps.update_one(
            {
                "_id": sweep_id,
                "$or": [
                    {"lease": None},
                    {"lease.owner": owner},
                    {"lease.expires": {"$lt": now}},
                ],
            },
            {"$set": {"lease": lease}},
        )
        return bool(taken.matched_count)  # a renewal in the same millisecond changes nothing

    def lease_for(self, owner: str, seconds: float) -> dict[str, Any]:
        expires = self._s.clock() + timedelta(seconds=check_seconds("seconds", seconds))
        return {"owner": owner, "expires": expires}

    @available
    def release_lease(self, sweep_id: str, owner: str) -> None:
        self._s.sweeps.update_one(
            {"_id": sweep_id, "lease.owner": owner}, {"$set": {"lease": None}}
        )

    @available
    def unfinished_sweeps(self) -> list[dict[str, Any]]:
        fields = {"planned": 1, "counts": 1, "lease": 1, "spec_rev": 1, "applied_rev": 1}
        docs = self._s.sweeps.find({"cancelled_at": None}, fields)
        out = []
        for doc in docs:
            counts = doc.get("counts") or {}
            # A changed spec not applied yet: a finished sweep given more trials is fed again.
            changed = (doc.get("spec_rev") or 0) != (doc.get("applied_rev") or 0)
            if doc.get("planned") or counts.get(_QUEUED) or counts.get(_RUNNING) or changed:
                out.append(doc)
        return out

    @available
    def awaiting(self, ids: Sequence[str]) -> dict[str, Awaiting | None]:
        for trial_id in ids:
            check_id("trial_id", trial_id)
        if not ids:
            return {}
        fields = {**JUDGED_FIELDS, "progress": 1}
        out: dict[str, Awaiting | None] = {}
        for doc in self._s.trials.find({"_id": {"$in": list(ids)}}, fields):
            if doc.get("state") not in (_QUEUED, _RUNNING):
                out[doc["_id"]] = None
                continue
            attempt = doc.get("attempt")
            progress = doc.get("progress") or {}
            epoch = progress.get("epoch")
            if isinstance(epoch, int) and verdict(doc, attempt).epoch < epoch:
                out[doc["_id"]] = Awaiting(attempt, epoch, progress.get("metrics") or {})
        return out

    @available
    def mark_judged(
        self,
        verdicts: Mapping[str, tuple[int, int]],
        prune: Mapping[str, tuple[int, int]] | None = None,
    ) -> list[str]:
        if prune is not None and not isinstance(prune, Mapping):
            raise InvalidQuery("prune", f"must map trial ids to (attempt, epoch), got {prune!r}")
        ops = []
        for trial_id, (attempt, epoch) in verdicts.items():
            check_id("trial_id", trial_id)
            check_attempt(attempt)
            if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
                raise InvalidQuery("epoch", f"must be an integer >= 0, got {epoch!r}")
            ops.append(UpdateOne(
                {"_id": trial_id, "state": _RUNNING, "attempt": attempt},
                {"$set": {"judged": {"attempt": attempt, "epoch": epoch}}},
            ))  # fmt: skip
        return write_prunes(self._s, prune or {}, ops)

    def epoch_rows(
        self, attempts: Mapping[str, int], after: Mapping[str, int]
    ) -> dict[str, dict[int, dict[str, Any]]]:
        return self._s.epoch_rows(attempts, after)
