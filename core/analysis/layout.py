"""The one Plotly layout every figure of Sweepstack starts from, as a plain dictionary.

The dashboard's figures (`dashboard.figures` and its neighbours) and the analysis's
(`core.analysis.figures`: the dashboard's Analysis panel and the HTML report of
``sweepstack report``) all start from `base_layout`, so a figure looks the same wherever it
is drawn. It lives here, in the lowest floor that both the analysis and the dashboard may
import (core may not import the dashboard), and it imports no Plotly: a layout is data.

The analysis figures set their own sizes on top (`REPORT`: smaller type, a fixed height, the
legend below), since the report is a page of many figures read one after another, not a
live page.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FONT = {"family": "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", "size": 13,
        "color": "#1f2933"}  # fmt: skip
GRID = "#e6e9ee"

#: What the analysis figures change of `base_layout`: type a size smaller (titles 14 or
#: less, set by each figure), a fixed height, the legend below the plot and room for it.
REPORT: dict[str, Any] = {
    "font": {**FONT, "size": 12},
    "margin": {"l": 70, "r": 20, "t": 46, "b": 84},
    "height": 360,
    "legend": {"orientation": "h", "y": -0.3, "font": {"size": 11}},
}


def plotly_text(text: str) -> str:
    """`text` as Plotly shows it, literally: Plotly reads a little HTML in every text it
    draws (``<a href>`` becomes a live link, ``<b>`` bold), so a user's value (a category, a
    path) goes in with ``&``, ``<`` and ``>`` as entities, which it draws as themselves."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def axis(title: str, **extra: Any) -> dict[str, Any]:
    """An axis titled `title`, with the grid and lines every figure uses."""
    # Fixed margins and no overflow checks: plotly's automargin redraws a figure until its
    # margins settle, and its tick-label overflow check measures every label once per
    # label; together they were a third of the sweep page's drawing time at 50,000 trials.
    return {"title": {"text": title, "standoff": 8}, "gridcolor": GRID, "zeroline": False,
            "automargin": False, "ticklabeloverflow": "allow", "linecolor": "#9aa5b1",
            "ticks": "outside", **extra}  # fmt: skip


def merged(layout: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """`layout` with `extra`'s entries merged in: a dict into a dict one level deep (so
    ``margin={"l": 120}`` keeps the other margins), anything else replacing."""
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(layout.get(key), dict):
            layout[key] = {**layout[key], **value}
        else:
            layout[key] = value
    return layout


def base_layout(title: str, x_title: str, y_title: str, **extra: Any) -> dict[str, Any]:
    """The layout every figure starts from; `extra` entries merge into it (`merged`).

    ``uirevision`` keeps a user's zoom and legend choices when a figure is drawn again.
    """
    layout = {
        "title": {"text": title, "x": 0.01, "xanchor": "left", "font": {"size": 15}},
        "font": FONT,
        "margin": {"l": 72, "r": 20, "t": 48, "b": 64},
        "xaxis": axis(x_title),
        "yaxis": axis(y_title),
        "plot_bgcolor": "#ffffff",
        "paper_bgcolor": "#ffffff",
        "hovermode": "closest",
        "hoverlabel": {"font": {"size": 12}},
        "legend": {"orientation": "v", "font": {"size": 12}},
        "uirevision": "keep",
    }
    return merged(layout, extra)
