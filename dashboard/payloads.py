"""What each page's JSON holds: rows from `data` and `param_axes`, drawn by `figures`.

A sweep page loads `sweep_payload` once, then polls `sweep_changes` with its cursor
(``since``: a store time, see `dashboard.table`) and the digests of the aggregates it
holds. It gets the rows changed after the cursor, which drive the figures it extends
itself (the scatter and the parallel coordinates, where this places the finished ones and
the page only appends them; the failures), and each aggregate whose digest differs from
its own, whole: small figures and tables (objective by width, time
against depth and size, the top trials, failure reasons, the best-so-far history against
trials, time and epochs, the recently pruned trials). On a busy sweep the table's snapshot is
sorted and measured again at most every `PREPARED_SECONDS`. Nothing in a cursor or a
digest belongs to one server process, so the API's several workers can answer the same
page in turn.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from core.analysis.failures import failure_reasons
from core.errors import InvalidQuery, NotFound
from core.spec.kinds import kind_of
from core.spec.objectives import Goals
from core.spec.search_settings import describe, pruning_settings, search_settings
from core.store.roles import Reads
from dashboard import data, figures, param_axes, parcoords
from dashboard.detail import epoch_series, trial_detail
from dashboard.front import front_figures, table_front
from dashboard.history import best_history, history_figures
from dashboard.param_axes import Prepared
from dashboard.table import SweepTable, Tables
from dashboard.timing import timing_figures, timing_rows
from dashboard.workers import inspect_workers, recent_activity, worker_rows

#: Rows in the top-trials table; the learning curves show the first `CURVES_K` of them.
TOP_N = 20
CURVES_K = 10
FAILED_N = 50
#: Rows in the pruned-trials table; the curves show the first `CURVES_PRUNED` of them.
PRUNED_N = 50
CURVES_PRUNED = 10
WORKERS_SECONDS = 3.0


class DashboardState:
    """What the dashboard keeps between requests in one process: tables, curves, workers."""

    def __init__(self, tables: Tables | None = None) -> None:
        self.tables = tables or Tables()
        self._curves: OrderedDict[str, tuple[list[int], list[float | None]]] = OrderedDict()
        self._lock = threading.Lock()
        self._workers: tuple[float, dict[str, Any]] | None = None

    def curve(
        self, reads: Reads, row: Mapping[str, Any], metric: str
    ) -> tuple[list[int], list[float | None]]:
        """A finished trial's per-epoch `metric` (its latest attempt), cached: it is final."""
        key = f"{row['id']}:{row['attempt']}:{metric}"
        with self._lock:
            if key in self._curves:
                self._curves.move_to_end(key)
                return self._curves[key]
        series = epoch_series(reads.metrics_after(row["id"]))
        curve = (series["epochs"], series["values"].get(metric, []))
        with self._lock:
            self._curves[key] = curve
            while len(self._curves) > 2000:
                self._curves.popitem(last=False)
        return curve

    def workers(self, compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """The workers' rows, asked of Celery and the store at most every few seconds."""
        with self._lock:
            cached = self._workers
        if cached is not None and time.monotonic() - cached[0] < WORKERS_SECONDS:
            return cached[1]
        value = compute()
        with self._lock:
            self._workers = (time.monotonic(), value)
        return value


def _objective(sweep: Mapping[str, Any]) -> tuple[str, str]:
    objective = sweep.get("objective") or {}
    return objective.get("metric", "objective"), objective.get("direction", "maximize")


def _changes(sweep: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The sweep's pauses, resumes and spec changes, oldest first (`core.store.changes`)."""
    keys = ("kind", "summary", "by")
    return [
        {"at": data.to_ms(c.get("at")), **{k: c.get(k) for k in keys}}
        for c in sweep.get("changes") or []
    ]


def sweep_meta(sweep: Mapping[str, Any]) -> dict[str, Any]:
    """A sweep's name, owner, dates, objective, and search and pruning settings (with the
    header's one-line summary of them), as pages show them."""
    metric, direction = _objective(sweep)
    search, pruning = search_settings(sweep), pruning_settings(sweep)
    kind = kind_of(sweep.get("spec") or {})
    goals = Goals.of(sweep)
    return {
        "id": sweep["_id"],
        "name": sweep.get("name"),
        "description": sweep.get("description") or "",
        "owner": sweep.get("owner"),
        "created_at": data.to_ms(sweep.get("created_at")),
        "updated_at": data.to_ms(sweep.get("updated_at")),
        "cancelled": sweep.get("cancelled_at") is not None,
        "paused": sweep.get("paused_at") is not None,
        "changes": _changes(sweep),
        "priority": sweep.get("priority") or "normal",
        "trial_count": sweep.get("trial_count", 0),
        "metric": metric,
        "direction": direction,
        # Every objective (the first is `metric`) and the constraints: with several, the
        # page draws the Pareto front (`dashboard.front`).
        "objectives": [{"metric": m, "direction": d} for m, d in goals.objectives],
        "constraints": [c.text for c in goals.constraints],
        "counts": dict(sweep.get("counts") or {}),
        "search": search,
        "pruning": pruning,
        "settings_text": describe(search, pruning, sweep.get("trial_count", 0)),
        # What its trials are: what a reported row is called, and whether they have the
        # depth and width that the width and depth panels draw.
        "kind": kind.name,
        "step": kind.step,
        "shapes": kind.shapes,
    }


def _best(top: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    if not top:
        return None
    return {"objective": top[0]["objective"], "index": top[0]["index"], "id": top[0]["id"]}


def default_param(paths: Sequence[str]) -> str:
    """The scatter's first parameter: hidden units if the sweep varies them."""
    if "model.hidden_units" in paths:
        return "model.hidden_units"
    return next((p for p in paths if not p.endswith(data.SEED_KEYS)), param_axes.INDEX)


def _curves(
    state: DashboardState, reads: Reads, top: Sequence[Mapping[str, Any]], metric: str
) -> list[dict[str, Any]]:
    traces = []
    for row in top:
        epochs, values = state.curve(reads, row, metric)
        if epochs:
            traces.append(figures.curve_trace(row, epochs, values, metric))
    return traces


def aggregate_functions(sweep: Mapping[str, Any]) -> dict[str, Callable[[Prepared], Any]]:
    """name -> compute(prepared rows) for everything a sweep page shows that the table's
    snapshot decides (all but the scatter and parallel coordinates, which depend on the
    page's choices, and the curves, read from the store)."""
    metric, _ = _objective(sweep)
    step = kind_of(sweep.get("spec") or {}).step
    return {
        "history": lambda p: history_figures(best_history(p.rows, p.direction), metric, step),
        "pruned": lambda p: [data.public_row(r) for r in data.pruned_trials(p.rows, PRUNED_N)],
        "width": lambda p: figures.width_figure(
            data.objective_by_width(p.done, p.direction, p.params), metric
        ),
        "timing": lambda p: timing_figures(timing_rows(p.done)),
        "top": lambda p: [data.public_row(r) for r in p.ranked[:TOP_N]],
        "reasons": lambda p: failure_reasons(p.rows),
        "activity": lambda p: data.activity(p.rows),
        "failed": lambda p: [data.public_row(r) for r in data.failed_trials(p.rows, FAILED_N)],
    }


#: The aggregates a page holds and sends the digests of, to be sent them when they change.
AGGREGATES = ("width", "timing", "top", "reasons", "history", "pruned")
#: A snapshot of a busy sweep's rows is sorted and measured again at most this often.
PREPARED_SECONDS = 2.0


def sweep_payload(
    state: DashboardState,
    reads: Reads,
    table: SweepTable,
    now: datetime,
    *,
    param: str | None = None,
    mode: str = "best",
) -> dict[str, Any]:
    """Everything a sweep page draws first, from one snapshot of the table.

    The snapshot may be up to `PREPARED_SECONDS` old on a busy sweep; its cursor comes
    with it, so the page's first poll brings what changed since.
    """
    prep = table.prepared(PREPARED_SECONDS)
    values = {
        name: table.memo(name, compute, PREPARED_SECONDS, versioned=name in AGGREGATES)
        for name, compute in aggregate_functions(table.sweep).items()
    }
    sweep = table.sweep
    metric, _ = _objective(sweep)
    if param not in [*prep.params, param_axes.INDEX]:
        param = default_param(prep.params)
    top = values["top"][1]
    pruned = values["pruned"][1]
    shown = CURVES_PRUNED if pruned or pruning_settings(sweep)["algorithm"] != "none" else 0
    return {
        "since": prep.since,
        "versions": {name: values[name][0] for name in AGGREGATES},
        "sweep": sweep_meta(sweep),
        "summary": {
            **data.summary(sweep["counts"], values["activity"][1], data.to_ms(now) or 0),
            "best": _best(top),
        },
        "params": [*prep.params, param_axes.INDEX],
        "param": param,
        "figures": {
            "width": values["width"][1],
            "timing": values["timing"][1],
            "scatter": _scatter(table, param),
            "parallel": _parallel(table, mode),
            "curves": figures.curves_figure(
                _curves(state, reads, [*top[:CURVES_K], *pruned[:shown]], metric), metric,
                CURVES_K, shown, kind_of(sweep.get("spec") or {}).step,
            ),
            "history": values["history"][1],
        },
        "top": top,
        "pruned": pruned,
        "failed": values["failed"][1],
        "reasons": values["reasons"][1],
        "limits": {
            "top": TOP_N,
            "curves": CURVES_K,
            "curves_pruned": CURVES_PRUNED,
            "pruned": PRUNED_N,
            "failed": FAILED_N,
            "parallel": param_axes.PARALLEL_CAP,
        },
    }


def sweep_changes(
    table: SweepTable, now: datetime, since: int, versions: Mapping[str, str]
) -> dict[str, Any]:
    """The rows changed after the page's cursor `since`; where the complete ones among them
    go on the scatter and the parallel coordinates (``done``: `parcoords.placements`); and
    the aggregates whose digest differs from the page's `versions` (name -> digest)."""
    cursor, rows = table.changed_after(since)
    out: dict[str, Any] = {"since": cursor, "rows": [data.public_row(r) for r in rows]}
    _, dims = table.memo("parallel-dims", param_axes.parallel_dims, PREPARED_SECONDS,
                         versioned=False)
    out["done"] = parcoords.placements(table.prepared(PREPARED_SECONDS), dims, rows)
    aggregates = aggregate_functions(table.sweep)
    current: dict[str, str] = {}
    for name in AGGREGATES:
        version, value = table.memo(name, aggregates[name], PREPARED_SECONDS)
        current[name] = version
        if versions.get(name) != version:
            out[name] = value
    _, top = table.memo("top", aggregates["top"], PREPARED_SECONDS, versioned=False)
    _, active = table.memo("activity", aggregates["activity"], PREPARED_SECONDS, versioned=False)
    out["versions"] = current
    out["summary"] = {
        **data.summary(table.sweep["counts"], active, data.to_ms(now) or 0),
        "best": _best(top),
    }
    out["sweep"] = sweep_meta(table.sweep)
    if len(out["sweep"]["objectives"]) > 1:
        # The front's figures depend on the page's choice of objectives: it asks for them
        # again (`front_payload`) when this version differs from the one it drew.
        out["front"] = table_front(table, PREPARED_SECONDS)["version"]
    return out


def _objective_arg(
    args: Mapping[str, str], name: str, metrics: Sequence[str], default: int | None
) -> int | None:
    """The index of the objective that query argument `name` names (a metric of the
    sweep's; ``none`` for the colour: no objective), or `default` when it is left out."""
    raw = args.get(name)
    if raw is None or raw == "":
        return default
    if raw == "none" and name == "colour":
        return None
    if raw not in metrics:
        extra = " or none" if name == "colour" else ""
        raise InvalidQuery(name, f"must be one of the sweep's objectives ({', '.join(metrics)})"
                           f"{extra}, got {raw[:60]!r}")  # fmt: skip
    return list(metrics).index(raw)


def front_payload(table: SweepTable, args: Mapping[str, str]) -> dict[str, Any]:
    """The sweep's Pareto front for the objectives the query names, ``x`` and ``y`` (each
    a metric of the sweep's objectives; the first two by default) and ``colour`` (the
    third by default when there is one; ``none``: none): the front's summary and figures
    (`dashboard.front`), and the ``version`` the page's polls compare (`sweep_changes`)."""
    front = table_front(table, PREPARED_SECONDS)
    metrics = [o["metric"] for o in front["objectives"]]
    x = _objective_arg(args, "x", metrics, 0)
    y = _objective_arg(args, "y", metrics, 1 if len(metrics) > 1 else 0)
    colour = _objective_arg(args, "colour", metrics, 2 if len(metrics) > 2 else None)
    assert x is not None and y is not None
    _, figs = table.memo(f"front:{x}:{y}:{colour}",
                         lambda _: front_figures(front, x, y, colour), PREPARED_SECONDS,
                         versioned=False)  # fmt: skip
    return {
        "version": front["version"],
        "objectives": front["objectives"],
        "constraints": front["constraints"],
        "x": metrics[x],
        "y": metrics[y],
        "colour": None if colour is None else metrics[colour],
        "front": front["front"],
        "complete": front["complete"],
        "feasible": front["feasible"],
        "reference": front["reference"],
        "hypervolume": front["hypervolume"],
        "figures": figs,
    }


def curves_payload(
    state: DashboardState, reads: Reads, table: SweepTable, indexes: Sequence[int]
) -> dict[str, Any]:
    """Learning-curve traces of some trials of the table (the page's new top trials)."""
    metric, _ = _objective(table.sweep)
    rows = [table.rows[i] for i in indexes if i in table.rows]
    return {"traces": _curves(state, reads, rows, metric)}


def sweeps_payload(state: DashboardState, reads: Reads, now: datetime,
                   since: int | None = None, limit: int = 100, *, owner: str | None = None,
                   cursor: str | None = None,
                   shares: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One page of the newest sweeps (`owner`'s only, unless None) with counts, and the
    best objective of those already in memory; ``next`` is the next page's cursor.
    ``shares``: the fair share of every active sweep of the page (`core.store.shares.
    share_rows`, by sweep id) and the workers online, whole at every answer (they move
    without the sweep's own record moving).

    With `since` (ms), only sweeps updated after it; a page passes the ``now`` of its last
    answer, less a little, so a change is never missed (it may come twice).
    """
    sweeps, next_cursor = reads.list_sweeps(owner=owner, limit=limit, cursor=cursor)
    page = {sweep["_id"] for sweep in sweeps}
    out = []
    for sweep in sweeps:
        meta = sweep_meta(sweep)
        if since is not None and (meta["updated_at"] or 0) <= since:
            continue
        table = state.tables.peek(sweep["_id"])
        best = None
        if table is not None:
            table = state.tables.get(reads, sweep["_id"])
            top = aggregate_functions(table.sweep)["top"]
            best = _best(table.memo("top", top, PREPARED_SECONDS)[1])
        out.append({**meta, "best": best, "best_known": table is not None})
    return {"now": data.to_ms(now), "sweeps": out, "next": next_cursor,
            "shares": {row["id"]: row for row in (shares or {}).get("items", [])
                       if row["id"] in page},
            "workers": (shares or {}).get("workers")}


def sweep_summary(table: SweepTable, now: datetime) -> dict[str, Any]:
    """A sweep's counts, throughput, ETA and best: what the Sweeps page asks per sweep."""
    aggregates = aggregate_functions(table.sweep)
    _, top = table.memo("top", aggregates["top"], PREPARED_SECONDS, versioned=False)
    _, active = table.memo("activity", aggregates["activity"], PREPARED_SECONDS, versioned=False)
    return {
        **sweep_meta(table.sweep),
        **data.summary(table.sweep["counts"], active, data.to_ms(now) or 0),
        "best": _best(top),
        "best_known": True,
    }


def _trial_sweep(reads: Reads, doc: Mapping[str, Any], owner: str | None) -> dict[str, Any]:
    """The trial's sweep; `NotFound` for the trial if the sweep is not `owner`'s."""
    sweep = reads.get_sweep(doc["sweep_id"])
    if owner is not None and sweep.get("owner") != owner:
        raise NotFound("trial", doc["_id"])
    return sweep


def trial_payload(reads: Reads, trial_id: str, now: datetime, *, owner: str | None = None
                  ) -> dict[str, Any]:
    """A trial's record, timings and per-epoch curves (`NotFound` unless `owner`'s, when
    given)."""
    doc = reads.get_trial(trial_id, with_metrics=True)
    sweep = _trial_sweep(reads, doc, owner)
    series = epoch_series(doc.pop("metrics"))
    planned = (doc.get("config") or {}).get("training", {}).get("epochs")
    return {
        "trial": trial_detail(doc, sweep, now),
        "series": series,
        "figures": figures.epoch_figures(series, planned if isinstance(planned, int) else None,
                                         data.pruned_stop(doc),
                                         kind_of(doc.get("config") or {}).step),
    }


def trial_changes(reads: Reads, trial_id: str, now: datetime, attempt: int,
                  epoch: int, *, owner: str | None = None) -> dict[str, Any]:
    """A trial's record now and its epochs after (`attempt`, `epoch`); `NotFound` unless
    `owner`'s, when given.

    ``reset`` when a newer attempt has begun: the page reloads its curves.
    """
    doc = reads.get_trial(trial_id, with_metrics=False)
    sweep = _trial_sweep(reads, doc, owner)
    rows = reads.metrics_after(trial_id, attempt, epoch)
    if (doc.get("attempt") or 0) > attempt or any(r["attempt"] > attempt for r in rows):
        return {"reset": True}
    series = epoch_series(rows)
    return {"reset": False, "trial": trial_detail(doc, sweep, now), "series": series}


def workers_payload(
    state: DashboardState,
    reads: Reads,
    sender: Any,
    now: datetime,
    flower_url: str | None,
    minutes: int = 10,
) -> dict[str, Any]:
    """Online workers (Celery's inspect) with what the store saw of them recently."""

    def compute() -> dict[str, Any]:
        inspected = inspect_workers(sender)
        activity = recent_activity(reads, now, minutes)
        return {
            "broker": sender is not None,
            "error": inspected["error"],
            "workers": worker_rows(inspected["workers"], activity, data.to_ms(now) or 0, minutes),
        }

    return {
        **state.workers(compute),
        "minutes": minutes,
        "flower_url": flower_url,
        "now": data.to_ms(now),
    }


def figure_payload(
    table: SweepTable, which: str, *, param: str | None = None, mode: str = "best"
) -> dict[str, Any]:
    """The scatter (for `param`) or the parallel coordinates (for `mode`) alone."""
    prep = table.prepared(PREPARED_SECONDS)
    if which == "scatter":
        if param not in [*prep.params, param_axes.INDEX]:
            param = default_param(prep.params)
        return {"param": param, "figure": _scatter(table, param)}
    return {"mode": mode, "figure": _parallel(table, mode)}


def _scatter(table: SweepTable, param: str) -> dict[str, Any]:
    metric, _ = _objective(table.sweep)
    return table.memo(
        f"scatter:{param}",
        lambda p: figures.scatter_figure(param_axes.scatter_points(p, param), metric),
        PREPARED_SECONDS,
        versioned=False,
    )[1]


def _parallel(table: SweepTable, mode: str) -> dict[str, Any]:
    metric, direction = _objective(table.sweep)
    return table.memo(
        f"parallel:{mode}",
        lambda p: parcoords.parallel_figure(param_axes.parallel_rows(p, mode), metric, direction),
        PREPARED_SECONDS,
        versioned=False,
    )[1]
