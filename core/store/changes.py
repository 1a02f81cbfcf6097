"""The reads a live page polls: what changed since a watermark, a whole sweep's rows, and
how fast a sweep goes; the longer reads of `core.store.reads.Reads` (whose docstrings say what
each answers), as functions of the store's shared state (`core.store.state`).

A change feed read delivers each change at least once (`core.store.store`'s ``change_lag``);
`sweep_rows` is every trial of a sweep, mostly from its finish log (`core.store.summaries`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from core.errors import InvalidQuery
from core.states import FINISH_STATES, TrialState
from core.store import summaries
from core.store.query import check_name
from core.store.state import StoreState, summaries_projection

log = logging.getLogger(__name__)

_FINISHED = frozenset(s.value for s in FINISH_STATES)
#: The states a sweep's finish log does not hold: read from the trials themselves.
_LIVE = (TrialState.QUEUED.value, TrialState.RUNNING.value, TrialState.CANCELLED.value)


def changes(
    s: StoreState, sweep_id: str, since: datetime | None, projection: dict[str, int]
) -> tuple[list[dict[str, Any]], datetime]:
    """Trials changed after `since` (projected), in change order, and the watermark."""
    s.sweep(sweep_id)
    if since is not None and not isinstance(since, datetime):
        raise InvalidQuery("since", f"must be a datetime, got {since!r}")
    if since is not None and since.tzinfo is None:
        since = since.replace(tzinfo=UTC)
    start = s.clock()
    query: dict[str, Any] = {"sweep_id": sweep_id}
    if since is not None:
        query["updated_at"] = {"$gt": since}
    docs = sorted(s.trials.find(query, projection), key=lambda d: (d["updated_at"], d["index"]))
    watermark = start - s.change_lag
    if since is not None and since > watermark:
        watermark = since
    return docs, watermark


def throughput(s: StoreState, sweep_id: str, minutes: int = 10) -> dict[str, Any]:
    """`Reads.throughput` (its docstring says what it does)."""
    if isinstance(minutes, bool) or not isinstance(minutes, int) or not 1 <= minutes <= 10080:
        raise InvalidQuery("minutes", f"must be an integer from 1 to 10080, got {minutes!r}")
    sweep = s.sweep(sweep_id)
    counts = sweep["counts"]
    remaining = counts[TrialState.QUEUED.value] + counts[TrialState.RUNNING.value]
    now = s.clock()
    start = max(now - timedelta(minutes=minutes), sweep["created_at"])
    window = max((now - start).total_seconds(), 1.0)
    out: dict[str, Any] = {
        "per_minute": None, "window_seconds": window, "remaining": remaining,
        "eta_seconds": 0.0 if remaining == 0 else None,
    }  # fmt: skip
    if remaining == 0 or sweep.get("cancelled_at") is not None:
        return out
    rows = s.trials.find(
        {"sweep_id": sweep_id, "updated_at": {"$gt": start}},
        {"_id": 0, "state": 1, "finished_at": 1},
    )
    finished = _FINISHED
    done = sum(
        1
        for row in rows
        if row.get("state") in finished and (row.get("finished_at") or start) > start
    )
    if done:
        out["per_minute"] = done * 60.0 / window
        out["eta_seconds"] = remaining * window / done
    return out


def changed_rows(
    s: StoreState, sweep_id: str, since: datetime | None, fields: Sequence[str]
) -> tuple[list[dict[str, Any]], datetime]:
    """`Reads.changed_rows` (its docstring says what it does)."""
    if isinstance(fields, str) or not isinstance(fields, Sequence):
        raise InvalidQuery("fields", f"must be a list of field paths, got {fields!r}")
    paths = {"_id", "index", "updated_at"}
    for path in fields:
        if not isinstance(path, str):
            raise InvalidQuery("fields", f"must be field paths, got {path!r}")
        for part in path.split("."):
            check_name("fields", part)
        paths.add(path)
    # MongoDB refuses a projection naming both a path and a path inside it.
    kept = [p for p in paths if not any(p.startswith(q + ".") for q in paths)]
    return changes(s, sweep_id, since, dict.fromkeys(kept, 1))


def sweep_rows(
    s: StoreState, sweep_id: str, fields: Sequence[str]
) -> tuple[list[dict[str, Any]], datetime]:
    """`Reads.sweep_rows` (its docstring says what it does)."""
    _check_fields(fields)
    sweep = s.sweep(sweep_id)
    direction = (sweep.get("objective") or {}).get("direction", "maximize")
    projection = summaries_projection(fields)
    start = s.clock()
    has_log = summaries.top_document(s.db, sweep_id) is not None
    if has_log and set(fields) <= set(summaries.ROW_FIELDS):
        rows: dict[int, dict[str, Any]] = {}
        for state in _LIVE:
            for doc in s.trials.find({"state": state, "sweep_id": sweep_id}, projection):
                rows[doc["index"]] = doc
        _newest(rows, summaries.finished_rows(s.db, sweep_id).values())
        recent, _ = changes(s, sweep_id, start - s.change_lag, projection)
        _newest(rows, recent)
        if len(rows) >= sweep["trial_count"] - int(sweep.get("planned") or 0):
            docs = sorted(rows.values(), key=lambda d: (d["updated_at"], d["index"]))
            return docs, start - s.change_lag
        log.warning(
            "sweep %s: the finish log accounts for %d of %d trials; reading the trials",
            sweep_id, len(rows), sweep["trial_count"] - int(sweep.get("planned") or 0),
        )  # fmt: skip
    docs, watermark = changes(s, sweep_id, None, projection)
    if set(fields) <= set(summaries.ROW_FIELDS):
        if has_log:
            summaries.clear(s.db, sweep_id)
        finished = [d for d in docs if d.get("state") in _FINISHED]
        s.build_summaries(sweep_id, direction, finished)
    return docs, watermark


def _check_fields(fields: Sequence[str]) -> None:
    if isinstance(fields, str) or not isinstance(fields, Sequence):
        raise InvalidQuery("fields", f"must be a list of field paths, got {fields!r}")
    for path in fields:
        if not isinstance(path, str):
            raise InvalidQuery("fields", f"must be field paths, got {path!r}")
        for part in path.split("."):
            check_name("fields", part)


def _newest(rows: dict[int, dict[str, Any]], docs: Iterable[dict[str, Any]]) -> None:
    """Put each of `docs` in `rows` (by index) unless the row there changed later."""
    for doc in docs:
        old = rows.get(doc["index"])
        if old is None or doc["updated_at"] >= old["updated_at"]:
            rows[doc["index"]] = doc
