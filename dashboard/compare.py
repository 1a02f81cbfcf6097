"""Two to five trials side by side: their parameters, their results and their learning
curves overlaid, for the trials table's "Compare" (``/dashboard/data/sweeps/<id>/compare``).

In two steps, as the figures are: `compare_rows` reads the trials (each record and its
per-epoch metrics, the latest attempt) into rows, `compare_figures` draws one figure per
metric from them. The results are `core.store.export` rows, so the comparison shows what a
download holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from core.analysis.layout import base_layout
from core.errors import InvalidQuery, NotFound
from core.spec.values import short_text
from core.store import export
from core.store.roles import Reads
from dashboard.detail import epoch_series
from dashboard.figures import PALETTE
from dashboard.table import SweepTable

MIN_TRIALS = 2
MAX_TRIALS = 5


def parse_indexes(raw: str) -> list[int]:
    """Trial indexes, comma-separated: 2 to 5 distinct ones (`InvalidQuery` otherwise)."""
    try:
        indexes = list(dict.fromkeys(int(part) for part in raw.split(",") if part.strip()))
    except ValueError:
        raise InvalidQuery(
            "indexes", f"must be trial indexes, comma-separated, got {raw[:60]!r}"
        ) from None
    if not MIN_TRIALS <= len(indexes) <= MAX_TRIALS:
        raise InvalidQuery(
            "indexes", f"a comparison takes {MIN_TRIALS} to {MAX_TRIALS} trials, got {len(indexes)}"
        )
    return indexes


def compare_rows(reads: Reads, table: SweepTable, indexes: Sequence[int]) -> list[dict[str, Any]]:
    """Each trial's export row with its per-epoch ``series`` (`detail.epoch_series`), in
    the order asked; `NotFound` for an index the sweep does not have."""
    out = []
    for index in indexes:
        row = table.rows.get(index)
        if row is None:
            raise NotFound("trial", f"{table.sweep_id} #{index}")
        doc = reads.get_trial(row["id"], with_metrics=True)
        series = epoch_series(doc.pop("metrics"))
        out.append({**export.row(doc), "series": series})
    return out


def _differs(values: Sequence[Any]) -> bool:
    return any(v != values[0] for v in values[1:])


def param_table(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One entry per parameter path any of the trials sets: its value in each trial (None
    where not set), as the page shows it (``texts``: `core.spec.values.short_text`, None
    where not set) and whether they differ; differing ones first."""
    paths = list(dict.fromkeys(path for row in rows for path in row["params"]))
    table = [{"path": path, "values": [row["params"].get(path) for row in rows]} for path in paths]
    for entry in table:
        entry["texts"] = [None if v is None else short_text(v) for v in entry["values"]]
        entry["differs"] = _differs(entry["values"])
    return sorted(table, key=lambda e: not e["differs"])


def metric_names(rows: Sequence[Mapping[str, Any]], objective: str) -> list[str]:
    """The quality metrics any trial reported per epoch, the objective's first."""
    names: dict[str, None] = {}
    for row in rows:
        names.update(dict.fromkeys(row["series"]["metrics"] + row["series"]["losses"]))
    ordered = sorted(names, key=lambda n: (n != objective, n))
    return ordered


def compare_figures(
    rows: Sequence[Mapping[str, Any]], metrics: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """metric -> a figure of that metric by epoch, one line per trial (colour by its place
    in the comparison, the same in every figure)."""
    figures = {}
    for metric in metrics:
        traces = []
        for n, row in enumerate(rows):
            series = row["series"]
            values = series["values"].get(metric)
            if not values:
                continue
            traces.append(
                {
                    "type": "scatter",
                    "mode": "lines+markers",
                    "name": f"#{row['index']}",
                    "x": series["epochs"],
                    "y": values,
                    "line": {"color": PALETTE[n % len(PALETTE)], "width": 2},
                    "marker": {"size": 5},
                    "hovertemplate": f"trial #{row['index']}<br>epoch %{{x}}: {metric} %{{y:.4g}}"
                    "<extra></extra>",
                }
            )
        layout = base_layout(
            f"{metric} by epoch", "epoch", metric, legend={"title": {"text": "trial"}}
        )
        figures[metric] = {"data": traces, "layout": layout}
    return figures


def compare_payload(reads: Reads, table: SweepTable, indexes: Sequence[int]) -> dict[str, Any]:
    """What the comparison shows of trials `indexes` of the table's sweep."""
    objective = (table.sweep.get("objective") or {}).get("metric", "objective")
    rows = compare_rows(reads, table, indexes)
    metrics = metric_names(rows, objective)
    trials = [{key: value for key, value in row.items() if key != "series"} for row in rows]
    return {
        "metric": objective,
        "trials": trials,
        "params": param_table(rows),
        "metrics": metrics,
        "figures": compare_figures(rows, metrics),
    }
