"""Training time against depth and against model size: a point per trial and a fitted line.

The seed paper reads off its second figure that training time grows about linearly with
depth. One mean per depth hides that on a loaded machine (a depth 3 at 9 s above a depth
4 at 5 s, each the mean of a few noisy trials), so these figures draw every complete
trial's training time as a point, and a least-squares line through all of them
(`numpy.linalg.lstsq`) with its slope (seconds per layer; seconds per thousand or
million parameters) and R² in the legend and subtitle: the claim, and how well it holds,
can be read off. Failed and pruned trials are left out: their time runs to a failure or
a stop, not to the end of training.

In two steps, as elsewhere: `timing_rows` computes the points and fits from the
dashboard's trial rows (`data.trial_row`), `timing_figures` draws them. The fit uses
every trial; at most `POINTS_CAP` points are drawn (spread evenly by index), which the
subtitle says: at 50,000 trials, a point per trial would be more SVG than the page can
draw in its budget.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from core.analysis.layout import base_layout
from dashboard.data import COMPLETE
from dashboard.figures import depth_colours, empty_note

#: Points drawn per figure at most (the fit uses them all). Each is an SVG element: at
#: 50,000 trials, 2,000 points per figure added ~1.2 s to the sweep page's drawing on the
#: loaded 2-core test machine, 300 add ~0.25 s (`bench.bench_dashboard --verbose`).
POINTS_CAP = 300
#: How far (in layers) depth points spread sideways, so trials of one depth do not stack.
JITTER = 0.36
_GOLDEN = (math.sqrt(5) - 1) / 2
_FIT_COLOUR = "#1f2933"
_GREY = "#616e7c"


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> dict[str, Any] | None:
    """Least squares ``y = intercept + slope * x``: ``slope``, ``intercept``, ``r2`` (None
    when every y is the same) and ``n``; None with fewer than two distinct x."""
    if len(xs) < 2 or len(set(xs)) < 2:
        return None
    x = np.asarray(xs, dtype=float)
    y = np.asarray(ys, dtype=float)
    design = np.column_stack([x, np.ones_like(x)])
    (slope, intercept), *_ = np.linalg.lstsq(design, y, rcond=None)
    residual = float(np.sum((y - (intercept + slope * x)) ** 2))
    total = float(np.sum((y - y.mean()) ** 2))
    r2 = None if total == 0 else 1 - residual / total
    return {"slope": float(slope), "intercept": float(intercept), "r2": r2, "n": len(xs)}


def _points(rows: Iterable[Mapping[str, Any]], field: str) -> dict[str, Any]:
    """The complete trials that have a training time and a `field`, by index: their
    ``x`` (`field`), ``y`` (seconds), ``index`` and ``layers``, and the line through them."""
    kept = sorted(
        (r for r in rows if r["state"] == COMPLETE and r["train_seconds"] is not None
         and r.get(field) is not None),
        key=lambda r: r["index"],
    )
    xs = [r[field] for r in kept]
    ys = [r["train_seconds"] for r in kept]
    return {"x": xs, "y": ys, "index": [r["index"] for r in kept],
            "layers": [r["layers"] for r in kept], "fit": fit_line(xs, ys)}


def timing_rows(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``{"depth": points, "params": points, "complete": n}``: training time against
    ``layers`` and against ``param_count`` (`_points`), and how many trials are complete
    with a training time (so an empty size figure can say the counts are missing)."""
    rows = list(rows)
    complete = sum(1 for r in rows if r["state"] == COMPLETE and r["train_seconds"] is not None)
    return {"depth": _points(rows, "layers"), "params": _points(rows, "param_count"),
            "complete": complete}


def _shown(points: Mapping[str, Any]) -> list[int]:
    """Positions of the points drawn: all, or `POINTS_CAP` of them evenly spread by index."""
    n = len(points["x"])
    if n <= POINTS_CAP:
        return list(range(n))
    return [i * n // POINTS_CAP for i in range(POINTS_CAP)]


def _jitter(index: int) -> float:
    """A fixed sideways offset per trial, spread evenly (golden-ratio steps)."""
    return round(((index * _GOLDEN) % 1 - 0.5) * JITTER, 3)


def _per(size: float) -> tuple[float, str]:
    """(multiplier, words) for a slope per parameter: per thousand or per million."""
    return (1e6, "million parameters") if size >= 1e6 else (1e3, "thousand parameters")


def _fit_text(fit: Mapping[str, Any] | None, unit: str, per: float = 1) -> str:
    if fit is None:
        return "no fit (needs two sizes)"
    r2 = "n/a" if fit["r2"] is None else f"{fit['r2']:.2f}"
    return f"{fit['slope'] * per:+.3g} s per {unit}, R² {r2}"


def _figure(points: Mapping[str, Any], title: str, x_title: str, unit: str, per: float,
            x: list[float], hover: str, empty: str) -> dict[str, Any]:
    shown = _shown(points)
    n = len(points["x"])
    # Colours of every depth, as the width figure picks them (`figures.depth_colours`).
    colours = depth_colours(sorted({d for d in points["layers"] if d is not None}) or [1])
    trace = {
        "type": "scatter", "mode": "markers", "name": f"trials ({n:,})",
        "x": [x[i] for i in shown], "y": [round(points["y"][i], 4) for i in shown],
        "customdata": [[points["index"][i], points["x"][i]] for i in shown],
        "marker": {"size": 6, "opacity": 0.7, "line": {"width": 0},
                   "color": [colours.get(points["layers"][i], _GREY) for i in shown]},
        "hovertemplate": f"trial #%{{customdata[0]}}<br>{hover}<br>%{{y:.3g}} s"
                         "<extra></extra>",
    }
    fit = points["fit"]
    data = [trace]
    if fit is not None:
        ends = [min(points["x"]), max(points["x"])]
        data.append({
            "type": "scatter", "mode": "lines", "name": "fit: " + _fit_text(fit, unit, per),
            "x": ends, "y": [round(fit["intercept"] + fit["slope"] * e, 4) for e in ends],
            "line": {"color": _FIT_COLOUR, "width": 2, "dash": "dash"}, "hoverinfo": "skip",
        })
    layout = base_layout(title, x_title, "training time per trial (s)",
                         legend={"x": 0.01, "y": 0.99, "bgcolor": "rgba(255,255,255,0.8)"},
                         margin={"t": 64})
    sampled = f", {len(shown):,} drawn" if len(shown) < n else ""
    layout["title"]["subtitle"] = {
        "text": f"a point per complete trial ({n:,}{sampled}); least squares: "
                + _fit_text(fit, unit, per),
        "font": {"size": 12, "color": _GREY},
    }
    layout["meta"] = {"fit": fit, "n": n, "shown": len(shown), "per": per, "unit": unit}
    if not n:
        empty_note(layout, empty)
    return {"data": data, "layout": layout}


def depth_figure(points: Mapping[str, Any], complete: int = 0) -> dict[str, Any]:
    """Training time against the number of layers, points spread a little sideways
    (`complete`: the trials with a training time, to say why an empty figure is empty)."""
    x = [layers + _jitter(index) for layers, index in zip(points["x"], points["index"],
                                                          strict=True)]
    empty = "no trial has a depth (model.hidden_layers)" if complete else "no complete trials yet"
    figure = _figure(points, "Training time vs number of layers", "hidden layers", "layer",
                     1, x, "%{customdata[1]} layers", empty)
    depths = sorted(set(points["x"]))
    figure["layout"]["xaxis"].update(tickvals=depths, type="linear")
    return figure


def params_figure(points: Mapping[str, Any], complete: int) -> dict[str, Any]:
    """Training time against the model's parameter count, coloured by depth."""
    per, words = _per(max(points["x"], default=0))
    empty = ("no parameter counts recorded" if complete else "no complete trials yet")
    figure = _figure(points, "Training time vs parameter count", "parameters", words, per,
                     list(points["x"]), "%{customdata[1]:,} parameters", empty)
    figure["layout"]["xaxis"].update(type="linear", rangemode="tozero")
    return figure


def timing_figures(timing: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{"depth": figure, "params": figure}`` from `timing_rows`."""
    return {"depth": depth_figure(timing["depth"], timing["complete"]),
            "params": params_figure(timing["params"], timing["complete"])}
