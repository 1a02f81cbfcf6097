"""How pages of a sweep's trials are read, shaped for SecantusDB's planner: the steps of
`core.store.reads.MongoReads.trials` and `~.best`.

The planner uses a compound index only when a filter's equality fields are exactly an index
prefix, and reads, sorts and then limits every candidate (`core.store.store`). So a page in
index order is read in windows of index values sized from the sweep's counts
(`index_page`: a page costs about its own size), and a page sorted by anything else reads
(index, sort value) of every candidate, orders them in Python with MongoDB's cross-type order
(`ordered`, `core.store.query.sort_key`) and fetches the page by ``index $in`` (`fetch`).
Functions of the store's shared state (`core.store.state`), which check nothing: the role
checks what a caller sends.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from core.store.query import Position, after, order, params_match
from core.store.state import StoreState

__all__ = ["fetch", "index_page", "ordered"]


def _state_queries(
    sweep_id: str, states: list[str] | None, filters: Mapping[str, Any] | None = None
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
    return [{"state": state, "sweep_id": sweep_id} for state in states]


def index_page(
    s: StoreState,
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
    matching = total if states is None else sum(counts[state] for state in states)
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
        for query in _state_queries(sweep["_id"], states):
            rows.extend(s.trials.find({**query, "index": window}))
        rows = [r for r in rows if params_match(r, filters)]
        rows.sort(key=lambda r: r["index"], reverse=descending)
        found.extend(rows)
        seen = max(len(found), 1) / scanned
        width = max(width * 2, math.ceil((want - len(found)) / seen * 1.2))
    return found[:limit], len(found) > limit


def ordered(
    s: StoreState,
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
    for query in _state_queries(sweep_id, states, filters):
        rows.extend(s.trials.find(query, projection))
    rows = [r for r in rows if params_match(r, filters) and (keep is None or keep(r))]
    keyed = order(rows, field, descending)
    return [k for k in keyed if after(position, k[0], k[1], descending)]


def fetch(
    s: StoreState,
    sweep_id: str,
    indexes: Iterable[int],
    states: list[str] | None = None,
    filters: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Full trials by index, in the given order; any that stopped matching are left out."""
    indexes = list(indexes)
    if not indexes:
        return []
    docs = s.trials.find({"sweep_id": sweep_id, "index": {"$in": indexes}})
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
