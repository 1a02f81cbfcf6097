"""Parallel coordinates (parameters → objective) as a Plotly figure, and where values sit.

Drawn as line traces across normalised axes rather than with plotly's ``parcoords``
trace: with software WebGL, as in headless Chromium, ``parcoords`` takes 3-5 s to draw
5,000 trials, over the two-second budget of the sweep page, while 5,000 polylines in a
few SVG paths take ~0.2 s.

Where a trial's line runs (`positions`, from `normalise`) is computed here only: for the
figure, and for each trial finishing after it (`placements`, which a sweep page's poll
brings). The axes the positions were computed on travel with them as a digest
(`axes_digest`, also in the figure's ``layout.meta.axes``), so a page that holds older axes
knows to ask for the figure again. The page only appends the lines it is sent to the band
traces it holds.

Colour says how good a trial is, and must survive a skewed sweep: trials that collapse to
chance (0.10-0.31) beside a crowd at 0.87-0.98 put every good trial in one band of equal
widths. So the bands are quantiles of the objectives shown (`band_edges`: each holds about
an eighth of the lines) and their colours run along Viridis from its dark end, the best
band, to its light green, the worst (`band_colours`); the best band is drawn last, on top,
opaque and a little wider. A page that has placed many new trials itself, or one outside
the objective axis, asks for the figure again rather than recomputing bands.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from plotly.colors import sample_colorscale

from core.analysis.layout import base_layout, plotly_text
from core.spec.values import value_text
from dashboard.data import complete_rows
from dashboard.figures import empty_note
from dashboard.param_axes import Prepared, scatter_x
from dashboard.table import digest

#: How many objective bands colour the lines (fewer when objectives tie).
BANDS = 8
#: Where the bands sit on Viridis: the best at its dark end, the worst at its light green
#: (its last tenth, yellow, is too pale on white).
DARKEST, LIGHTEST = 0.0, 0.85
#: Pixels between a tick label and its axis line (twice the invisible marker's radius).
TICK_GAP = 12

def normalise(value: Any, dim: Mapping[str, Any]) -> float | None:
    """Where `value` sits on a parallel axis, from 0 (bottom) to 1 (top); None if unknown."""
    if dim["kind"] == "category":
        text = value_text(value)
        cats = dim["categories"]
        if text not in cats:
            return None
        return cats.index(text) / (len(cats) - 1) if len(cats) > 1 else 0.5
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    low, high = dim["low"], dim["high"]
    if dim["kind"] == "log":
        if value <= 0:
            return None
        value, low, high = math.log10(value), math.log10(low), math.log10(high)
    if high == low:
        return 0.5
    return min(max((value - low) / (high - low), 0.0), 1.0)


def positions(row: Mapping[str, Any], dims: Sequence[Mapping[str, Any]]) -> list[float | None]:
    """Where a trial's line meets each axis of `dims` (its parameters', then its objective's):
    `normalise`d, to 4 decimals; None where the value is not on the axis."""
    values = [row["params"].get(d["path"]) for d in dims[:-1]] + [row["objective"]]
    ys = [normalise(value, dim) for value, dim in zip(values, dims, strict=True)]
    return [None if y is None else round(y, 4) for y in ys]


def axes_digest(dims: Sequence[Mapping[str, Any]]) -> str:
    """A digest of the axes `positions` places lines on: equal axes, equal digests, in
    whichever server process."""
    return digest(list(dims))


def placements(
    prep: Prepared, dims: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """How a sweep page extends its figures with the complete trials among `rows` (those
    changed after its cursor), on the axes of the table's snapshot `prep` (`dims`: its
    `param_axes.parallel_dims`).

    ``axes``: the digest of the parallel axes (`axes_digest`). ``rows``: for each trial,
    its ``index``, ``objective`` and ``finished_at``, where its parallel line runs (``ys``,
    `positions`) and where it goes on the scatter for each parameter (``x``,
    `param_axes.scatter_x`).
    """
    return {
        "axes": axes_digest(dims),
        "rows": [
            {"index": row["index"], "objective": row["objective"],
             "finished_at": row["finished_at"], "ys": positions(row, dims),
             "x": scatter_x(prep, row)}
            for row in complete_rows(rows)
        ],
    }


def _ticks(dim: Mapping[str, Any]) -> list[tuple[float, str]]:
    """(position, label) pairs for a parallel axis: its categories or distinct values when
    few, else ~5 round numbers (powers of ten on a log axis)."""
    if dim["kind"] == "category":
        cats = dim["categories"]
        step = max(1, math.ceil(len(cats) / 12))
        return [(_category_height(i, len(cats)), c) for i, c in enumerate(cats) if i % step == 0]
    low, high = dim["low"], dim["high"]
    if dim.get("values"):
        values = list(dim["values"])
    elif dim["kind"] == "log":
        decades = range(math.floor(math.log10(low)), math.floor(math.log10(high)) + 1)
        steps = (1, 2, 5) if len(decades) <= 3 else (1,)
        values = [m * 10.0**e for e in decades for m in steps if low <= m * 10.0**e <= high]
        values = values or [low, high]
    elif high == low:
        values = [low]
    else:
        raw = (high - low) / 5
        magnitude = 10 ** math.floor(math.log10(raw))
        step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
        first = math.ceil(low / step) * step
        values = [first + i * step for i in range(int((high - first) / step + 1e-9) + 1)]
    return [(normalise(v, dim) or 0.0, _number(v)) for v in values]


def _number(value: float) -> str:
    """A tick label: whole numbers in full (1024, not 1.02e+03), others to 3 digits."""
    if float(value).is_integer() and abs(value) < 1e7:
        return str(int(value))
    return f"{value:.3g}"


def _category_height(position: int, count: int) -> float:
    """The height of the `position`-th of `count` categories on a parallel axis."""
    return position / (count - 1) if count > 1 else 0.5


def _alpha(rgb: str, alpha: float) -> str:
    """``rgb(r, g, b)`` as ``rgba(r, g, b, alpha)``: a translucent stroke, cheaper to paint
    than a translucent trace (which the browser composites as a layer of its own)."""
    return rgb.replace("rgb(", "rgba(").replace(")", f", {alpha})")


def band_edges(objectives: Sequence[float], bands: int = BANDS) -> list[float]:
    """Edges of the objective bands: quantiles of `objectives`, so each band holds about as
    many lines; edges that coincide (tied objectives) are merged. At least two edges (one
    band), from the lowest objective to the highest; ``[0, 0]`` without objectives."""
    if not len(objectives):
        return [0.0, 0.0]
    edges = np.quantile(np.asarray(objectives, dtype=float), np.linspace(0, 1, bands + 1))
    out: list[float] = []
    for edge in edges.tolist():
        if not out or edge > out[-1]:
            out.append(edge)
    return out if len(out) > 1 else [out[0], out[0]]


def band_of(objective: float, edges: Sequence[float]) -> int:
    """Which band of `band_edges` a value falls in (a value on an edge: the band above it;
    outside them: the nearest band)."""
    count = len(edges) - 1
    return min(count - 1, max(0, bisect.bisect_right(edges, objective) - 1))


def band_colours(count: int, maximize: bool) -> list[str]:
    """One Viridis colour per band, lowest objective first: the best band darkest."""
    if count == 1:
        return sample_colorscale("Viridis", [DARKEST])
    stops = [DARKEST + (LIGHTEST - DARKEST) * b / (count - 1) for b in range(count)]
    return sample_colorscale("Viridis", stops[::-1] if maximize else stops)


def _snake(trace: dict[str, Any], ys: Sequence[float | None], index: int) -> None:
    """Append a trial's polyline to a band trace, continuing the trace's one unbroken path.

    Each trial has a vertex on every axis, and the trace goes there and back: a trial
    runs left to right if the trace's path ends on the first axis (or is empty), else
    right to left. So consecutive trials join with a vertical stroke along the first or
    last axis, hidden by the axis line, and plotly draws one SVG path per band. Lines
    broken by gaps would make one path element per trial: 5,000 of them take ~4x longer.
    """
    xs = list(range(len(ys)))
    if trace["x"] and trace["x"][-1] != 0:
        xs.reverse()
    for x in xs:
        trace["x"].append(x)
        trace["y"].append(ys[x])
        trace["customdata"].append(index)


def _band_traces(edges: Sequence[float], maximize: bool) -> list[dict[str, Any]]:
    """Empty line traces, one per band, lowest objective first; the better a band, the
    darker, the more opaque and (the best) the wider its lines."""
    count = len(edges) - 1
    colours = band_colours(count, maximize)
    traces = []
    for band in range(count):
        worse = count - 1 - band if maximize else band  # 0: the best band
        alpha = 0.9 - 0.55 * worse / max(count - 1, 1)
        traces.append({
            "type": "scatter", "mode": "lines", "x": [], "y": [], "customdata": [],
            "name": f"{edges[band]:.4g} to {edges[band + 1]:.4g}",
            "line": {"color": _alpha(colours[band], round(alpha, 2)),
                     "width": 1.8 if worse == 0 else 1, "simplify": False},
            "hovertemplate": "trial #%{customdata}<extra></extra>",
            "legendgroup": "bands",
        })
    return traces


def parallel_figure(prows: Mapping[str, Any], metric: str, direction: str) -> dict[str, Any]:
    """Parallel coordinates: one line per trial across its parameters to its objective.

    The first traces (``meta.bands.count`` of them) hold the lines, one per objective band
    (`band_edges`, coloured by `band_colours`), worst first so the best is drawn on top,
    each one path (`_snake`); the band legend hides or isolates bands and a click on a
    line opens its trial. Then come the axes, their ticks and their names, as plain
    traces (text traces draw far faster than annotations).
    """
    dims = [dict(d) for d in prows["dims"]]
    dims[-1]["label"] = metric
    maximize = direction == "maximize"
    edges = band_edges([r["objective"] for r in prows["kept"]])
    bands = _band_traces(edges, maximize)
    for row in prows["kept"]:
        _snake(bands[band_of(row["objective"], edges)], positions(row, dims), row["index"])
    # Worst band first, so the best lines are drawn over the rest.
    order = list(range(len(bands))) if maximize else list(range(len(bands)))[::-1]
    axes: dict[str, list[Any]] = {"x": [], "y": []}
    ticks: dict[str, list[Any]] = {"x": [], "y": [], "text": []}
    for x, dim in enumerate(dims):
        axes["x"] += [x, x, None]
        axes["y"] += [0, 1, None]
        for y, text in _ticks(dim):
            ticks["x"].append(x)
            ticks["y"].append(round(y, 4))
            ticks["text"].append(plotly_text(text))
    helpers = [
        {"type": "scatter", "mode": "lines", **axes, "line": {"color": "#52606d", "width": 1.5},
         "hoverinfo": "skip", "showlegend": False, "name": "axes"},
        # Invisible markers as wide as the gap wanted: plotly sets text beside a point's
        # marker, so each label ends a few pixels left of its axis line, not on it. Lines
        # meeting at a tick pass under its label's white outline (`dashboard.css`: an SVG
        # stroke painted under the text; CSS text-shadow does not draw on SVG in Chromium).
        {"type": "scatter", "mode": "markers+text", **ticks, "textposition": "middle left",
         "marker": {"size": TICK_GAP, "opacity": 0}, "cliponaxis": False,
         "textfont": {"size": 11, "color": "#1f2933"}, "hoverinfo": "skip",
         "showlegend": False, "name": "ticks"},
        {"type": "scatter", "mode": "text", "x": list(range(len(dims))),
         # Bold by the font's weight, not <b>: plotly.js draws <b> as a style attribute,
         # which the CSP refuses (`web.headers`).
         "y": [1.07] * len(dims), "text": [plotly_text(d["label"]) for d in dims],
         "textposition": "middle center", "textfont": {"size": 13, "weight": "bold"},
         "hoverinfo": "skip",
         "showlegend": False, "name": "names"},
    ]
    layout = base_layout(
        f"Parameters → {metric}", "", "",
        xaxis={"range": [-0.5, len(dims) - 0.85], "visible": False, "fixedrange": True},
        yaxis={"range": [-0.03, 1.12], "visible": False, "fixedrange": True},
        legend={"title": {"text": f"{metric} (quantile bands)"}, "traceorder": "reversed"},
        margin={"l": 30, "r": 20, "t": 48, "b": 20},
    )
    layout["meta"] = {
        "dims": dims,
        "axes": axes_digest(prows["dims"]),
        "bands": {"count": len(bands), "edges": edges, "low": dims[-1]["low"],
                  "high": dims[-1]["high"], "order": order},
        "kept": [[r["index"], r["objective"], r["finished_at"]] for r in prows["kept"]],
        "mode": prows["mode"],
        "cap": prows["cap"],
        "total": prows["total"],
    }
    if not prows["kept"]:
        empty_note(layout, "no complete trials yet")
    return {"data": [bands[b] for b in order] + helpers, "layout": layout}
