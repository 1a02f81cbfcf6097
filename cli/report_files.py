"""A sweep's analysis as a file to read or send: Markdown, JSON, or one self-contained HTML.

The HTML report is a single file that opens offline: plotly.js is embedded from the
installed ``plotly`` package (as the dashboard serves it), the figures are those of
`core.analysis.figures` (the dashboard's Analysis panel draws the same) as JSON in the
page, and every text is escaped (Jinja's autoescape). A page marks itself drawn with
``window.__report = {drawn: true, figures: n}`` once every figure is drawn.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import Any

import jinja2
from markupsafe import Markup

from core.analysis.figures import figures
from core.analysis.rows import short
from core.spec.values import short_text

PLOTLY_JS = resources.files("plotly") / "package_data" / "plotly.min.js"


def as_json(analysis: dict[str, Any]) -> str:
    """The analysis as indented JSON (what ``GET /api/v1/sweeps/{id}/analysis`` answers)."""
    return json.dumps(analysis, indent=2, allow_nan=False) + "\n"


def _value(analysis: dict[str, Any], x: Any) -> str:
    if not isinstance(x, int | float):
        return "-"
    return f"{100 * x:.2f} %" if analysis["scale"]["fraction"] else f"{x:.4g}"


def _gap(analysis: dict[str, Any], x: Any) -> str:
    """A difference of the objective: percentage points for an accuracy."""
    if not isinstance(x, int | float):
        return "-"
    return f"{100 * x:.2f} pp" if analysis["scale"]["fraction"] else f"{x:.4g}"


#: What Markdown (and the HTML it may carry) reads as markup, escaped with a backslash.
_MARKDOWN = re.compile(r"([\\`*\[\]<>|&])")


def md(text: Any) -> str:
    """`text` as Markdown shows it literally: a user's sweep name, parameter value or worker
    name never becomes a link, an HTML tag, emphasis or a table's cell border."""
    return _MARKDOWN.sub(r"\\\1", str(text))


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(md(h) for h in head) + " |",
             "|" + "|".join("---" for _ in head) + "|"]  # fmt: skip
    lines += ["| " + " | ".join(md(cell) for cell in row) + " |" for row in rows]
    return [*lines, ""]


def _number(value: float) -> str:
    """A whole number in full with thousands separators (a parameter count), else 4 digits."""
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:.4g}"


def _params(trial: dict[str, Any]) -> str:
    return ", ".join(f"{short(p)}={short_text(v)}" for p, v in trial["params"].items())


def markdown(analysis: dict[str, Any]) -> str:
    """The analysis as a Markdown document: findings, then a section per analysis."""
    sweep = analysis["sweep"]

    def v(x: Any) -> str:
        return _value(analysis, x)

    out = [f"# What sweep {md(sweep['name'])} found", "",
           f"Sweep `{sweep['id']}`: {sweep['analysed']:,} complete trials analysed of "
           f"{sweep['trial_count']:,}; objective: {sweep['direction']} {md(sweep['metric'])}."
           + (" The sweep is still running." if sweep["live"] else ""), "",
           "## Findings", "", *[f"- {md(text)}" for text in analysis["findings"]], ""]  # fmt: skip
    noise = analysis["noise"]["std"]
    measured = "±" + _gap(analysis, noise) if noise is not None else "unmeasured (no repeats)"
    threshold = _gap(analysis, analysis["scale"]["min_gain"])
    out += ["## Diminishing returns", "",
            f"Seed noise: {measured}; a value gains nothing more when no later value improves "
            f"the best configuration by the larger of that and {threshold}.", ""]  # fmt: skip
    for entry in analysis["returns"]:
        out += [f"### {md(entry['name'])}: {entry['status']}", "", md(entry["text"]), ""]
        out += _table([entry["name"], "trials", "best", "mean", "std"],
                      [[short_text(p["value"]), f"{p['n']:,}", v(p["best"]), v(p["mean"]),
                        _gap(analysis, p["std"])] for p in entry["curve"]])  # fmt: skip
    costs = analysis["costs"]
    out += ["## Cost laws", ""]
    out += _table(["cost", "against", "form", "slope / exponent", "R²", "finding"],
                  [[law["target"], law["against"], law["chosen"],
                    f"{law['power']['exponent']:.3g}" if law["chosen"] == "power"
                    else f"{law['linear']['slope']:.3g}", f"{law['r2']:.3f}", law["text"]]
                   for law in costs["laws"]])  # fmt: skip
    workers = costs["workers"]["workers"]
    if len(workers) > 1:
        out += [
            f"Training times are put on {md(costs['workers']['reference'])}'s scale (median "
            "ratio of times on configurations both workers ran):",
            "",
        ]
        out += _table(["worker", "trials", "shared configurations", "factor"],
                      [[w["name"], f"{w['trials']:,}", f"{w['shared']:,}",
                        f"{w['factor']:.3f}" if w["normalised"] else "not normalised"]
                       for w in workers])  # fmt: skip
    importance = analysis["importance"]
    out += ["## Importance", ""]
    if importance.get("available"):
        params = sorted(
            importance["fanova"] | importance["ped_anova"],
            key=lambda p: -importance["fanova"].get(p, 0),
        )
        out += [
            f"Optuna's evaluators on {importance['trials']:,} complete trials"
            + (" (a seeded sample)" if importance["sampled"] else "")
            + ".",
            "",
        ]
        out += _table(
            ["parameter", "fANOVA", "PED-ANOVA"],
            [
                [
                    p,
                    f"{100 * importance['fanova'].get(p, 0):.1f} %",
                    f"{100 * importance['ped_anova'].get(p, 0):.1f} %",
                ]
                for p in params
            ],
        )
    else:
        out += [f"Not computed: {md(importance.get('note', ''))}", ""]
    front = analysis["front"]
    searched = front.get("searched")
    title = "Pareto front of the objectives searched" if searched else "Accuracy-cost front"
    out += [f"## {title}", "", *[f"- {md(text)}" for text in front.get("text", [])],
            ""]  # fmt: skip
    if searched and searched["size"]:
        names = [o["metric"] for o in searched["objectives"]]
        out += _table(["trial", *names, "params"],
                      [[f"#{t['index']}", *(_number(x) for x in t["values"]), _params(t)]
                       for t in searched["trials"]])  # fmt: skip
    for which, cost in (("param_count", "parameters"), ("train_seconds", "train s")):
        part = front.get(which)
        if part:
            out += [f"### Against {cost} ({part['size']} trials on the front)", ""]
            out += _table(["trial", cost, sweep["metric"], "params"],
                          [[f"#{t['index']}", f"{t['cost']:,.4g}", v(t["objective"]),
                            _params(t)] for t in part["trials"]])  # fmt: skip
    return "\n".join(out)


_PAGE = jinja2.Environment(autoescape=True).from_string("""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>What sweep {{ sweep.name }} found · Sweepstack</title>
<style>
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       color: #1f2933; margin: 0 auto; max-width: 1180px; padding: 24px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { margin-top: 32px; font-size: 18px; }
.meta { color: #52606d; } .findings li { margin: 4px 0; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr));
        gap: 16px; }
.fig { border: 1px solid #e6e9ee; border-radius: 6px; min-height: 360px; }
table { border-collapse: collapse; margin: 8px 0; } td, th { padding: 3px 10px;
        border-bottom: 1px solid #e6e9ee; text-align: left; }
</style>
<script>{{ plotly_js }}</script>
</head><body>
<h1>What sweep {{ sweep.name }} found</h1>
<p class="meta">Sweep {{ sweep.id }} · {{ "{:,}".format(sweep.analysed) }} complete trials
analysed of {{ "{:,}".format(sweep.trial_count) }} · objective: {{ sweep.direction }}
{{ sweep.metric }}{% if sweep.live %} · still running{% endif %}</p>
<h2>Findings</h2>
<ul class="findings">{% for text in findings %}<li>{{ text }}</li>{% endfor %}</ul>
{% for group, heading in groups %}{% if by_group[group] %}
<h2>{{ heading }}</h2>
<div class="grid">{% for fig in by_group[group] %}
<div class="fig" id="fig-{{ fig.id }}" data-figure="{{ loop.index0 }}"></div>{% endfor %}
</div>{% endif %}{% endfor %}
<h2>Method</h2>
<p class="meta">{{ method }}</p>
<script type="application/json" id="figures">{{ figures_json }}</script>
<script>
(function () {
  const figures = JSON.parse(document.getElementById("figures").textContent);
  const config = { displaylogo: false, responsive: true };
  Promise.all(figures.map((f) => Plotly.newPlot(document.getElementById("fig-" + f.id),
      f.figure.data, f.figure.layout, config)))
    .then(() => { window.__report = { drawn: true, figures: figures.length }; });
})();
</script>
</body></html>
""")

_METHOD = (
    "Only complete trials are analysed. A plateau is judged on the best configuration at "
    "each value (the mean over its seeds): it starts at the first value past which no later "
    "value gains the larger of the seed noise (pooled standard deviation within "
    "configurations run more than once) and the threshold. Costs are fitted by least squares "
    "on the mean at each value, linear and power law; the power law is chosen only when its "
    "R² is clearly higher. Training times of different workers are first put on one scale: "
    "each worker's factor is the median ratio of its times to the reference worker's on the "
    "configurations both ran. Importance is Optuna's fANOVA and PED-ANOVA. The front holds "
    "the trials no other trial beats on both objective and cost."
)


def html(analysis: dict[str, Any]) -> str:
    """One self-contained HTML page: findings, every figure, plotly.js embedded."""
    figs = figures(analysis)
    by_group: dict[str, list[dict[str, Any]]] = {}
    for fig in figs:
        by_group.setdefault(fig["group"], []).append(fig)
    # `</` cannot end the JSON's script element early: JSON allows `<\\/` for `</`.
    text = json.dumps(figs, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    plotly_js = PLOTLY_JS.read_text(encoding="utf-8").replace("</script", "<\\/script")
    return _PAGE.render(
        sweep=analysis["sweep"], findings=analysis["findings"], by_group=by_group,
        groups=[("returns", "Diminishing returns"), ("laws", "Cost laws"),
                ("importance", "Importance"), ("front", "Accuracy-cost front")],
        figures_json=Markup(text),
        plotly_js=Markup(plotly_js), method=_METHOD,
    )  # fmt: skip


def render(analysis: dict[str, Any], fmt: str) -> str:
    """The analysis in `fmt`: ``md``, ``html`` or ``json``."""
    if fmt == "html":
        return html(analysis)
    if fmt == "json":
        return as_json(analysis)
    return markdown(analysis)
