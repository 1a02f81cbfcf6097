"""What the store's roles share: the collections, the clock, the caches, the common steps.

Private to the store. `core.store.store.Store` builds one `StoreState` and hands it to each role's
implementation (`core.store.lifecycle`, `core.store.admin`, `core.store.feeding`,
`core.store.reads`); a role holds it, never inherits from another role. What every write
of a trial's state does besides the write itself (move the sweep's counts, log a finish in
the summaries) is here once, so each role states its own steps and no more.
"""

from __future__ import annotations

import functools
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from pymongo.database import Database
from pymongo.errors import ConnectionFailure

from core.errors import NotFound, StoreUnavailable
from core.spec.objectives import COST_METRICS, Goals, feasibility, values_of
from core.states import FINISH_STATES
from core.store import summaries
from core.store.query import check_id
from core.store.records import finite_number, full_counts, sweep_of
from core.store.texts import SweepTexts

P = ParamSpec("P")
R = TypeVar("R")

#: The states only a finish reaches: the ones the finish log (`core.store.summaries`) holds.
LOGGED = tuple(s.value for s in FINISH_STATES)


def available(method: Callable[P, R]) -> Callable[P, R]:
    """Turn a lost or unreachable server into `StoreUnavailable`, which callers retry."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except ConnectionFailure as exc:
            raise StoreUnavailable(f"store unavailable during {method.__name__}: {exc}") from exc

    return wrapper


def summaries_projection(extra: Iterable[str] = ()) -> dict[str, int]:
    """A projection of `core.store.summaries.ROW_FIELDS` and `extra` paths (plus ``_id`` and
    ``index``), without a path inside another (MongoDB refuses those)."""
    paths = {"_id", "index", *summaries.ROW_FIELDS, *extra}
    kept = [p for p in paths if not any(p.startswith(q + ".") for q in paths)]
    return dict.fromkeys(kept, 1)


class StoreState:
    """The database handles, clock, settings and caches of one `core.store.store.Store`.

    `clock` returns the current UTC time; `change_lag` is how far back a change feed read
    repeats changes (`core.store.roles.Reads.changed_rows`); `insert_batch` trials go in one insert;
    `ensure_indexes` is the store's own, called before the first sweep is created.
    """

    def __init__(
        self,
        db: Database,
        *,
        clock: Callable[[], datetime],
        change_lag: timedelta,
        ensure_indexes: Callable[[], None],
        insert_batch: int,
    ) -> None:
        self.db = db
        self.sweeps = db["sweeps"]
        self.trials = db["trials"]
        self.metrics = db["metrics"]
        #: Each sweep's large texts, which its trials' configs reference (`core.store.texts`).
        self.texts = SweepTexts(db["texts"])
        self.clock = clock
        self.change_lag = change_lag
        self.insert_batch = insert_batch
        self.indexed = False
        self.ensure_indexes = ensure_indexes
        #: Each sweep's (objective metric, direction): they never change.
        self.objectives: dict[str, tuple[str, str]] = {}
        #: Each sweep's `Goals` (every objective and constraint): they never change.
        self.goals: dict[str, Goals] = {}
        #: `Reads.best` past the top summary, per (sweep, k): (complete count, trials).
        self.best: dict[tuple[str, int], tuple[int, list[dict[str, Any]]]] = {}
        self._call_lock = threading.Lock()
        self._last_call: datetime | None = None

    # -- reads every role makes ----------------------------------------------------------

    def sweep(self, sweep_id: str, owner: str | None = None) -> dict[str, Any]:
        """The sweep with ``counts`` for every state; `NotFound` if missing or not `owner`'s."""
        check_id("sweep_id", sweep_id)
        doc = self.sweeps.find_one({"_id": sweep_id})
        if doc is None or (owner is not None and doc.get("owner") != owner):
            raise NotFound("sweep", sweep_id)
        doc["counts"] = full_counts(doc.get("counts"))
        return doc

    def epoch_rows(
        self, attempts: Mapping[str, int], after: Mapping[str, int] | None = None
    ) -> dict[str, dict[int, dict[str, Any]]]:
        """The metrics of each attempt's epochs (trial id -> attempt), those after
        ``after[trial id]`` only where given, by trial and epoch (one read)."""
        if not attempts:
            return {}
        after = after or {}
        out: dict[str, dict[int, dict[str, Any]]] = {tid: {} for tid in attempts}
        rows = self.metrics.find(
            {"trial_id": {"$in": list(attempts)}}, {"trial_id": 1, "attempt": 1, "epoch": 1,
                                                    "metrics": 1, "_id": 0}
        )  # fmt: skip
        for row in rows:
            tid = row["trial_id"]
            if row["attempt"] == attempts[tid] and row["epoch"] > after.get(tid, -1):
                out[tid][row["epoch"]] = row.get("metrics") or {}
        return out

    def cancelled(self, sweep_id: str) -> bool:
        """Whether the sweep was cancelled (False for one the store does not have)."""
        doc = self.sweeps.find_one({"_id": sweep_id}, {"cancelled_at": 1})
        return doc is not None and doc.get("cancelled_at") is not None

    def objective(self, sweep_id: str) -> tuple[str, str]:
        """The sweep's (objective metric, direction), read once per sweep."""
        if sweep_id not in self.objectives:
            objective = self.sweep(sweep_id)["objective"]
            self.objectives[sweep_id] = (objective["metric"], objective["direction"])
        return self.objectives[sweep_id]

    def goals_of(self, sweep_id: str) -> Goals:
        """The sweep's objectives and constraints, read once per sweep."""
        if sweep_id not in self.goals:
            self.goals[sweep_id] = Goals.of(self.sweep(sweep_id))
        return self.goals[sweep_id]

    def measured(
        self, sweep_id: str, result: Mapping[str, Any] | None, extra: Mapping[str, Any]
    ) -> dict[str, Any]:
        """What a finish stores of the sweep's goals: ``objectives`` (every objective's
        value), ``constraints`` (each one's violation) and ``feasible``
        (`core.spec.objectives`). The values are the worker's (``result["values"]``), the
        record's costs (``param_count``, ``train_seconds``, ``macs`` in `extra`) where it
        gave none, and the primary objective is the trial's ``objective``."""
        if not result:
            return {"objectives": None, "constraints": None, "feasible": None}
        goals = self.goals_of(sweep_id)
        measured = {k: extra.get(k) for k in COST_METRICS if k in extra}
        measured.update(result.get("values") or {})
        measured[goals.objectives[0][0]] = self.objective_of(sweep_id, result)
        violations, feasible = feasibility(goals.constraints, measured)
        return {
            "objectives": values_of(goals.objectives, measured),
            "constraints": violations,
            "feasible": feasible,
        }

    def objective_of(self, sweep_id: str, result: Mapping[str, Any] | None) -> float | None:
        """The objective a finish stores: ``result["objective"]``, else the sweep's metric."""
        if not result:
            return None
        if "objective" in result:
            return finite_number(result["objective"])
        return finite_number(result.get(self.objective(sweep_id)[0]))

    def docs(self, ids: Iterable[str], fields: Mapping[str, int]) -> dict[str, dict[str, Any]]:
        """`fields` of these trials, by id (one read)."""
        query = {"_id": {"$in": sorted(ids)}}
        return {doc["_id"]: doc for doc in self.trials.find(query, dict(fields))}

    def changed_by(
        self, wanted: Mapping[str, int], marks: Mapping[str, Any], offset: int
    ) -> list[str]:
        """Which of `wanted` (id -> attempt before) a partial bulk write changed: those now at
        attempt + `offset` that carry every value of `marks` this call wrote."""
        docs = self.docs(wanted, {"attempt": 1, **dict.fromkeys(marks, 1)})
        return [
            t
            for t, a in wanted.items()
            if t in docs
            and docs[t]["attempt"] == a + offset
            and all(docs[t].get(k) == v for k, v in marks.items())
        ]

    # -- what follows a transition -------------------------------------------------------

    def call_time(self) -> datetime:
        """Now, but later than every earlier call of this store's (by a millisecond if
        need be): the time a claim or finish writes tells which trials that call changed,
        when a bulk write changed only some (only the holder process finishes an attempt,
        so no other process writes the same time for it)."""
        with self._call_lock:
            now = self.clock()
            last = self._last_call
            if last is not None and now <= last:
                now = last + timedelta(milliseconds=1)
            self._last_call = now
            return now

    def bump(self, sweep_id: str, moves: Mapping[str, int], now: datetime) -> None:
        """Move the sweep's counts by `moves` (state -> change), by the caller that moved
        the trials (module docstring of `core.store.store`)."""
        inc: dict[str, int] = {f"counts.{state}": n for state, n in moves.items() if n}
        if inc:
            inc["counts_rev"] = 1
            self.sweeps.update_one({"_id": sweep_id}, {"$inc": inc, "$set": {"updated_at": now}})

    def bump_many(self, moves: Iterable[tuple[str, Mapping[str, int]]], now: datetime) -> None:
        """Move the counts of the sweeps of these trials: one ``$inc`` per sweep."""
        by_sweep: dict[str, Counter[str]] = {}
        for trial_id, move in moves:
            by_sweep.setdefault(sweep_of(trial_id), Counter()).update(move)
        for sweep_id, move in by_sweep.items():
            self.bump(sweep_id, move, now)

    def log_finished(self, trial_ids: Sequence[str]) -> None:
        """Enter trials that a write without a read just ended into their sweeps' summaries
        (`core.store.summaries`): one read of their rows, one summary write per sweep."""
        if not trial_ids:
            return
        by_sweep: dict[str, list[dict[str, Any]]] = {}
        fields = summaries_projection(["sweep_id"])
        for doc in self.trials.find({"_id": {"$in": list(trial_ids)}}, fields):
            by_sweep.setdefault(doc["sweep_id"], []).append(doc)
        for sweep_id, docs in by_sweep.items():
            summaries.on_finished(self.db, sweep_id, docs)

    def build_summaries(
        self, sweep_id: str, direction: str, finished: list[dict[str, Any]] | None = None
    ) -> None:
        """Write the sweep's summaries from its finished trials (read here unless given:
        the slow path, once per sweep), then apply what finished while they were read."""
        start = self.clock()
        projection = summaries_projection()
        if finished is None:
            finished = []
            for state in LOGGED:
                finished.extend(
                    self.trials.find({"state": state, "sweep_id": sweep_id}, projection)
                )
        summaries.build(self.db, sweep_id, direction, finished)
        recent = self.trials.find(
            {"sweep_id": sweep_id, "updated_at": {"$gt": start - self.change_lag}}, projection
        )
        summaries.catch_up(self.db, sweep_id, list(recent))

    def forget(self, sweep_id: str) -> None:
        """Drop what this process remembers of a sweep (it was deleted)."""
        self.objectives.pop(sweep_id, None)
        self.goals.pop(sweep_id, None)
        self.best = {key: value for key, value in self.best.items() if key[0] != sweep_id}
