"""The analysis drawn: plain Plotly figure dictionaries (``{"data", "layout"}``).

Computed here from the analysis value (`core.analysis.report`), never from the trials, so
the dashboard's Analysis panel and the HTML report (`cli.report_files`) draw the
very same figures. Plain SVG traces only (no WebGL), so a report opens on any machine.
Every layout is the dashboard's (`core.analysis.layout.base_layout`) in the report's sizes.
Each figure comes as ``{"id", "group", "title", "figure"}``; groups are ``returns`` (one
per numeric parameter), ``laws`` (one per cost law), ``importance`` and ``front``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from core.analysis.costs import PREDICTORS, TARGETS
from core.analysis.layout import REPORT, base_layout, merged

BLUE, ORANGE, GREY, GREEN, RED = "#2f80ed", "#f2994a", "#b8c2cc", "#27ae60", "#e03e3e"


def _layout(title: str, x: str, y: str, title_size: int = 14, **extra: Any) -> dict[str, Any]:
    """`layout.base_layout` in the report's sizes (`layout.REPORT`), then `extra`."""
    report = base_layout(title, x, y, **REPORT)
    return merged(report, {"title": {**report["title"], "font": {"size": title_size}}, **extra})


def _objective_axis(scale: Mapping[str, Any]) -> dict[str, Any]:
    return {"tickformat": ".1%"} if scale.get("fraction") else {}


def returns_figure(entry: Mapping[str, Any], metric: str, scale: Mapping[str, Any]) -> dict:
    """The best configuration and the mean (± one standard deviation) at each value, and
    the plateau's start as a dashed line."""
    points = entry["curve"]
    x = [p["value"] for p in points]
    mean = [p["mean"] for p in points]
    std = [p["std"] for p in points]
    data = [
        {"type": "scatter", "mode": "lines", "x": x + x[::-1],
         "y": [m + s for m, s in zip(mean, std, strict=True)]
         + [m - s for m, s in zip(mean, std, strict=True)][::-1],
         "fill": "toself", "fillcolor": "rgba(47,128,237,0.12)", "line": {"width": 0},
         "name": "mean ± std", "hoverinfo": "skip"},
        {"type": "scatter", "mode": "lines+markers", "x": x, "y": mean, "name": "mean",
         "line": {"color": BLUE, "dash": "dot"}, "customdata": [p["n"] for p in points],
         "hovertemplate": "%{x}: mean %{y}<br>%{customdata} trials<extra></extra>"},
        {"type": "scatter", "mode": "lines+markers", "x": x, "y": [p["best"] for p in points],
         "name": "best configuration", "line": {"color": GREEN, "width": 2.5}},
    ]  # fmt: skip
    shapes = []
    if entry["status"] == "plateau":
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": entry["at"],
                       "x1": entry["at"], "y0": 0, "y1": 1,
                       "line": {"color": ORANGE, "dash": "dash", "width": 2}})  # fmt: skip
    title = f"{metric} against {entry['name']}: {entry['status']}"
    xaxis = {"type": "log"} if entry.get("log") else {}
    return {
        "data": data,
        "layout": _layout(
            title, entry["name"], metric, shapes=shapes, xaxis=xaxis, yaxis=_objective_axis(scale)
        ),
    }


def _fitted(law: Mapping[str, Any], xs: np.ndarray) -> np.ndarray:
    if law["chosen"] == "power":
        return law["power"]["coefficient"] * xs ** law["power"]["exponent"]
    return law["linear"]["intercept"] + law["linear"]["slope"] * xs


def law_figure(law: Mapping[str, Any]) -> dict:
    """The cost at each value (means, or trials) and the chosen fit."""
    what, unit = TARGETS[law["target"]]
    name, _ = PREDICTORS[law["against"]]
    points = law["points"]
    x = np.array([p[0] for p in points], dtype=float)
    xs = np.linspace(float(x.min()), float(x.max()), 60) if x.size else x
    kind = "means" if law["on_means"] else "trials"
    data = [
        {"type": "scatter", "mode": "markers", "x": x.tolist(), "y": [p[1] for p in points],
         "name": f"{what} ({kind})", "marker": {"color": BLUE, "size": 7 if law["on_means"]
                                                else 4, "opacity": 0.8}},
        {"type": "scatter", "mode": "lines", "x": xs.tolist(), "y": _fitted(law, xs).tolist(),
         "name": f"{law['chosen']} fit, R² {law['r2']:.2f}", "line": {"color": ORANGE}},
    ]  # fmt: skip
    return {"data": data, "layout": _layout(law["text"], name, f"{what} ({unit})",
                                            title_size=12)}  # fmt: skip


def importance_figure(section: Mapping[str, Any]) -> dict:
    """fANOVA and PED-ANOVA shares side by side, most important on top."""
    fanova = section.get("fanova") or {}
    ped = section.get("ped_anova") or {}
    order = sorted(set(fanova) | set(ped), key=lambda p: (fanova.get(p, 0), ped.get(p, 0)))
    names = [p.split(".", 1)[-1] for p in order]
    data = [
        {"type": "bar", "orientation": "h", "y": names, "x": [fanova.get(p, 0) for p in order],
         "name": "fANOVA", "marker": {"color": BLUE}},
        {"type": "bar", "orientation": "h", "y": names, "x": [ped.get(p, 0) for p in order],
         "name": "PED-ANOVA", "marker": {"color": ORANGE}},
    ]  # fmt: skip
    return {"data": data, "layout": _layout("Parameter importance (Optuna)", "share", "",
                                            barmode="group", xaxis={"tickformat": ".0%"},
                                            margin={"l": 120})}  # fmt: skip


def front_figure(front: Mapping[str, Any], which: str, metric: str,
                 scale: Mapping[str, Any]) -> dict:  # fmt: skip
    """Every trial (a sample of them) in grey, the front as a step line, the cheapest
    trial within the tolerance of the best as a star."""
    part = front[which]
    cost_name = "parameter count" if which == "param_count" else "train time (s)"
    on = part["trials"]
    data = [
        {"type": "scatter", "mode": "markers", "x": [c[0] for c in part["cloud"]],
         "y": [c[1] for c in part["cloud"]], "name": "trials",
         "marker": {"color": GREY, "size": 4, "opacity": 0.6}, "hoverinfo": "skip"},
        {"type": "scatter", "mode": "lines+markers", "line": {"shape": "hv", "color": GREEN},
         "x": [t["cost"] for t in on], "y": [t["objective"] for t in on], "name": "front",
         "text": [f"trial #{t['index']}" for t in on],
         "hovertemplate": "%{text}<br>%{x}: %{y}<extra></extra>"},
    ]  # fmt: skip
    pick = front.get("smallest" if which == "param_count" else "fastest")
    if pick is not None:
        data.append({"type": "scatter", "mode": "markers", "x": [pick["cost"]],
                     "y": [pick["objective"]], "name": "cheapest near the best",
                     "marker": {"symbol": "star", "size": 15, "color": RED}})  # fmt: skip
    xaxis = {"type": "log"} if which == "param_count" else {}
    return {"data": data, "layout": _layout(f"{metric} against {cost_name}: the front",
                                            cost_name, metric, xaxis=xaxis,
                                            yaxis=_objective_axis(scale))}  # fmt: skip


def searched_figure(front: Mapping[str, Any]) -> dict:
    """A multi-objective sweep's feasible complete trials (a sample) in grey on its first two
    objectives, the front in green (a third objective and on are in the hover text)."""
    names = [o["metric"] for o in front["objectives"]]
    on = front["trials"]
    data = [
        {"type": "scatter", "mode": "markers", "x": [c[1] for c in front["cloud"]],
         "y": [c[0] for c in front["cloud"]], "name": "trials",
         "marker": {"color": GREY, "size": 4, "opacity": 0.6}, "hoverinfo": "skip"},
        {"type": "scatter", "mode": "markers", "marker": {"color": GREEN, "size": 8},
         "x": [t["values"][1] for t in on], "y": [t["values"][0] for t in on], "name": "front",
         "text": [f"trial #{t['index']}<br>" + "<br>".join(
             f"{n}: {v:.4g}" for n, v in zip(names, t["values"], strict=True)) for t in on],
         "hovertemplate": "%{text}<extra></extra>"},
    ]  # fmt: skip
    xaxis = {"type": "log"} if names[1] in ("param_count", "macs") else {}
    return {"data": data, "layout": _layout(f"{names[0]} against {names[1]}: the front",
                                            names[1], names[0], xaxis=xaxis)}  # fmt: skip


def figures(analysis: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every figure of an analysis, in reading order."""
    metric = analysis["sweep"]["metric"]
    scale = analysis["scale"]
    out = []
    for entry in analysis.get("returns", []):
        out.append(
            {
                "id": f"returns-{entry['param']}",
                "group": "returns",
                "title": entry["name"],
                "figure": returns_figure(entry, metric, scale),
            }
        )
    for law in analysis.get("costs", {}).get("laws", []):
        out.append({"id": f"law-{law['target']}-{law['against']}", "group": "laws",
                    "title": f"{TARGETS[law['target']][0]} vs {law['against']}",
                    "figure": law_figure(law)})  # fmt: skip
    importance = analysis.get("importance") or {}
    if importance.get("available"):
        out.append({"id": "importance", "group": "importance", "title": "importance",
                    "figure": importance_figure(importance)})  # fmt: skip
    front = analysis.get("front") or {}
    if front.get("searched") and front["searched"]["size"]:
        out.append({"id": "front-searched", "group": "front", "title": "objectives searched",
                    "figure": searched_figure(front["searched"])})  # fmt: skip
    for which, title in (("param_count", "parameter count"), ("train_seconds", "train time")):
        if front.get(which):
            out.append(
                {
                    "id": f"front-{which}",
                    "group": "front",
                    "title": title,
                    "figure": front_figure(front, which, metric, scale),
                }
            )
    return out
