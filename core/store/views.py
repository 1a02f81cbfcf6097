"""Pages of a sweep's trials and its best trials: the longer reads of `core.store.reads.Reads`.

Functions of the store's shared state (`core.store.state`); `Reads.trials` and `Reads.best`
say what they answer. How each read is shaped for the planner of SecantusDB is in the
`core.store.store` docstring.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from core.errors import NotFound
from core.states import TrialState
from core.store import summaries
from core.store.query import (
    Position,
    after,
    decode_cursor,
    encode_cursor,
    get_path,
    order,
    params_match,
    query_digest,
)
from core.store.records import finite_number
from core.store.state import StoreState

_COMPLETE = TrialState.COMPLETE.value


def trials_page(
    s: StoreState,
    sweep_id: str,
    states: list[str] | None,
    filters: dict[str, Any],
    field: str,
    descending: bool,
    limit: int,
    cursor: str | None,
) -> tuple[list[dict[str, Any]], str | None]:
    """A checked `Reads.trials` query (see there): its page and next cursor."""
    sweep = s.sweep(sweep_id)
    digest = query_digest(sweep_id, states, filters, field, descending)
    position = decode_cursor(cursor, digest) if cursor is not None else None
    if field == "index":
        docs, more = _index_page(s, sweep, states, filters, descending, limit, position)
        last = Position(docs[-1]["index"]) if docs else None
    else:
        keyed = _ordered(s, sweep_id, states, filters, field, descending, position)
        more = len(keyed) > limit
        keyed = keyed[:limit]
        docs = _fetch(s, sweep_id, [index for _, index, _ in keyed], states, filters)
        last = Position(keyed[-1][1], get_path(keyed[-1][2], field)) if keyed else None
    nxt = encode_cursor(digest, last) if more and last is not None else None
    return docs, nxt


def _state_queries(
    s: StoreState, sweep_id: str, states: list[str] | None, filters: Mapping[str, Any] | None = None
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
        for query in _state_queries(s, sweep["_id"], states):
            rows.extend(s.trials.find({**query, "index": window}))
        rows = [r for r in rows if params_match(r, filters)]
        rows.sort(key=lambda r: r["index"], reverse=descending)
        found.extend(rows)
        seen = max(len(found), 1) / scanned
        width = max(width * 2, math.ceil((want - len(found)) / seen * 1.2))
    return found[:limit], len(found) > limit


def _ordered(
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
    for query in _state_queries(s, sweep_id, states, filters):
        rows.extend(s.trials.find(query, projection))
    rows = [r for r in rows if params_match(r, filters) and (keep is None or keep(r))]
    keyed = order(rows, field, descending)
    return [k for k in keyed if after(position, k[0], k[1], descending)]


def _fetch(
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


def _top_summary(s: StoreState, sweep_id: str, direction: str) -> dict[str, Any]:
    """The sweep's top summary, built from its trials first if it has none."""
    summary = summaries.top_document(s.db, sweep_id)
    if summary is None:
        s.build_summaries(sweep_id, direction)
        summary = summaries.top_document(s.db, sweep_id) or {"top": []}
    return summary


def _best_read(s: StoreState, sweep_id: str, k: int, direction: str) -> list[dict[str, Any]]:
    """`best` for a `k` past the summary: every complete trial read, remembered per
    complete count (a complete trial's objective never changes)."""
    counted = s.sweeps.find_one({"_id": sweep_id}, {f"counts.{_COMPLETE}": 1})
    if counted is None:
        raise NotFound("sweep", sweep_id)
    complete = (counted.get("counts") or {}).get(_COMPLETE, 0)
    remembered = s.best.get((sweep_id, k))
    if remembered is not None and remembered[0] == complete:
        return copy.deepcopy(remembered[1])
    keyed = _ordered(
        s,
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
    best = _fetch(s, sweep_id, [index for _, index, _ in keyed[:k]], [_COMPLETE])
    if len(s.best) > 1000:
        s.best.clear()
    s.best[(sweep_id, k)] = (complete, copy.deepcopy(best))
    return best


def best(s: StoreState, sweep_id: str, k: int) -> list[dict[str, Any]]:
    """`Reads.best` (its docstring says what it does)."""
    _metric, direction = s.objective(sweep_id)
    summary = _top_summary(s, sweep_id, direction)
    entries = summaries.top_entries(summary)
    if len(entries) >= k or len(summary.get("top") or []) < summaries.TOP_K:
        chosen = entries[:k]
        docs = {d["_id"]: d for d in s.trials.find({"_id": {"$in": [e["id"] for e in chosen]}})}
        return [
            docs[e["id"]] for e in chosen if e["id"] in docs and docs[e["id"]]["state"] == _COMPLETE
        ]
    return _best_read(s, sweep_id, k, direction)
