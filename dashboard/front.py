"""The sweep page's Pareto front, in two steps: the rows of a sweep's front, then its figures.

Rows (`front_points`): every complete trial that has a value for each objective, with
whether it is feasible and whether it is on the front, and the hypervolume after each
trial finished. The front, its reference point and its hypervolume are
`core.analysis.pareto.front_rows`'s, the same value the API (``GET
/api/v1/sweeps/{id}/front``) and ``sweepstack front`` give: the front is computed once, on
the server, and the trials table's "on the front" filter reads the same rows
(`table_front`). The hypervolume history is measured against the *current* reference
point (the feasible trials' nadir moved out, `core.analysis.pareto.default_reference`), so
its last value is the front's hypervolume and the line never falls; while the sweep runs,
the reference point moves out with the worst trials and the whole line is measured again.

Figures (`front_figures`): the objectives two by two, as the page chooses them (a third as
colour, in bands): the front's trials marked, the others feasible or infeasible, and the *2-D front*
of the pair shown (the trials no other feasible one beats on both) as a step line; with
two objectives it runs through every trial of the front. Beside it, the hypervolume
against trials finished (complete, failed or pruned, as the best-so-far chart counts them).
The clouds of trials are WebGL (``scattergl``, circles only, which the compiled regl code
draws: `static/regl_shim.js`); the front and its line are SVG.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from core.analysis.layout import base_layout, plotly_text
from core.analysis.pareto import front_rows, hypervolume, losses, nondominated
from core.spec.objectives import Goals
from core.states import FINISH_STATES, TrialState
from dashboard.figures import STATE_COLOURS, empty_note, marker_style
from dashboard.parcoords import band_colours, band_edges, band_of
from dashboard.table import SweepTable, digest

_COMPLETE = TrialState.COMPLETE.value
_FINISHED = frozenset(s.value for s in FINISH_STATES)
#: The memo of a table's front rows (`table_front`).
MEMO = "front"
INFEASIBLE_COLOUR = "#9aa5b1"
#: Colour bands of the objective that colours the scatter.
COLOUR_BANDS = 5
FRONT_COLOUR = "#1f3a93"


def _values(row: Mapping[str, Any], n: int) -> list[float] | None:
    """A row's objective values, as `front_rows` reads a trial's: all finite, or None."""
    values = row.get("objectives") or [row.get("objective")]
    if len(values) != n:
        return None
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            return None
        out.append(float(v))
    return out


def front_points(rows: Iterable[Mapping[str, Any]], goals: Goals) -> dict[str, Any]:
    """The rows of a sweep's front (module docstring) from the dashboard's trial rows
    (`dashboard.data.trial_row`): ``objectives``, ``constraints``, ``points`` (one per
    complete trial with every value, by index: ``index``, ``values``, ``feasible``,
    ``front``), ``front`` (the indexes on it, by the first objective), ``complete``,
    ``feasible``, ``reference`` and ``hypervolume`` (None without a feasible trial),
    ``history`` (``steps``: ``{trials, hypervolume, index}`` at each trial that raised it;
    ``trials``: how many finished) and ``version``, a digest of what the figures draw."""
    rows = list(rows)
    n = len(goals.objectives)
    directions = [d for _, d in goals.objectives]
    points: list[dict[str, Any]] = []
    docs = []
    for row in rows:
        if row["state"] != _COMPLETE:
            continue
        values = _values(row, n)
        if values is None:
            continue
        feasible = row.get("feasible") is not False
        points.append({"index": row["index"], "values": values, "feasible": feasible})
        docs.append({"_id": row["id"], "index": row["index"], "state": _COMPLETE,
                     "objectives": values, "feasible": feasible})  # fmt: skip
    points.sort(key=itemgetter("index"))
    front = front_rows(docs, goals)
    on = [t["index"] for t in front["trials"]]
    chosen = set(on)
    for point in points:
        point["front"] = point["index"] in chosen
    history = _history(rows, n, directions, front["reference"])
    value = {
        "objectives": front["objectives"],
        "constraints": front["constraints"],
        "points": points,
        "front": on,
        "complete": front["complete"],
        "feasible": front["feasible"],
        "reference": front["reference"],
        "hypervolume": front["hypervolume"],
        "history": history,
    }
    value["version"] = digest([len(points), front["feasible"], on, front["hypervolume"],
                               history["trials"]])  # fmt: skip
    return value


def _history(
    rows: Sequence[Mapping[str, Any]],
    n: int,
    directions: Sequence[str],
    reference: Sequence[float] | None,
) -> dict[str, Any]:
    """The hypervolume against trials finished, in finish order (time, then index),
    against `reference` (in the objectives' units); a step where it rose."""
    done = [r for r in rows if r["state"] in _FINISHED and r.get("finished_at") is not None]
    done.sort(key=itemgetter("finished_at", "index"))
    steps: list[dict[str, Any]] = []
    if reference is None:
        return {"steps": steps, "trials": len(done)}
    ref = losses(np.array([list(reference)]), directions)[0]
    counted = []  # (trials finished by then, the row) of each feasible complete trial
    for trials, row in enumerate(done, start=1):
        values = _values(row, n) if row["state"] == _COMPLETE else None
        if values is not None and row.get("feasible") is not False:
            counted.append((trials, row, values))
    points = losses(np.array([v for _, _, v in counted]).reshape(-1, n), directions)
    kept = np.empty((0, n))
    volume = 0.0
    for (trials, row, _), point in zip(counted, points, strict=True):
        if len(kept) and (kept <= point).all(axis=1).any():
            continue  # dominated by (or equal to) a kept point: the volume is the same
        kept = np.vstack([kept[~(point <= kept).all(axis=1)], point])
        now = hypervolume(kept, ref)
        if now > volume:
            volume = now
            steps.append({"trials": trials, "hypervolume": now, "index": row["index"]})
    return {"steps": steps, "trials": len(done)}


def table_front(table: SweepTable, max_age: float) -> dict[str, Any]:
    """`front_points` of a sweep's in-memory table, computed once per snapshot of it (the
    figures, the trials table's filter and the page's polls share it)."""
    goals = Goals.of(table.sweep)
    return table.memo(MEMO, lambda prep: front_points(prep.rows, goals), max_age,
                      versioned=False)[1]  # fmt: skip


# -- figures ---------------------------------------------------------------------------


def _label(objective: Mapping[str, Any]) -> str:
    arrow = "↑" if objective["direction"] == "maximize" else "↓"
    return f"{plotly_text(objective['metric'])} {arrow}"


def _axis(values: Sequence[float]) -> dict[str, Any]:
    """A log axis for positive values spanning two decades or more (parameter counts)."""
    low, high = (min(values), max(values)) if values else (0.0, 0.0)
    return {"type": "log"} if low > 0 and high / low >= 100 else {}


def _column(points: Sequence[Mapping[str, Any]], i: int) -> list[float]:
    return [p["values"][i] for p in points]


def _step_line(
    points: Sequence[Mapping[str, Any]], x: int, y: int, directions: Sequence[str]
) -> list[Mapping[str, Any]]:
    """The feasible points no other beats on both objectives `x` and `y`, along `x` from
    its best end: drawn with ``shape: "hv"``, the line is the edge of what they dominate."""
    feasible = [p for p in points if p["feasible"]]
    if not feasible:
        return []
    pair = losses(np.array([[p["values"][x], p["values"][y]] for p in feasible]),
                  [directions[x], directions[y]])  # fmt: skip
    on = np.flatnonzero(nondominated(pair)).tolist()
    on.sort(key=lambda i: (pair[i, 0], pair[i, 1]))
    return [feasible[i] for i in on]


def pareto_figure(front: Mapping[str, Any], x: int, y: int, colour: int | None) -> dict[str, Any]:
    """Objective `y` against objective `x` (indexes into ``front["objectives"]``), coloured
    by objective `colour` (None: by kind): the front's trials, the other feasible ones, the
    infeasible ones, and the pair's 2-D front as a step line. Each trace's ``meta`` says
    which of them it is (``feasible``, ``infeasible``, ``line``, ``front``).

    The colour is in bands, as the parallel coordinates' (`parcoords.band_edges`:
    quantiles of the feasible trials' values, Viridis from its dark end for the best), one
    legend entry and one trace of the feasible trials per band: a continuous colour scale
    would need plotly's colour bar, whose gradient is an inline style the pages' policy
    refuses."""
    objectives = front["objectives"]
    directions = [o["direction"] for o in objectives]
    points = front["points"]
    xo, yo = objectives[x], objectives[y]
    on = [p for p in points if p["front"]]
    rest = [p for p in points if p["feasible"] and not p["front"]]
    infeasible = [p for p in points if not p["feasible"]]
    size, opacity = marker_style(len(points))
    hover = f"trial #%{{customdata}}<br>{_label(xo)} %{{x:.4g}}<br>{_label(yo)} %{{y:.4g}}"
    if colour is not None:
        hover += f"<br>{_label(objectives[colour])} %{{text}}"

    def trace(
        kind: str,
        group: Sequence[Mapping[str, Any]],
        name: str,
        meta: str,
        marker: dict[str, Any],
        note: str = "",
    ) -> dict[str, Any]:
        out = {
            "type": kind,
            "mode": "markers",
            "name": name,
            "meta": meta,
            "x": _column(group, x),
            "y": _column(group, y),
            "customdata": [p["index"] for p in group],
            "marker": marker,
            "hovertemplate": hover + note + "<extra></extra>",
        }
        if colour is not None:
            out["text"] = [f"{v:.4g}" for v in _column(group, colour)]
        return out

    cloud = {"size": size, "opacity": opacity}
    front_marker: dict[str, Any] = {
        "color": FRONT_COLOUR,
        "size": 10,
        "symbol": "diamond",
        "line": {"color": FRONT_COLOUR, "width": 1.5},
    }
    if colour is None:
        feasible = [
            trace(
                "scattergl",
                rest,
                "feasible",
                "feasible",
                {**cloud, "color": STATE_COLOURS["complete"]},
            )
        ]
    else:
        edges = band_edges(_column([p for p in points if p["feasible"]], colour), COLOUR_BANDS)
        maximize = directions[colour] == "maximize"
        colours = band_colours(len(edges) - 1, maximize)
        bands: dict[int, list[Mapping[str, Any]]] = {}
        for p in rest:
            bands.setdefault(band_of(p["values"][colour], edges), []).append(p)
        metric = plotly_text(objectives[colour]["metric"])
        feasible = [
            trace(
                "scattergl",
                bands[b],
                f"{metric} {edges[b]:.3g} to {edges[b + 1]:.3g}",
                "feasible",
                {**cloud, "color": colours[b]},
            )
            for b in sorted(bands, reverse=maximize)  # the best band first
        ]
        front_marker["color"] = [colours[band_of(p["values"][colour], edges)] for p in on]
    line = _step_line(points, x, y, directions)
    traces = [
        *feasible,
        trace("scattergl", infeasible, "infeasible (breaks a constraint)", "infeasible",
              {"color": INFEASIBLE_COLOUR, "size": size, "opacity": 0.5}, "<br>infeasible"),
        {
            "type": "scatter", "mode": "lines", "name": "front of these two", "meta": "line",
            "x": _column(line, x), "y": _column(line, y), "hoverinfo": "skip",
            "line": {"shape": "hv", "color": FRONT_COLOUR, "width": 2},
        },
        trace("scatter", on, "on the front", "front", front_marker, "<br>on the front"),
    ]  # fmt: skip
    title = (f"Pareto front: {plotly_text(yo['metric'])} vs {plotly_text(xo['metric'])} "
             f"({len(on):,} of {front['feasible']:,} feasible trials on the front)")  # fmt: skip
    legend: dict[str, Any] = {"orientation": "h", "y": -0.2}
    if colour is not None:
        legend["title"] = {"text": f"colour: {_label(objectives[colour])}"}
    layout = base_layout(title, _label(xo), _label(yo), xaxis=_axis(_column(points, x)),
                         yaxis=_axis(_column(points, y)), legend=legend,
                         uirevision=f"{x}:{y}")  # fmt: skip
    subtitle = f"{len(infeasible):,} infeasible" if front["constraints"] else "no constraints"
    if front["constraints"]:
        subtitle += " (" + "; ".join(plotly_text(c) for c in front["constraints"]) + ")"
    layout["title"]["subtitle"] = {"text": subtitle, "font": {"size": 12, "color": "#616e7c"}}
    layout["margin"] = {**layout["margin"], "t": 64, "b": 110}
    layout["meta"] = {"x": x, "y": y, "colour": colour, "front": [p["index"] for p in on]}
    if not points:
        empty_note(layout, "no complete trials yet")
    return {"data": traces, "layout": layout}


def hypervolume_figure(front: Mapping[str, Any]) -> dict[str, Any]:
    """The hypervolume of the front against trials finished: a step at each trial that
    raised it, carried on to the last finished trial."""
    history = front["history"]
    steps = history["steps"]
    xs = [s["trials"] for s in steps]
    ys = [s["hypervolume"] for s in steps]
    if steps and history["trials"] > xs[-1]:
        xs, ys = [*xs, history["trials"]], [*ys, ys[-1]]
    colour = STATE_COLOURS["complete"]
    traces = [
        {"type": "scatter", "mode": "lines", "name": "hypervolume", "x": xs, "y": ys,
         "line": {"shape": "hv", "color": colour, "width": 2}, "hoverinfo": "skip"},
        {"type": "scatter", "mode": "markers", "name": "raised by",
         "x": xs[: len(steps)], "y": ys[: len(steps)], "customdata": [s["index"] for s in steps],
         "marker": {"size": 6, "color": colour},
         "hovertemplate": "hypervolume %{y:.4g} after trial #%{customdata}<br>trials finished "
                          "%{x:,d}<extra></extra>"},
    ]  # fmt: skip
    layout = base_layout(
        "Hypervolume vs trials finished",
        "trials finished",
        "hypervolume",
        showlegend=False,
        xaxis={"rangemode": "tozero", "tickformat": ",d"},
    )
    reference = front["reference"]
    if reference is not None:
        ref = ", ".join(f"{v:.4g}" for v in reference)
        text = f"{front['hypervolume']:.4g} now; reference point ({ref})"
        layout["title"]["subtitle"] = {"text": text, "font": {"size": 12, "color": "#616e7c"}}
        layout["margin"] = {**layout["margin"], "t": 64}
    layout["meta"] = {"hypervolume": front["hypervolume"], "trials": history["trials"]}
    if not steps:
        empty_note(layout, "no feasible complete trial yet")
    return {"data": traces, "layout": layout}


def front_figures(
    front: Mapping[str, Any], x: int, y: int, colour: int | None
) -> dict[str, dict[str, Any]]:
    """``{"pareto", "hypervolume"}``: `pareto_figure` and `hypervolume_figure`."""
    return {"pareto": pareto_figure(front, x, y, colour), "hypervolume": hypervolume_figure(front)}
