"""What a sweep found: diminishing returns, cost laws, importance and the accuracy-cost front.

Plain functions over a sweep's finished trials (numpy, no store writes, no Optuna):

- `rows`: the complete trials as columns, and what each parameter is;
- `returns`: the objective's curve over each numeric parameter, seed noise, the plateau;
- `costs`: worker-speed normalisation, and linear / power-law fits of training time,
  time per epoch and parameter count against depth, width and parameter count;
- `front`: the Pareto fronts of objective against training time and parameter count;
- `report`: all of it as one JSON value with the findings in sentences;
- `figures`: that value drawn as Plotly figure dictionaries (the dashboard's panel and
  the HTML report draw the same ones); `layout`: the one Plotly layout they and the
  dashboard's own figures start from;
- `sweep`: one sweep's analysis read from the store and kept per version of the sweep;
- `failures`: failed trials grouped by their reason (the dashboard, `run` and `status`).

**Where importance comes from.** Importance is Optuna's (fANOVA and PED-ANOVA); Optuna stays
out of the analysis (the scheduler imports it, and below it only the spec's pruner and the
workers' own pruning), while the dashboard may import only ``core``. So the
analysis takes importance as a function (`report.Importance`) that the entry points hand
in: ``sweepstack report`` and the API pass `scheduler.importance.param_importances`
themselves, and the web composition (`cli.app.create_app`, which may import every
package) puts it on the shared app context (`web.context.AppContext.importance`),
where the dashboard's panel finds it. The layer rules stay as they are; every surface
computes the same value by the same code, so the panel, the CLI and the API agree.
"""

from __future__ import annotations

from core.analysis.report import ANALYSIS_VERSION, Importance, analyse
from core.analysis.rows import FIELDS
from core.analysis.sweep import Memo, sweep_analysis

__all__ = ["ANALYSIS_VERSION", "FIELDS", "Importance", "Memo", "analyse", "sweep_analysis"]
