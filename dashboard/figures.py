"""Rows → Plotly figures: plain ``{"data": [...], "layout": {...}}`` dictionaries.

plotly.js draws them in the browser (`static/sweep.js` and friends); nothing here reads
the store. Colours are fixed per trial state (`STATE_COLOURS`, also used by the pages'
CSS) and per depth (`depth_colours`), so a colour means the same thing on every figure.
The objective scatter uses WebGL (``scattergl``; its drawing code comes compiled ahead,
`static/regl_shim.js`, as the CSP runs no ``eval``); the parallel coordinates are in
`dashboard.parcoords`, the best-so-far charts in `dashboard.history` and training time
against depth and size in `dashboard.timing`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from plotly.colors import sample_colorscale

from core.analysis.layout import base_layout, plotly_text

STATE_COLOURS: dict[str, str] = {
    "queued": "#9aa5b1",
    "running": "#2f80ed",
    "complete": "#27ae60",
    "failed": "#e03e3e",
    "pruned": "#f2994a",
    "cancelled": "#8e6bbf",
}
#: Curves of different trials: a qualitative palette (plotly's D3), by trial index.
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)


def empty_note(layout: dict[str, Any], text: str) -> dict[str, Any]:
    """Say in the middle of an empty figure why it is empty."""
    layout["annotations"] = [{"text": text, "showarrow": False, "xref": "paper",
                              "yref": "paper", "x": 0.5, "y": 0.5,
                              "font": {"size": 14, "color": "#7b8794"}}]
    return layout


def _round(value: float | None, digits: int = 6) -> float | None:
    if value is None:
        return None
    return float(f"{value:.{digits}g}")


def depth_colours(depths: Sequence[int]) -> dict[int, str]:
    """One colour per depth along Viridis (its dark-to-green part, readable on white)."""
    ordered = sorted(set(depths))
    if len(ordered) == 1:
        return {ordered[0]: sample_colorscale("Viridis", [0.35])[0]}
    stops = [0.85 * i / (len(ordered) - 1) for i in range(len(ordered))]
    return dict(zip(ordered, sample_colorscale("Viridis", stops), strict=True))


def _layers_name(layers: int) -> str:
    return f"{layers} layer" if layers == 1 else f"{layers} layers"


# -- sweep figures ---------------------------------------------------------------------


def width_figure(rows: Sequence[Mapping[str, Any]], metric: str) -> dict[str, Any]:
    """Objective against hidden units, one line per depth, bars for the spread over seeds."""
    colours = depth_colours([r["layers"] for r in rows] or [1])
    depths = sorted(colours)
    traces = []
    for i, layers in enumerate(depths):
        cell = [r for r in rows if r["layers"] == layers]
        # Depths share widths: nudge each a little sideways so their bars do not overlap.
        nudge = 1.0 + 0.025 * (i - (len(depths) - 1) / 2)
        traces.append({
            "type": "scatter",
            "mode": "lines+markers",
            "name": _layers_name(layers),
            "x": [r["units"] * nudge for r in cell],
            "y": [r["mean"] for r in cell],
            "error_y": {
                "type": "data",
                "symmetric": False,
                "array": [r["high"] - r["mean"] for r in cell],
                "arrayminus": [r["mean"] - r["low"] for r in cell],
                "thickness": 1.2,
                "width": 3,
                "color": colours[layers],
            },
            "line": {"color": colours[layers], "width": 2},
            "marker": {"color": colours[layers], "size": 7},
            "customdata": [
                [r["units"], r["n"], plotly_text(", ".join(
                    f"{k.split('.', 1)[1]}={v}" for k, v in r["setting"].items()) or "-")]
                for r in cell
            ],
            "hovertemplate": (
                f"{_layers_name(layers)}, %{{customdata[0]}} units<br>"
                "mean %{y:.4g} over %{customdata[1]} seeds<br>"
                "setting: %{customdata[2]}<extra></extra>"
            ),
        })
    units = sorted({r["units"] for r in rows})
    xaxis: dict[str, Any] = {"type": "log" if units and units[0] > 0 else "linear"}
    if 0 < len(units) <= 12:
        xaxis.update(tickvals=units, ticktext=[f"{u:g}" for u in units])
    layout = base_layout(
        f"{metric} vs hidden units, one line per depth",
        "hidden units per layer",
        metric,
        xaxis=xaxis,
        legend={"title": {"text": "depth"}},
        margin={"t": 64},
    )
    layout["title"]["subtitle"] = {
        "text": "best setting of the other parameters: mean over seeds, bars min to max",
        "font": {"size": 12, "color": "#616e7c"},
    }
    if not rows:
        empty_note(layout, "no complete trials yet")
    return {"data": traces, "layout": layout}


def marker_style(n: int) -> tuple[int, float]:
    """Smaller, fainter markers as points get many, so dense regions still show."""
    if n <= 2000:
        return 6, 0.8
    if n <= 20000:
        return 4, 0.5
    return 3, 0.35


def scatter_figure(points: Mapping[str, Any], metric: str) -> dict[str, Any]:
    """Objective against a chosen parameter for every complete trial (WebGL)."""
    param = points["param"]
    axis = points["axis"]
    size, opacity = marker_style(len(points["y"]))
    xaxis: dict[str, Any] = {"type": axis["kind"]}
    if axis.get("values"):
        xaxis.update(tickvals=axis["values"], ticktext=[f"{v:g}" for v in axis["values"]])
    if axis["kind"] == "category":
        # The points sit at their values as text; their labels are drawn literally.
        cats = axis["categories"]
        xaxis.update(categoryorder="array", categoryarray=cats, tickvals=cats,
                     ticktext=[plotly_text(c) for c in cats])  # fmt: skip
    label = param.split(".", 1)[1] if "." in param else param
    layout = base_layout(f"{metric} vs {label} ({len(points['y']):,} complete trials)",
                     param, metric, xaxis=xaxis, showlegend=False)
    layout["meta"] = {"param": param, "axis": axis}
    trace = {
        "type": "scattergl",
        "mode": "markers",
        "x": points["x"],
        "y": [_round(v) for v in points["y"]],
        "customdata": points["index"],
        "marker": {"color": STATE_COLOURS["complete"], "size": size, "opacity": opacity},
        "hovertemplate": f"{label} %{{x}}<br>{metric} %{{y:.4g}}<br>trial #%{{customdata}}"
                         "<extra></extra>",
        "name": "complete",
    }
    if not points["y"]:
        empty_note(layout, "no complete trials yet")
    return {"data": [trace], "layout": layout}


def curve_trace(row: Mapping[str, Any], epochs: Sequence[int], values: Sequence[float],
                metric: str) -> dict[str, Any]:
    """One trial's learning curve, coloured by its index (stable as ranks change); a
    pruned trial's is grey and dashed, and ends in a cross at the epoch it stopped."""
    if row.get("state") == "pruned":
        return _pruned_trace(row, epochs, values, metric)
    objective = row.get("objective")
    name = f"#{row['index']}" + (f" ({objective:.4g})" if objective is not None else "")
    colour = PALETTE[row["index"] % len(PALETTE)]
    return {
        "type": "scatter", "mode": "lines", "name": name, "x": list(epochs),
        "y": [_round(v) for v in values], "line": {"color": colour, "width": 1.8},
        "meta": {"index": row["index"], "group": "top"},
        "hovertemplate": f"trial #{row['index']}<br>epoch %{{x}}: {metric} %{{y:.4g}}"
                         "<extra></extra>",
    }


def _pruned_trace(row: Mapping[str, Any], epochs: Sequence[int], values: Sequence[float],
                  metric: str) -> dict[str, Any]:
    stop = row.get("pruned_epoch") or (epochs[-1] if epochs else None)
    n = len(epochs)
    colour = STATE_COLOURS["pruned"]
    return {
        "type": "scatter", "mode": "lines+markers", "name": f"#{row['index']} pruned @{stop}",
        "x": list(epochs), "y": [_round(v) for v in values],
        "line": {"color": "#9aa5b1", "width": 1.4, "dash": "dash"},
        "marker": {"size": [0] * (n - 1) + [11] if n else [], "symbol": "x-thin",
                   "color": colour, "line": {"color": colour, "width": 2.5}},
        "legendgroup": "pruned", "opacity": 0.85,
        "meta": {"index": row["index"], "group": "pruned", "stop": stop},
        "hovertemplate": f"trial #{row['index']} (pruned at epoch {stop})<br>epoch %{{x}}: "
                         f"{metric} %{{y:.4g}}<extra></extra>",
    }


def curves_figure(traces: Sequence[Mapping[str, Any]], metric: str, k: int,
                  pruned: int = 0, step: str = "epoch") -> dict[str, Any]:
    """Learning curves (per-epoch objective metric) of the top `k` trials, and of the
    `pruned` most recently pruned ones when the sweep prunes (`curve_trace`); `step` names
    the x axis (`core.spec.kind.TrialKind.step`: a Caffe net reports per evaluation)."""
    epochs = max((x for t in traces for x in t["x"]), default=0)
    title = f"Learning curves of the top {k} trials"
    if pruned:
        title += f" and the last {pruned} pruned"
    layout = base_layout(title, step, metric,
                     legend={"title": {"text": "trial (objective)"}},
                     xaxis={"tick0": 0, "dtick": max(1, math.ceil(epochs / 10))})
    if not traces:
        empty_note(layout, f"no per-{step} metrics yet")
    return {"data": list(traces), "layout": layout}


# -- trial figures ---------------------------------------------------------------------


def _epoch_axis(total: int | None) -> dict[str, Any]:
    """An epoch axis spanning the whole planned run, so a running trial's curves grow into it."""
    if not total:
        return {"rangemode": "tozero", "tickformat": "d"}
    return {"range": [0.5, total + 0.5], "dtick": max(1, math.ceil(total / 10))}


def epoch_figures(series: Mapping[str, Any], total: int | None = None,
                  stopped: int | None = None, step: str = "epoch") -> dict[str, dict[str, Any]]:
    """A trial's per-epoch curves: losses, other validation metrics, seconds per epoch.

    `total` is the planned number of epochs (``training.epochs``), for the epoch axis;
    `stopped` the epoch a pruned trial stopped at, marked by a dashed line on each; `step`
    what a row is (`core.spec.kind.TrialKind.step`: a Caffe net's ``evaluation``).
    """
    epochs = series["epochs"]
    groups = {"loss": series["losses"], "metrics": series["metrics"]}
    titles = {"loss": (f"Loss per {step}", "loss"), "metrics": (f"Metrics per {step}", "value")}
    out: dict[str, dict[str, Any]] = {}
    for key, names in groups.items():
        traces = [
            {"type": "scatter", "mode": "lines+markers", "name": name, "x": list(epochs),
             "y": list(series["values"][name]), "marker": {"size": 5},
             "line": {"color": PALETTE[i % len(PALETTE)], "width": 2}}
            for i, name in enumerate(names)
        ]
        layout = base_layout(titles[key][0], step, titles[key][1], xaxis=_epoch_axis(total),
                         showlegend=True)
        if not epochs:
            empty_note(layout, f"no {step}s reported yet")
        out[key] = {"data": traces, "layout": layout}
    out["seconds"] = _seconds_figure(series, total, step)
    if stopped is not None:
        for fig in out.values():
            _mark_stop(fig["layout"], stopped)
    return out


def _mark_stop(layout: dict[str, Any], epoch: int) -> None:
    """A dashed line at the epoch a pruned trial stopped, labelled."""
    colour = STATE_COLOURS["pruned"]
    layout["shapes"] = [{"type": "line", "xref": "x", "yref": "paper", "x0": epoch,
                         "x1": epoch, "y0": 0, "y1": 1,
                         "line": {"color": colour, "width": 2, "dash": "dash"}}]
    layout.setdefault("annotations", []).append(
        {"text": f"pruned at epoch {epoch}", "xref": "x", "yref": "paper", "x": epoch,
         "y": 1, "xanchor": "left", "yanchor": "top", "xshift": 4, "showarrow": False,
         "font": {"size": 11, "color": colour}})


def _seconds_figure(series: Mapping[str, Any], total: int | None, step: str = "epoch"
                    ) -> dict[str, Any]:
    """Seconds per epoch; a data-parallel trial's bars are split into computing,
    communicating (waiting for other ranks included) and the rest (evaluation)."""
    epochs, values = list(series["epochs"]), series["values"]
    seconds = list(values.get("epoch_seconds") or [])
    compute, comm = values.get("compute_seconds"), values.get("comm_seconds")
    split = bool(compute and comm and len(compute) == len(comm) == len(seconds))
    layout = base_layout(f"Time per {step}", step, "seconds", showlegend=split,
                         xaxis=_epoch_axis(total), margin={"t": 36, "b": 48})
    if not epochs:
        empty_note(layout, f"no {step}s reported yet")
    if not split:
        return {"data": [{"type": "bar", "name": "epoch_seconds", "x": epochs, "y": seconds,
                          "marker": {"color": STATE_COLOURS["running"]}}], "layout": layout}
    assert compute is not None and comm is not None
    rest = [
        None if None in (s, c, m) else max(0.0, s - c - m)
        for s, c, m in zip(seconds, compute, comm, strict=True)
    ]
    layout["barmode"] = "stack"
    parts = (("compute", compute, PALETTE[0]), ("communication", comm, PALETTE[1]),
             ("evaluation and other", rest, PALETTE[7]))
    return {
        "data": [{"type": "bar", "name": name, "x": epochs, "y": list(ys),
                  "marker": {"color": colour}} for name, ys, colour in parts],
        "layout": layout,
    }
