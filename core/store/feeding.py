"""The feeding loop's role: the store's writes and reads for the scheduler that feeds a
sweep (`scheduler.feed`, `scheduler.feeders`) once its first window is stored
(`core.store.admin.SweepAdmin.create_sweep`): adding the rest, and the pruning decision's input.

A sweep is stored with its first window of trials only; the rest are **planned**: the sweep
document's ``planned`` says how many trials are still to be created, and they count as
``queued`` in ``counts`` (and in ``trial_count``) from the first second, so every reader
sees the whole sweep. `add_trials` creates more (idempotently: a trial's ``_id`` is its
sweep and point id, and a repeat insert is a duplicate key that changes nothing) and moves
them from planned to real; `shrink_plan` drops planned trials a search cannot ask (a space
used up), and cancelling a sweep drops them all (`core.store.admin`).

A window's trial ids are written to the sweep's ``sending`` list before the trials are
created, and the list is emptied once their messages are sent: a feeder that restarts sends
again those of the list that exist and were never claimed (a duplicate message is harmless,
a missing one would strand the trial). One write per window on the sweep document, not one
per trial: SecantusDB takes ~14 ms per trial for an ``update_many`` by ``_id $in``.

One feeder per sweep: the ``lease`` field ``{owner, expires}`` is taken and renewed by one
conditional ``update_one`` (free, expired, or already ours), so of two schedulers exactly
one feeds a sweep, and another takes over once the holder stops renewing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from pymongo.errors import BulkWriteError

from core.spec.sweep import SweepSpec
from core.states import TrialState
from core.store.query import check_id, check_seconds
from core.store.records import TrialPointLike, trial_document
from core.store.state import StoreState, available

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
    "optuna": 1,
    "config": 1,
}


def trial_doc(
    sweep_id: str, spec: SweepSpec, base: dict, point: TrialPointLike, now: datetime
) -> dict[str, Any]:
    """A new trial document of `point` (its config made from the spec if it has none)."""
    config = point.config or spec.seeded_config(point.params, point.seed, base)
    return trial_document(
        sweep_id,
        key=point.id,
        index=point.index,
        params=point.params,
        config=config,
        seed=point.seed,
        now=now,
    )


def shrink_plan(s: StoreState, sweep_id: str, n: int | None = None) -> int:
    """`Feeding.shrink_plan` (its docstring says what it does)."""
    check_id("sweep_id", sweep_id)
    while True:
        doc = s.sweeps.find_one({"_id": sweep_id}, {"planned": 1})
        planned = int((doc or {}).get("planned") or 0)
        k = planned if n is None else min(n, planned)
        if k <= 0:
            return 0
        moved = s.sweeps.update_one(
            {"_id": sweep_id, "planned": planned},
            {
                "$inc": {
                    "planned": -k,
                    "trial_count": -k,
                    f"counts.{_QUEUED}": -k,
                    "counts_rev": 1,
                },
                "$set": {"updated_at": s.clock()},
            },
        )
        if moved.modified_count:
            return k


class Feeding:
    """The scheduler's feeding writes: planned trials, idempotent additions, the window
    being sent, the search's state, the feeding lease, and what a feeder reads back."""

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
        """Create these trials of the sweep (queued, attempt 0); the ids this call created.

        `extras` adds fields per point id (the search's ``optuna`` record). A point already
        stored is left as it is. Created trials move from the sweep's planned count to real
        ones (counts unchanged: planned ones already count as queued); if the plan was
        dropped meanwhile (a cancel), they are counted afresh, and a cancelled sweep's new
        trials are cancelled at once.
        """
        check_id("sweep_id", sweep_id)
        if not points:
            return []
        now = self._s.clock()
        base = spec.base_config()
        docs = []
        for p in points:
            doc = trial_doc(sweep_id, spec, base, p, now)
            doc.update((extras or {}).get(p.id, {}))
            docs.append(doc)
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
        """Note the ids of a window about to be created and sent (module docstring)."""
        self._s.sweeps.update_one({"_id": sweep_id}, {"$set": {"sending": list(trial_ids)}})

    @available
    def end_sending(self, sweep_id: str) -> None:
        """The window's messages are sent: nothing to send again after a restart."""
        self._s.sweeps.update_one({"_id": sweep_id}, {"$set": {"sending": []}})

    @available
    def shrink_plan(self, sweep_id: str, n: int | None = None) -> int:
        """Drop `n` planned trials (all when None): the search cannot ask them. How many went.

        Conditional on the planned count read, so a concurrent `add_trials` or cancel is
        never counted twice; retried until it holds.
        """
        return shrink_plan(self._s, sweep_id, n)

    @available
    def repair_plan(self, sweep_id: str, total: int, created: int) -> None:
        """Set ``planned`` to `total` - `created` (a feeder killed between creating trials
        and moving the count leaves it high). The queued count stays: it counted those
        trials as planned and counts them now as created (`add_trials` moves it the same)."""
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
    def feed_trials(self, sweep_id: str, ids: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """The sweep's trials (or those of `ids`) with what a feeder needs (`FEED_FIELDS`)."""
        check_id("sweep_id", sweep_id)
        query: dict[str, Any] = {"_id": {"$in": list(ids)}} if ids is not None else {}
        query["sweep_id"] = sweep_id
        fields = dict(FEED_FIELDS)
        if ids is not None:
            fields.pop("config")
        return list(self._s.trials.find(query, fields))

    @available
    def set_study_attrs(self, sweep_id: str, attrs: Mapping[str, Any]) -> None:
        """Keep the search's study state (QMC's position) on the sweep, for a rebuild."""
        self._s.sweeps.update_one({"_id": sweep_id}, {"$set": {"study_attrs": dict(attrs)}})

    @available
    def take_lease(self, sweep_id: str, owner: str, seconds: float) -> bool:
        """Take or renew the feeding lease of a sweep for `seconds`; whether `owner` holds it.

        One conditional update: free, expired or `owner`'s already. Of concurrent callers
        at most one gets a free lease.
        """
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
        """The lease ``{owner, expires}`` that `owner` holds for `seconds` from now (by the
        store's clock): what `take_lease` writes, and what a sweep created by its feeder
        carries from the start (`core.store.admin.SweepAdmin.create_sweep`'s `sweep_fields`)."""
        expires = self._s.clock() + timedelta(seconds=check_seconds("seconds", seconds))
        return {"owner": owner, "expires": expires}

    @available
    def release_lease(self, sweep_id: str, owner: str) -> None:
        """Give the lease back, if `owner` holds it, so another scheduler may feed at once."""
        self._s.sweeps.update_one(
            {"_id": sweep_id, "lease.owner": owner}, {"$set": {"lease": None}}
        )

    @available
    def unfinished_sweeps(self) -> list[dict[str, Any]]:
        """Sweeps that may need feeding: not cancelled, and with planned or live trials
        (``_id``, ``planned``, ``counts``, ``lease``; not the spec, which may be large: the
        scheduler asks this every pass, of every sweep ever submitted)."""
        docs = self._s.sweeps.find({"cancelled_at": None}, {"planned": 1, "counts": 1, "lease": 1})
        out = []
        for doc in docs:
            counts = doc.get("counts") or {}
            if doc.get("planned") or counts.get(_QUEUED) or counts.get(_RUNNING):
                out.append(doc)
        return out

    @available
    def epoch_rows(
        self, attempts: Mapping[str, int], after: Mapping[str, int]
    ) -> dict[str, dict[int, dict[str, Any]]]:
        """New epoch rows of running trials: for each id of `attempts` (its attempt), the
        metrics of each epoch past ``after[id]`` (-1: every epoch). For the pruning decision."""
        if not attempts:
            return {}
        out: dict[str, dict[int, dict[str, Any]]] = {tid: {} for tid in attempts}
        rows = self._s.metrics.find(
            {"trial_id": {"$in": list(attempts)}}, {"trial_id": 1, "attempt": 1, "epoch": 1,
                                                    "metrics": 1, "_id": 0}
        )  # fmt: skip
        for row in rows:
            tid = row["trial_id"]
            if row["attempt"] == attempts[tid] and row["epoch"] > after.get(tid, -1):
                out[tid][row["epoch"]] = row.get("metrics") or {}
        return out
