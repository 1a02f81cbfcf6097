"""A sweep's parameters as axes: the objective scatter and the parallel coordinates' rows.

Both figures need the same work on every trial of the sweep (the complete ones sorted
by index and by objective, each parameter's kind of axis), so it is done once per
snapshot of the table, in `prepare`, and each figure then takes what it needs. Axes are
computed over every trial, queued ones too, so results arriving later fall inside them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.spec.values import value_text
from core.store.query import sort_key
from dashboard.data import SEED_KEYS, complete_rows, rank_key

#: Parallel coordinates show at most this many trials.
PARALLEL_CAP = 5000
#: The pseudo-parameter that plots trials by their index.
INDEX = "index"


def param_paths(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every parameter path the sweep's trials set, in the order they first appear."""
    seen: dict[str, None] = {}
    for row in rows:
        seen.update(dict.fromkeys(row["params"]))
    return list(seen)


def param_value(row: Mapping[str, Any], param: str) -> Any:
    """A trial's value of a parameter path, or its index for the pseudo-parameter ``index``."""
    return row["index"] if param == INDEX else row["params"].get(param)


def _distinct(values: Iterable[Any]) -> list[Any]:
    """The distinct values, None left out; lists and booleans kept apart from numbers."""
    seen: dict[Any, Any] = {}
    for value in values:
        if value is None:
            continue
        key = (type(value) is bool, tuple(value) if isinstance(value, list) else value)
        try:
            seen.setdefault(key, value)
        except TypeError:  # a nested list
            seen.setdefault(repr(value), value)
    return list(seen.values())


def axis_kind(values: Iterable[Any]) -> dict[str, Any]:
    """How to lay out a parameter on an axis: numbers (``log`` when they span 30x, all
    positive; ``values``: the distinct ones, when 12 or fewer) or categories (the sorted
    distinct values, as text: `core.spec.values.value_text`)."""
    distinct = _distinct(values)
    numeric = all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in distinct
    )
    if numeric and distinct:
        numbers = sorted(float(v) for v in distinct)
        low, high = numbers[0], numbers[-1]
        log = low > 0 and high / low >= 30
        axis: dict[str, Any] = {"kind": "log" if log else "linear", "low": low, "high": high}
        if len(numbers) <= 12:
            axis["values"] = numbers
        return axis
    ordered = sorted(distinct, key=sort_key)
    return {"kind": "category", "categories": list(dict.fromkeys(map(value_text, ordered)))}


@dataclass(frozen=True)
class Prepared:
    """One snapshot of a sweep's rows, sorted the ways its figures need.

    ``since`` is the page cursor of the snapshot; ``done`` the complete trials with an
    objective by index, ``ranked`` the same best first; ``axes`` the axis of every
    parameter (and of ``index``).
    """

    since: int
    direction: str
    rows: list[Mapping[str, Any]]
    done: list[Mapping[str, Any]]
    ranked: list[Mapping[str, Any]]
    params: list[str]
    axes: dict[str, dict[str, Any]]


def prepare(rows: Sequence[Mapping[str, Any]], direction: str, since: int = 0) -> Prepared:
    """Sort and measure a snapshot of rows once for every figure that needs them."""
    done = sorted(complete_rows(rows), key=lambda r: r["index"])
    params = param_paths(rows)
    axes = {path: axis_kind(r["params"].get(path) for r in rows) for path in params}
    axes[INDEX] = axis_kind(r["index"] for r in done)
    return Prepared(since, direction, list(rows), done, sorted(done, key=rank_key(direction)),
                    params, axes)


def scatter_points(prep: Prepared, param: str) -> dict[str, Any]:
    """Objective against one parameter (or ``index``) for every complete trial.

    ``x`` holds numbers or category labels (see `axis_kind`), ``y`` the objectives and
    ``index`` the trial indexes (so a click opens the trial), in index order.
    """
    axis = prep.axes.get(param) or axis_kind(param_value(r, param) for r in prep.done)
    xs = [_x(axis, param_value(r, param)) for r in prep.done]
    return {
        "param": param,
        "axis": axis,
        "x": xs,
        "y": [r["objective"] for r in prep.done],
        "index": [r["index"] for r in prep.done],
    }


def parallel_dims(prep: Prepared) -> list[dict[str, Any]]:
    """The parallel coordinates' axes: one per parameter that takes more than one value in
    the sweep (seeds left out), with its axis (`axis_kind`), then the objective's, from the
    lowest objective of the complete trials to the highest."""
    dims: list[dict[str, Any]] = []
    for path in prep.params:
        axis = prep.axes[path]
        if path.endswith(SEED_KEYS):
            continue
        distinct = len(axis["categories"]) if axis["kind"] == "category" else None
        if distinct == 1 or (distinct is None and axis["low"] == axis["high"]):
            continue
        dims.append({"path": path, "label": path.split(".", 1)[1], **axis})
    objectives = [r["objective"] for r in prep.ranked] or [0.0]
    dims.append({"path": "objective", "label": "objective", "kind": "linear",
                 "low": min(objectives), "high": max(objectives)})
    return dims


def parallel_rows(prep: Prepared, mode: str = "best", cap: int | None = None) -> dict[str, Any]:
    """Parameters → objective for at most `cap` (`PARALLEL_CAP`) complete trials: the
    best, or the most recently finished (`mode` ``recent``).

    ``dims``: the axes (`parallel_dims`). ``kept``: the trials shown, best (or newest)
    first. ``total``: how many complete trials there are.
    """
    if mode not in ("best", "recent"):
        raise ValueError(f"mode must be best or recent, got {mode!r}")
    cap = PARALLEL_CAP if cap is None else cap
    if mode == "best":
        kept = prep.ranked[:cap]
    else:
        kept = sorted(prep.done, key=lambda r: (r["finished_at"] or 0, r["index"]),
                      reverse=True)[:cap]
    return {"mode": mode, "cap": cap, "total": len(prep.done), "dims": parallel_dims(prep),
            "kept": kept}


def scatter_x(prep: Prepared, row: Mapping[str, Any]) -> dict[str, Any]:
    """Where a trial goes on the scatter's x axis for each parameter (and ``index``), as
    `scatter_points` places it: its value, or on a category axis the value as text. A
    page places a newly finished trial with it, whichever parameter it shows."""
    out = {path: _x(prep.axes[path], row["params"].get(path)) for path in prep.params}
    out[INDEX] = row["index"]
    return out


def _x(axis: Mapping[str, Any], value: Any) -> Any:
    return value_text(value) if axis["kind"] == "category" else value
