"""The store's reads: sweeps with counts, pages of trials, the best, a trial with its curve.

What changed since a watermark and the aggregates a live page polls are in
`core.dashboard_reads`.

`Views` is the base of `core.store.Store`: it holds the collections and the helpers every
call shares (`available`, which turns a lost server into `StoreUnavailable`). How each
read is shaped for the planner of SecantusDB is in the `core.store` docstring.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import ConnectionFailure

from core import summaries
from core.errors import InvalidQuery, NotFound, StoreUnavailable
from core.query import (
    Position,
    after,
    check_id,
    check_limit,
    check_name,
    check_states,
    decode_cursor,
    encode_cursor,
    get_path,
    order,
    param_filters,
    params_match,
    query_digest,
    sort_field,
)
from core.records import finite_number, full_counts
from core.states import FINISH_STATES, TrialState

P = ParamSpec("P")
R = TypeVar("R")

_COMPLETE = TrialState.COMPLETE.value
#: The states only a finish reaches: the ones the finish log (`core.summaries`) holds.
_LOGGED = tuple(s.value for s in FINISH_STATES)


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
    """A projection of `core.summaries.ROW_FIELDS` and `extra` paths (plus ``_id`` and
    ``index``), without a path inside another (MongoDB refuses those)."""
    paths = {"_id", "index", *summaries.ROW_FIELDS, *extra}
    kept = [p for p in paths if not any(p.startswith(q + ".") for q in paths)]
    return dict.fromkeys(kept, 1)


class Views:
    """Read access to the sweeps, trials and metrics collections."""

    db: Database
    _sweeps: Collection
    _trials: Collection
    _metrics: Collection
    _clock: Callable[[], datetime]
    _objectives: dict[str, tuple[str, str]]
    _best: dict[tuple[str, int], tuple[int, list[dict[str, Any]]]]
    change_lag: timedelta

    def _sweep(self, sweep_id: str, owner: str | None = None) -> dict[str, Any]:
        check_id("sweep_id", sweep_id)
        doc = self._sweeps.find_one({"_id": sweep_id})
        if doc is None or (owner is not None and doc.get("owner") != owner):
            raise NotFound("sweep", sweep_id)
        doc["counts"] = full_counts(doc.get("counts"))
        return doc

    def _cancelled(self, sweep_id: str) -> bool:
        doc = self._sweeps.find_one({"_id": sweep_id}, {"cancelled_at": 1})
        return doc is not None and doc.get("cancelled_at") is not None

    def _objective(self, sweep_id: str) -> tuple[str, str]:
        if sweep_id not in self._objectives:
            objective = self._sweep(sweep_id)["objective"]
            self._objectives[sweep_id] = (objective["metric"], objective["direction"])
        return self._objectives[sweep_id]

    @available
    def list_sweeps(
        self, *, owner: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Sweeps, newest first, each with ``counts`` by state; and the next page's cursor."""
        check_limit(limit)
        query: dict[str, Any] = {}
        if owner is not None:
            query["owner"] = check_id("owner", owner)
        digest = query_digest("sweeps", owner)
        if cursor is not None:
            pos = decode_cursor(cursor, digest)
            if not isinstance(pos.value, list) or len(pos.value) != 2:
                raise InvalidQuery("cursor", "is not a cursor this store issued")
            created, last_id = pos.value
            if not isinstance(created, datetime) or not isinstance(last_id, str):
                raise InvalidQuery("cursor", "is not a cursor this store issued")
            query["$or"] = [
                {"created_at": {"$lt": created}},
                {"created_at": created, "_id": {"$lt": last_id}},
            ]
        docs = list(
            self._sweeps.find(query).sort([("created_at", -1), ("_id", -1)]).limit(limit + 1)
        )
        more = len(docs) > limit
        docs = docs[:limit]
        for doc in docs:
            doc["counts"] = full_counts(doc.get("counts"))
        nxt = None
        if more:
            nxt = encode_cursor(digest, Position(0, [docs[-1]["created_at"], docs[-1]["_id"]]))
        return docs, nxt

    @available
    def get_sweep(self, sweep_id: str, *, owner: str | None = None) -> dict[str, Any]:
        """A sweep with ``counts`` by state; `NotFound` if missing or not `owner`'s."""
        return self._sweep(sweep_id, owner)

    @available
    def counts(self, sweep_id: str) -> dict[str, int]:
        """How many trials of the sweep are in each state (every state a key)."""
        return self._sweep(sweep_id)["counts"]

    @available
    def recount(self, sweep_id: str) -> dict[str, int]:
        """Count by state from the trials themselves (slow), and repair the stored counts.

        The repair is skipped if a transition of the sweep happened while counting.
        """
        sweep = self._sweep(sweep_id)
        rev = sweep.get("counts_rev", 0)
        rows = self._trials.aggregate(
            [{"$match": {"sweep_id": sweep_id}}, {"$group": {"_id": "$state", "n": {"$sum": 1}}}]
        )
        exact = full_counts({row["_id"]: row["n"] for row in rows})
        # Planned trials (`core.feeding`) are not created yet but count as queued.
        # (A write between the reads moves counts_rev: the repair below is then skipped.)
        exact["queued"] += int(sweep.get("planned") or 0)
        self._sweeps.update_one(
            {"_id": sweep_id, "counts_rev": rev},
            {"$set": {"counts": exact}, "$inc": {"counts_rev": 1}},
        )
        return exact

    @available
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
        booleans, None for "not set"). `sort`: ``index``,
        ``objective``, ``train_seconds``, ``finished_at``, ``started_at``, ``updated_at``,
        ``param_count``, ``attempt``, ``result.<metric>`` or a parameter path; ties are
        broken by index; missing values sort first ascending (MongoDB's order). The cursor
        is only valid for the same sweep, filters and sort.
        """
        states = check_states(state)
        filters = param_filters(params)
        field = sort_field(sort)
        check_limit(limit)
        descending = bool(descending)
        sweep = self._sweep(sweep_id)
        digest = query_digest(sweep_id, states, filters, field, descending)
        position = decode_cursor(cursor, digest) if cursor is not None else None
        if field == "index":
            docs, more = self._index_page(sweep, states, filters, descending, limit, position)
            last = Position(docs[-1]["index"]) if docs else None
        else:
            keyed = self._ordered(sweep_id, states, filters, field, descending, position)
            more = len(keyed) > limit
            keyed = keyed[:limit]
            docs = self._fetch(sweep_id, [index for _, index, _ in keyed], states, filters)
            last = Position(keyed[-1][1], get_path(keyed[-1][2], field)) if keyed else None
        nxt = encode_cursor(digest, last) if more and last is not None else None
        return docs, nxt

    def _state_queries(
        self, sweep_id: str, states: list[str] | None, filters: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """Queries for the candidates of a page, shaped so SecantusDB's planner narrows them.

        Without parameter filters, one query per state: ``{state, sweep_id}`` is an exact
        index prefix (``$in`` is not). With them, one query led by ``sweep_id``, which is
        the clause the planner then falls back to, and the parameters filtered server side.
        """
        if filters:
            query: dict[str, Any] = {"sweep_id": sweep_id}
            if states is not None:
                query["state"] = {"$in": states}
            return [{**query, **filters}]
        if states is None:
            return [{"sweep_id": sweep_id}]
        return [{"state": s, "sweep_id": sweep_id} for s in states]

    def _index_page(
        self,
        sweep: Mapping[str, Any],
        states: list[str] | None,
        filters: Mapping[str, Any],
        descending: bool,
        limit: int,
        position: Position | None,
    ) -> tuple[list[dict[str, Any]], bool]:
        """A page in index order, read in windows of index values sized to find it."""
        top = int(sweep.get("max_index", sweep["trial_count"] - 1))
        total = max(sweep["trial_count"], 1)
        counts = sweep["counts"]
        matching = total if states is None else sum(counts[s] for s in states)
        density = max(matching, 1) / total / (2 if filters else 1)
        want = limit + 1
        edge = position.index if position else (top + 1 if descending else -1)
        found: list[dict[str, Any]] = []
        scanned = 0
        width = math.ceil(want / density * 1.1)
        while len(found) < want and (edge > 0 if descending else edge < top):
            if descending:
                low = max(edge - width, 0)
                window: dict[str, int] = {"$gte": low, "$lt": edge}
                scanned, edge = scanned + edge - low, low
            else:
                high = min(edge + width, top)
                window = {"$gt": edge, "$lte": high}
                scanned, edge = scanned + high - edge, high
            rows: list[dict[str, Any]] = []
            for query in self._state_queries(sweep["_id"], states):
                rows.extend(self._trials.find({**query, "index": window}))
            rows = [r for r in rows if params_match(r, filters)]
            rows.sort(key=lambda r: r["index"], reverse=descending)
            found.extend(rows)
            seen = max(len(found), 1) / scanned
            width = max(width * 2, math.ceil((want - len(found)) / seen * 1.2))
        return found[:limit], len(found) > limit

    def _ordered(
        self,
        sweep_id: str,
        states: list[str] | None,
        filters: Mapping[str, Any],
        field: str,
        descending: bool,
        position: Position | None,
        keep: Callable[[Mapping[str, Any]], bool] | None = None,
    ) -> list[tuple[tuple, int, Mapping[str, Any]]]:
        """Every candidate's (sort key, index, row) after `position`, in page order."""
        projection = {"_id": 0, "index": 1, field: 1, **dict.fromkeys(filters, 1)}
        rows: list[Mapping[str, Any]] = []
        for query in self._state_queries(sweep_id, states, filters):
            rows.extend(self._trials.find(query, projection))
        rows = [r for r in rows if params_match(r, filters) and (keep is None or keep(r))]
        keyed = order(rows, field, descending)
        return [k for k in keyed if after(position, k[0], k[1], descending)]

    def _fetch(
        self,
        sweep_id: str,
        indexes: Iterable[int],
        states: list[str] | None = None,
        filters: Mapping[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """Full trials by index, in the given order; any that stopped matching are left out."""
        indexes = list(indexes)
        if not indexes:
            return []
        docs = self._trials.find({"sweep_id": sweep_id, "index": {"$in": indexes}})
        by_index = {doc["index"]: doc for doc in docs}
        out = []
        for index in indexes:
            doc = by_index.get(index)
            if doc is None or (states is not None and doc["state"] not in states):
                continue
            if filters and not params_match(doc, filters):
                continue
            out.append(doc)
        return out

    @available
    def best(self, sweep_id: str, k: int = 10) -> list[dict[str, Any]]:
        """The `k` complete trials with the best objective, by the sweep's direction.

        Read from the sweep's top summary (`core.summaries`: the `summaries.TOP_K` best,
        kept as trials finish), then the `k` trials by id: a few ms at any sweep size.
        A sweep without a summary gets one first (once, reading its finished trials).
        """
        check_limit(k, "k")
        _metric, direction = self._objective(sweep_id)
        summary = self._top_summary(sweep_id, direction)
        entries = summaries.top_entries(summary)
        if len(entries) >= k or len(summary.get("top") or []) < summaries.TOP_K:
            chosen = entries[:k]
            docs = {
                d["_id"]: d for d in self._trials.find({"_id": {"$in": [e["id"] for e in chosen]}})
            }
            return [
                docs[e["id"]]
                for e in chosen
                if e["id"] in docs and docs[e["id"]]["state"] == _COMPLETE
            ]
        return self._best_read(sweep_id, k, direction)

    def _top_summary(self, sweep_id: str, direction: str) -> dict[str, Any]:
        """The sweep's top summary, built from its trials first if it has none."""
        summary = summaries.top_document(self.db, sweep_id)
        if summary is None:
            self._build_summaries(sweep_id, direction)
            summary = summaries.top_document(self.db, sweep_id) or {"top": []}
        return summary

    def _build_summaries(
        self, sweep_id: str, direction: str, finished: list[dict[str, Any]] | None = None
    ) -> None:
        """Write the sweep's summaries from its finished trials (read here unless given:
        the slow path, once per sweep), then apply what finished while they were read."""
        start = self._clock()
        projection = summaries_projection()
        if finished is None:
            finished = []
            for state in _LOGGED:
                finished.extend(
                    self._trials.find({"state": state, "sweep_id": sweep_id}, projection)
                )
        summaries.build(self.db, sweep_id, direction, finished)
        recent = self._trials.find(
            {"sweep_id": sweep_id, "updated_at": {"$gt": start - self.change_lag}}, projection
        )
        summaries.catch_up(self.db, sweep_id, list(recent))

    def _best_read(self, sweep_id: str, k: int, direction: str) -> list[dict[str, Any]]:
        """`best` for a `k` past the summary: every complete trial read, remembered per
        complete count (a complete trial's objective never changes)."""
        counted = self._sweeps.find_one({"_id": sweep_id}, {f"counts.{_COMPLETE}": 1})
        if counted is None:
            raise NotFound("sweep", sweep_id)
        complete = (counted.get("counts") or {}).get(_COMPLETE, 0)
        remembered = self._best.get((sweep_id, k))
        if remembered is not None and remembered[0] == complete:
            return copy.deepcopy(remembered[1])
        keyed = self._ordered(
            sweep_id,
            [_COMPLETE],
            {},
            "objective",
            direction == "maximize",
            None,
            keep=lambda r: finite_number(r.get("objective")) is not None,
        )
        keyed.sort(key=lambda item: item[1])  # equal objectives: the earlier trial first
        keyed.sort(key=lambda item: item[0], reverse=direction == "maximize")
        best = self._fetch(sweep_id, [index for _, index, _ in keyed[:k]], [_COMPLETE])
        if len(self._best) > 1000:
            self._best.clear()
        self._best[(sweep_id, k)] = (complete, copy.deepcopy(best))
        return best

    @available
    def trials_by_id(
        self, trial_ids: Iterable[str], fields: Sequence[str]
    ) -> dict[str, dict[str, Any]]:
        """`fields` (dotted paths) of these trials, by id, in batched reads; `NotFound` for an
        id that is not in the store."""
        ids = [check_id("trial_id", t) for t in trial_ids]
        for path in fields:
            for part in path.split("."):
                check_name("fields", part)
        out: dict[str, dict[str, Any]] = {}
        for start in range(0, len(ids), 1000):
            batch = ids[start : start + 1000]
            for doc in self._trials.find({"_id": {"$in": batch}}, dict.fromkeys(fields, 1)):
                out[doc["_id"]] = doc
        for trial_id in ids:
            if trial_id not in out:
                raise NotFound("trial", trial_id)
        return out

    #: On SecantusDB a range of indexes reads ~0.3 ms a trial, an ``$in`` of them ~2 ms a
    #: value (of ids, ~2.5 ms), so `trials_at` reads a range when it spans at most this many
    #: times the indexes asked for.
    RANGE_SPAN = 6

    @available
    def trials_at(
        self, sweep_id: str, indexes: Iterable[int], fields: Sequence[str]
    ) -> list[dict[str, Any]]:
        """`fields` (dotted paths; ``_id`` and ``index`` always) of the sweep's trials at
        these indexes (at most `MAX_LIMIT`), by index; an index it does not have is left
        out. One read: the range from the first index to the last when it is short enough
        (`RANGE_SPAN`), else the indexes themselves."""
        check_id("sweep_id", sweep_id)
        wanted = sorted(set(indexes))
        for index in wanted:
            if isinstance(index, bool) or not isinstance(index, int) or index < 0:
                raise InvalidQuery("indexes", f"must be trial indexes, got {index!r}")
        if not wanted:
            return []
        check_limit(len(wanted), "indexes")
        for path in fields:
            for part in path.split("."):
                check_name("fields", part)
        low, high = wanted[0], wanted[-1]
        if high - low + 1 <= len(wanted) * self.RANGE_SPAN:
            where: dict[str, Any] = {"$gte": low, "$lte": high}
        else:
            where = {"$in": wanted}
        keep = set(wanted)
        projection = {**dict.fromkeys(fields, 1), "index": 1}
        docs = self._trials.find({"sweep_id": sweep_id, "index": where}, projection)
        return sorted((d for d in docs if d["index"] in keep), key=lambda d: d["index"])

    @available
    def get_trial(self, trial_id: str, *, with_metrics: bool = True) -> dict[str, Any]:
        """A trial; with ``metrics``: its reports sorted by attempt and epoch."""
        check_id("trial_id", trial_id)
        doc = self._trials.find_one({"_id": trial_id})
        if doc is None:
            raise NotFound("trial", trial_id)
        if with_metrics:
            rows = self._metrics.find(
                {"trial_id": trial_id},
                {"_id": 0, "attempt": 1, "epoch": 1, "metrics": 1, "reported_at": 1},
            ).sort([("attempt", 1), ("epoch", 1)])
            doc["metrics"] = list(rows)
        return doc
