"""The data of the sweep page's Analysis panel: the sweep's analysis and its figures.

The analysis is `core.analysis.sweep_analysis`, with the importance function and the
memo of the shared app context (`web.context.AppContext`: the web composition hands
in Optuna's importance, which the dashboard may not import), so the panel shows what the
API's ``/analysis`` and ``sweepstack report`` show. The panel polls while the sweep runs;
a live sweep's analysis is computed at most every `PANEL_MAX_AGE` seconds however many
pages poll, and a page that sends the ``version`` it has gets ``unchanged`` back.
"""

from __future__ import annotations

from typing import Any

from core.analysis import sweep_analysis
from core.analysis.figures import figures
from web.context import AppContext

#: A live sweep's analysis is served for this many seconds before it is computed again.
PANEL_MAX_AGE = 10.0


def panel_payload(ctx: AppContext, sweep_id: str, version: str | None) -> dict[str, Any]:
    """``{version, analysis, figures}``, or ``{version, unchanged: true}`` when the page
    already has this version. The caller has checked that the sweep is the viewer's."""
    analysis = sweep_analysis(ctx.store.reads, sweep_id, importance=ctx.importance,
                              memo=ctx.analyses, max_age=PANEL_MAX_AGE)  # fmt: skip
    if version is not None and version == analysis["version"]:
        return {"version": version, "unchanged": True}
    return {"version": analysis["version"], "analysis": analysis, "figures": figures(analysis)}
