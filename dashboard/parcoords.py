"""Parallel coordinates (parameters → objective) as a Plotly figure, and where values sit.

Drawn as line traces across normalised axes rather than with plotly's ``parcoords``
trace: with software WebGL, as in headless Chromium, ``parcoords`` takes 3-5 s to draw
5,000 trials, over the two-second budget of the sweep page, while 5,000 polylines in a
few SVG paths take ~0.2 s. The normalisation is in the figure's ``layout.meta``, so a
page can place newly finished trials itself (`static/sweep.js` mirrors `normalise`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from plotly.colors import sample_colorscale

from dashboard.data import category_text
from dashboard.figures import base_layout, empty_note

#: How many objective bands colour the lines.
BANDS = 8
#: A white halo around text drawn over lines, so it stays readable.
HALO = "0 0 2px #fff, 0 0 3px #fff, 0 0 4px #fff"


def normalise(value: Any, dim: Mapping[str, Any]) -> float | None:
    """Where `value` sits on a parallel axis, from 0 (bottom) to 1 (top); None if unknown."""
    if dim["kind"] == "category":
        text = category_text(value)
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


def band_of(objective: float, low: float, high: float) -> int:
    """Which of the `BANDS` equal objective bands a value falls in (clamped)."""
    if high <= low:
        return BANDS - 1
    return min(BANDS - 1, max(0, int((objective - low) / (high - low) * BANDS)))


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
        y = ys[x]
        trace["x"].append(x)
        trace["y"].append(None if y is None else round(y, 4))
        trace["customdata"].append(index)


def parallel_figure(prows: Mapping[str, Any], metric: str, direction: str) -> dict[str, Any]:
    """Parallel coordinates: one line per trial across its parameters to its objective.

    The first `BANDS` traces hold the lines, one per objective band (coloured along
    Viridis, the best drawn last, on top), each one path (`_snake`); the band legend
    hides or isolates bands and a click on a line opens its trial. Then come the axes,
    their ticks and their names, as plain traces (text traces draw far faster than
    annotations).
    """
    dims = [dict(d) for d in prows["dims"]]
    dims[-1]["label"] = metric
    low, high = dims[-1]["low"], dims[-1]["high"]
    maximize = direction == "maximize"
    stops = [0.9 * b / (BANDS - 1) for b in range(BANDS)]
    colours = sample_colorscale("Viridis", stops if maximize else stops[::-1])
    bands = []
    for band in range(BANDS):
        a = low + (high - low) * band / BANDS
        b = low + (high - low) * (band + 1) / BANDS
        bands.append({
            "type": "scatter", "mode": "lines", "x": [], "y": [], "customdata": [],
            "name": f"{a:.4g} to {b:.4g}",
            "line": {"color": _alpha(colours[band], 0.6), "width": 1, "simplify": False},
            "hovertemplate": "trial #%{customdata}<extra></extra>",
            "legendgroup": "bands",
        })
    for row in prows["kept"]:
        values = [row["params"].get(d["path"]) for d in dims[:-1]] + [row["objective"]]
        ys = [normalise(value, dim) for value, dim in zip(values, dims, strict=True)]
        _snake(bands[band_of(row["objective"], low, high)], ys, row["index"])
    # Worst band first, so the best lines are drawn over the rest.
    order = list(range(BANDS)) if maximize else list(range(BANDS))[::-1]
    axes: dict[str, list[Any]] = {"x": [], "y": []}
    ticks: dict[str, list[Any]] = {"x": [], "y": [], "text": []}
    for x, dim in enumerate(dims):
        axes["x"] += [x, x, None]
        axes["y"] += [0, 1, None]
        for y, text in _ticks(dim):
            ticks["x"].append(x)
            ticks["y"].append(round(y, 4))
            ticks["text"].append(text)
    helpers = [
        {"type": "scatter", "mode": "lines", **axes, "line": {"color": "#52606d", "width": 1.5},
         "hoverinfo": "skip", "showlegend": False, "name": "axes"},
        {"type": "scatter", "mode": "text", **ticks, "textposition": "middle left",
         "textfont": {"size": 11, "color": "#1f2933", "shadow": HALO}, "hoverinfo": "skip",
         "showlegend": False, "name": "ticks"},
        {"type": "scatter", "mode": "text", "x": list(range(len(dims))),
         "y": [1.07] * len(dims), "text": [f"<b>{d['label']}</b>" for d in dims],
         "textposition": "middle center", "textfont": {"size": 13, "shadow": HALO},
         "hoverinfo": "skip",
         "showlegend": False, "name": "names"},
    ]
    layout = base_layout(
        f"Parameters → {metric}", "", "",
        xaxis={"range": [-0.5, len(dims) - 0.85], "visible": False, "fixedrange": True},
        yaxis={"range": [-0.03, 1.12], "visible": False, "fixedrange": True},
        legend={"title": {"text": metric}, "traceorder": "reversed" if maximize else "normal"},
        margin={"l": 30, "r": 20, "t": 48, "b": 20},
    )
    layout["meta"] = {
        "dims": dims,
        "bands": {"count": BANDS, "low": low, "high": high, "order": order},
        "kept": [[r["index"], r["objective"], r["finished_at"]] for r in prows["kept"]],
        "mode": prows["mode"],
        "cap": prows["cap"],
        "total": prows["total"],
    }
    if not prows["kept"]:
        empty_note(layout, "no complete trials yet")
    return {"data": [bands[b] for b in order] + helpers, "layout": layout}
