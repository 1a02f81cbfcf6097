"""The sweep page's trials table: every trial of a sweep, sorted, filtered and paged on the
server, from the sweep's in-memory rows (`dashboard.table.SweepTable`), never a store scan.

A request names its table in query parameters, each checked here (an unknown parameter,
column, operator or state is a 400 naming it):

- ``sort``: a column (`FIXED_COLUMNS` or a parameter path such as ``model.hidden_units``),
  ``order``: ``asc`` or ``desc``. Ties go by trial index; trials without a value (a failed
  trial's objective, a conditional parameter that is off) come last either way.
- ``state``: states, comma-separated or repeated (any of them).
- ``filter``: ``column:op:value``, repeated (all must hold). ``eq``/``ne`` compare with a
  value as JSON reads it (``64``, ``true``, ``null`` for "not set", ``[64,32]``), else as
  text (``relu``); ``lt``, ``le``, ``gt``, ``ge`` need a number and match only numbers, so
  ``objective:ge:0.9`` and ``objective:le:0.95`` make a range.
- ``front``: ``true`` keeps the trials on the Pareto front of the sweep's objectives
  (`dashboard.front`: those of the API's ``trials?front=true`` and the page's front
  figure); ``false`` (the default) keeps all.
- ``page`` (from 1; past the last, the last) and ``size`` (`PAGE_SIZES`, at most
  `MAX_PAGE_SIZE`).

Sorting is the costly part (~0.1 s for 50,000 rows by a parameter), so each sort order is
kept with the table's snapshot (`SweepTable.memo`) and shared by every filter and page of
it; a filter is one pass over the sorted rows.
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from werkzeug.datastructures import MultiDict

from core.errors import InvalidQuery
from core.states import ALL_STATES
from core.store.query import sort_key
from dashboard.data import public_row
from dashboard.front import table_front
from dashboard.param_axes import Prepared
from dashboard.table import SweepTable

#: Rows per page a page offers; any size from 1 to `MAX_PAGE_SIZE` is accepted.
PAGE_SIZES = (25, 50, 100, 250, 500)
DEFAULT_PAGE_SIZE = 50
#: The query of the table's first page, which the sweep page asks for before its scripts
#: run (`trials.js` builds the same); a finished sweep's is kept (`dashboard.snapshots`).
FIRST_QUERY = f"sort=index&order=asc&page=1&size={DEFAULT_PAGE_SIZE}"
MAX_PAGE_SIZE = 500
#: Filters one request may hold.
MAX_FILTERS = 20
#: Columns every sweep has (besides its parameters), and whether they hold numbers.
FIXED_COLUMNS = (
    "index",
    "state",
    "objective",
    "train_seconds",
    "param_count",
    "epochs",
    "finished_at",
)
NUMERIC_COLUMNS = frozenset(FIXED_COLUMNS) - {"state"}
OPERATORS = ("eq", "ne", "lt", "le", "gt", "ge")
PARAMETERS = ("sort", "order", "state", "filter", "front", "page", "size")
STATE_ORDER = {state.value: n for n, state in enumerate(ALL_STATES)}
#: How long a snapshot of a busy sweep's rows may serve the table (as the figures).
SNAPSHOT_SECONDS = 2.0
#: Filtered selections kept per table (the latest used), and where.
KEPT_SELECTIONS = 16
_SELECTIONS = "trials:selections"


_NUMBERS = (int, float)
_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "lt": lambda have, want: have < want,
    "le": lambda have, want: have <= want,
    "gt": lambda have, want: have > want,
    "ge": lambda have, want: have >= want,
}


@dataclass(frozen=True)
class Filter:
    """One ``column:op:value`` condition."""

    column: str
    op: str
    value: Any

    def test(self) -> Callable[[Any], bool]:
        """The condition on a cell's value, made once per request (it runs on every row:
        types are tested exactly, a boolean is no number)."""
        want = self.value
        if self.op in _COMPARE:
            compare = _COMPARE[self.op]
            return lambda have: type(have) in _NUMBERS and compare(have, want)
        if type(want) is str:
            equal: Callable[[Any], bool] = lambda have: type(have) is str and have == want  # noqa: E731
        elif type(want) in _NUMBERS:
            equal = lambda have: type(have) in _NUMBERS and have == want  # noqa: E731
        else:
            equal = lambda have: same(have, want)  # noqa: E731
        return equal if self.op == "eq" else lambda have: not equal(have)


@dataclass(frozen=True)
class TableQuery:
    """What one request asks of the table: sort, filters, page."""

    sort: str = "index"
    descending: bool = False
    states: frozenset[str] = frozenset()
    filters: tuple[Filter, ...] = ()
    page: int = 1
    size: int = DEFAULT_PAGE_SIZE
    front: bool = False

    def matches(self, row: Mapping[str, Any], front: frozenset[int] = frozenset()) -> bool:
        return self.predicate(front)(row)

    def key(self) -> str:
        """What the rows it selects depend on (not the page): a cache key."""
        filters = ";".join(f"{f.column}:{f.op}:{json.dumps(f.value)}" for f in self.filters)
        order = "desc" if self.descending else "asc"
        front = ":front" if self.front else ""
        return f"trials:{self.sort}:{order}:{','.join(sorted(self.states))}:{filters}{front}"

    def predicate(self, front: frozenset[int] = frozenset()) -> Callable[[Mapping[str, Any]], bool]:
        """Whether a row matches: on the front (`front`: the indexes on it) when the query
        asks, in one of its states, then each filter on its cell."""
        states = self.states
        checks = [(f.column, f.column in FIXED_COLUMNS, f.test()) for f in self.filters]
        only_front = self.front

        def matches(row: Mapping[str, Any]) -> bool:
            if only_front and row["index"] not in front:
                return False
            if states and row["state"] not in states:
                return False
            for column, fixed, test in checks:
                if not test(row.get(column) if fixed else row["params"].get(column)):
                    return False
            return True

        return matches


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def same(have: Any, want: Any) -> bool:
    """Equal as the table shows values: booleans only equal booleans, 64 equals 64.0,
    lists element by element."""
    if isinstance(have, bool) or isinstance(want, bool):
        return isinstance(have, bool) and isinstance(want, bool) and have == want
    if isinstance(have, list) and isinstance(want, list):
        return len(have) == len(want) and all(map(same, have, want))
    if _is_number(have) and _is_number(want):
        return float(have) == float(want)
    return type(have) is type(want) and have == want


def cell(row: Mapping[str, Any], column: str) -> Any:
    """A row's value in a column: a fixed one, else a parameter (None where not set)."""
    if column in FIXED_COLUMNS:
        return row.get(column)
    return row["params"].get(column)


def columns_of(prep: Prepared) -> tuple[str, ...]:
    """The columns of a sweep's table: the fixed ones, then its parameter paths."""
    return (*FIXED_COLUMNS, *prep.params)


def _one(args: MultiDict, name: str) -> str | None:
    values = args.getlist(name)
    if len(values) > 1:
        raise InvalidQuery(name, "may be given once")
    return values[0] if values else None


def _column(name: str, value: str, columns: Sequence[str]) -> str:
    if value not in columns:
        known = ", ".join(columns)
        raise InvalidQuery(name, f"unknown column {value[:60]!r} (columns: {known})")
    return value


def _int(name: str, raw: str | None, default: int, low: int, high: int) -> int:
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidQuery(
            name, f"must be an integer from {low} to {high}, got {raw[:40]!r}"
        ) from None
    if not low <= value <= high:
        raise InvalidQuery(name, f"must be an integer from {low} to {high}, got {value}")
    return value


def _value(text: str) -> Any:
    """A filter value: what JSON reads (numbers, true, null, lists), else the text."""
    try:
        value = json.loads(text)
    except RecursionError as exc:
        raise InvalidQuery("filter", f"values may not nest lists this deep, got {text[:40]!r}"
                           ) from exc  # fmt: skip
    except ValueError:
        return text
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidQuery("filter", f"values must be finite, got {text[:40]!r}")
    if isinstance(value, dict):
        raise InvalidQuery("filter", f"values may not be objects, got {text[:40]!r}")
    return value


def parse_filter(text: str, columns: Sequence[str]) -> Filter:
    """One ``column:op:value`` (the value may hold colons)."""
    parts = text.split(":", 2)
    if len(parts) != 3:
        raise InvalidQuery("filter", f"must be column:op:value, got {text[:60]!r}")
    column, op, raw = parts
    _column("filter", column, columns)
    if op not in OPERATORS:
        raise InvalidQuery(
            "filter",
            f"unknown operator {op[:20]!r} for {column} (operators: {', '.join(OPERATORS)})",
        )
    value = _value(raw)
    if op not in ("eq", "ne") and not _is_number(value):
        raise InvalidQuery("filter", f"{column}:{op} needs a number, got {raw[:40]!r}")
    return Filter(column, op, value)


def parse_query(
    args: MultiDict, columns: Sequence[str], *, paged: bool = True, extra: Sequence[str] = ()
) -> TableQuery:
    """The table a request's query parameters ask for (`InvalidQuery` naming the first
    parameter that is wrong). `paged` False: a download, which takes every row; `extra`:
    the caller's own parameters, left to it."""
    accepted = (*PARAMETERS, *extra)
    for name in args:
        if name not in accepted:
            raise InvalidQuery(name, f"is not a parameter here (accepted: {', '.join(accepted)})")
    sort = _column("sort", _one(args, "sort") or "index", columns)
    order = _one(args, "order") or "asc"
    if order not in ("asc", "desc"):
        raise InvalidQuery("order", f"must be asc or desc, got {order[:40]!r}")
    states: set[str] = set()
    for item in args.getlist("state"):
        for state in filter(None, item.split(",")):
            if state not in STATE_ORDER:
                raise InvalidQuery(
                    "state", f"unknown state {state[:40]!r} (states: {', '.join(STATE_ORDER)})"
                )
            states.add(state)
    texts = args.getlist("filter")
    if len(texts) > MAX_FILTERS:
        raise InvalidQuery("filter", f"at most {MAX_FILTERS} filters, got {len(texts)}")
    filters = tuple(parse_filter(text, columns) for text in texts)
    page = _int("page", _one(args, "page"), 1, 1, 10**9) if paged else 1
    size = _int("size", _one(args, "size"), DEFAULT_PAGE_SIZE, 1, MAX_PAGE_SIZE)
    front = _one(args, "front") or "false"
    if front not in ("true", "false"):
        raise InvalidQuery("front", f"must be true or false, got {front[:40]!r}")
    return TableQuery(sort, order == "desc", frozenset(states), filters, page, size,
                      front == "true")  # fmt: skip


def _sort_value(column: str) -> Callable[[Mapping[str, Any]], Any]:
    if column == "state":
        return lambda row: STATE_ORDER.get(row["state"], len(STATE_ORDER))
    if column in NUMERIC_COLUMNS:
        return lambda row: row.get(column)
    return lambda row: sort_key(row["params"].get(column))


def sorted_rows(
    rows: Sequence[Mapping[str, Any]], column: str, descending: bool
) -> list[Mapping[str, Any]]:
    """`rows` by `column` (ties: by index; rows without a value last, by index)."""
    by_index = sorted(rows, key=lambda row: row["index"])
    have = [row for row in by_index if cell(row, column) is not None]
    missing = [row for row in by_index if cell(row, column) is None]
    # Python's sort is stable, reversed too: equal values stay in index order.
    have.sort(key=_sort_value(column), reverse=descending)
    return have + missing


def select(table: SweepTable, query: TableQuery) -> tuple[Prepared, list[Mapping[str, Any]]]:
    """The table's snapshot, and its rows that match `query`, in its order. The sorted rows
    are kept with the snapshot, and the latest `KEPT_SELECTIONS` selections made from them,
    so paging through one, or polling it, sorts and filters nothing again."""
    unfiltered = TableQuery(query.sort, query.descending)
    _, ordered = table.memo(
        unfiltered.key(),
        lambda prep: sorted_rows(prep.rows, query.sort, query.descending),
        SNAPSHOT_SECONDS,
        versioned=False,
    )
    prep = table.prepared(SNAPSHOT_SECONDS)
    if not query.states and not query.filters and not query.front:
        return prep, ordered
    kept: OrderedDict[str, tuple[list, list]] | None = table.memo_get(_SELECTIONS)
    if kept is None:
        kept = OrderedDict()
        table.memo_set(_SELECTIONS, kept)
    key = query.key()
    found = kept.get(key)
    if found is not None and found[0] is ordered:  # made from this snapshot's order
        kept.move_to_end(key)
        return prep, found[1]
    front = table_front(table, SNAPSHOT_SECONDS)["front"] if query.front else ()
    matches = query.predicate(frozenset(front))
    chosen = [row for row in ordered if matches(row)]
    kept[key] = (ordered, chosen)
    while len(kept) > KEPT_SELECTIONS:
        kept.popitem(last=False)
    return prep, chosen


def _shown(row: Mapping[str, Any]) -> dict[str, Any]:
    out = public_row(row)
    for key in ("started_at", "seed", "attempt", "worker", "device", "units", "layers"):
        out.pop(key, None)
    return out


def table_payload(table: SweepTable, args: MultiDict) -> dict[str, Any]:
    """One page of the sweep's trials table for the query parameters `args`."""
    query = parse_query(args, columns_of(table.prepared(SNAPSHOT_SECONDS)))
    prep, rows = select(table, query)
    pages = max(1, math.ceil(len(rows) / query.size))
    page = min(query.page, pages)
    start = (page - 1) * query.size
    counts = table.sweep.get("counts") or {}
    return {
        "since": prep.since,
        "total": len(rows),
        "all": len(prep.rows),
        "page": page,
        "pages": pages,
        "size": query.size,
        "sort": query.sort,
        "order": "desc" if query.descending else "asc",
        "front": query.front,
        "columns": list(FIXED_COLUMNS),
        "params": list(prep.params),
        "left": counts.get("queued", 0) + counts.get("running", 0),
        "failed": counts.get("failed", 0),
        "cancelled": table.sweep.get("cancelled_at") is not None,
        "paused": table.sweep.get("paused_at") is not None,
        "rows": [_shown(row) for row in rows[start : start + query.size]],
    }


def selected_indexes(
    table: SweepTable, args: MultiDict, extra: Sequence[str] = ()
) -> tuple[list[int], bool]:
    """The indexes of the trials a download of `args` holds, in order, and whether a filter
    chose them (else they are every trial). Sort and page are accepted and left aside, so a
    page can send its table's query as it is."""
    query = parse_query(
        args, columns_of(table.prepared(SNAPSHOT_SECONDS)), paged=False, extra=extra
    )
    _, rows = select(table, query)
    filtered = bool(query.states or query.filters or query.front)
    return sorted(row["index"] for row in rows), filtered
