"""`sweepstack front SWEEP`: the Pareto front of a sweep's objectives, as a table or JSON.

The front is computed once, by `core.analysis.sweep.sweep_front` (the API's
``GET /api/v1/sweeps/{id}/front`` serves the same value): the feasible complete trials
that no other one dominates, by the first objective, and the hypervolume they dominate up
to the reference point. The store comes from `cli.local.open_store`, as for ``status``.
"""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from cli.local import find_sweep, open_store, with_data_dir
from cli.options import data_option
from cli.shared import read_settings
from core.analysis.pareto import read_reference
from core.analysis.sweep import sweep_front
from core.store.records import flatten_params


def _reference(raw: str | None, count: int) -> list[float] | None:
    if raw is None:
        return None
    try:
        return read_reference(raw, count)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--reference'") from None


def _number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def front_table(front: dict[str, Any]) -> Table:
    """The front's trials, one row each: index, id, each objective's value, parameters."""
    title = (f"front of sweep {front['sweep_id']}: {front['size']} of {front['feasible']} "
             f"feasible trials ({front['complete']} complete)")  # fmt: skip
    table = Table(title=title, header_style="bold")
    table.add_column("#", justify="right")
    table.add_column("trial", no_wrap=True)
    for objective in front["objectives"]:
        arrow = "↑" if objective["direction"] == "maximize" else "↓"
        table.add_column(f"{objective['metric']} {arrow}", justify="right")
    table.add_column("params")
    for trial in front["trials"]:
        params = ", ".join(f"{k.split('.', 1)[-1]}={v}"
                           for k, v in flatten_params(trial["params"]).items())  # fmt: skip
        table.add_row(str(trial["index"]), str(trial["id"]),
                      *(_number(v) for v in trial["values"]), params)  # fmt: skip
    return table


@click.command("front")
@click.argument("sweep_id")
@data_option
@click.option(
    "--reference",
    help="The hypervolume's reference point, one number per objective, comma-separated "
    "[default: the feasible trials' worst values moved out by a tenth of their range].",
)
@click.option("--json", "as_json", is_flag=True, help="Print the front as one JSON object.")
def front(sweep_id: str, data_dir: str | None, reference: str | None, as_json: bool) -> None:
    """The Pareto front of a sweep's objectives: the feasible complete trials no other one
    beats on every objective, and the hypervolume they dominate."""
    store = open_store(with_data_dir(read_settings(), data_dir))
    sweep = find_sweep(store, sweep_id)
    count = len(sweep.get("objectives") or [sweep.get("objective")])
    value = sweep_front(store.reads, sweep_id, reference=_reference(reference, count))
    if as_json:
        click.echo(json.dumps(value, default=str))
        return
    console = Console()
    console.print(front_table(value))
    if value["hypervolume"] is None:
        console.print("no feasible complete trial yet")
        return
    ref = ", ".join(_number(v) for v in value["reference"])
    console.print(f"hypervolume {value['hypervolume']:.6g} (reference point {ref})")
    if value["constraints"]:
        console.print(f"constraints: {'; '.join(value['constraints'])}")
