"""CLI commands that read results: ls, status, export.

Each takes its store from `cli.local.open_store`: ``SWEEPSTACK_MONGO_URL`` when set,
else the data folder of `sweepstack run` (``--data``), whose store is started for the
command and stopped after it, or borrowed from the run or `open` serving it
(`cli.local`). So a local run's results can be listed, followed and exported after
it ended, with nothing set in the environment. `sweepstack open` is in `cli.open_dashboard`.
"""

from __future__ import annotations

import json
import shutil
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import click
from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from cli.local import NoResults, find_sweep, open_store, reached, with_data_dir
from cli.options import data_option
from cli.shared import program, read_settings
from core.states import TERMINAL_STATES, TrialState
from core.store import export as exporting
from core.store.records import flatten_params, sweep_status
from core.store.store import Store

STATE_COLOURS = {
    "queued": "grey62",
    "running": "blue",
    "complete": "green",
    "failed": "red",
    "pruned": "yellow",
    "cancelled": "magenta",
}


def _best_text(best: dict[str, Any] | None, objective: dict[str, str]) -> str:
    if not best:
        return "no complete trial yet"
    value = best.get("objective")
    flat = flatten_params(best.get("params"))
    params = ", ".join(f"{k.split('.', 1)[-1]}={v}" for k, v in flat.items())
    shown = f"{value:.4f}" if isinstance(value, float) else str(value)
    return f"best {objective['metric']} {shown} ({params}) trial {best['_id']}"


def _status_view(
    sweep: dict[str, Any], counts: dict[str, int], best: dict[str, Any] | None
) -> Group:
    total = sum(counts.values()) or 1
    done = sum(counts.get(s.value, 0) for s in TERMINAL_STATES)
    table = Table(title=f"sweep {sweep['_id']} ({sweep.get('name', '')})", header_style="bold")
    for state in TrialState:
        table.add_column(state.value, justify="right", style=STATE_COLOURS[state.value])
    table.add_row(*(str(counts.get(s.value, 0)) for s in TrialState))
    bar = ProgressBar(total=total, completed=done, width=60)
    line = Text(f" {done}/{total} finished ({100 * done / total:.0f}%)")
    return Group(table, bar, line, Text(_best_text(best, sweep["objective"])))


@click.command()
@click.argument("sweep_id")
@data_option
@click.option("--watch", is_flag=True, help="Follow until every trial has finished.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.2),
    default=2.0,
    show_default=True,
    help="Seconds between refreshes with --watch.",
)
@click.option(
    "--json", "as_json", is_flag=True, help='Print {"counts": {state: n}, "best": {...}}.'
)
def status(
    sweep_id: str, data_dir: str | None, watch: bool, interval: float, as_json: bool
) -> None:
    """Counts by state, progress and the best trial so far of a sweep."""
    store = open_store(with_data_dir(read_settings(), data_dir))
    sweep = find_sweep(store, sweep_id)
    found = reached()

    def snapshot() -> tuple[dict[str, int], dict[str, Any] | None]:
        counts = store.reads.counts(sweep_id)
        best = store.reads.best(sweep_id, 1)
        return counts, (best[0] if best else None)

    def finished(counts: dict[str, int]) -> bool:
        active = counts.get("queued", 0) + counts.get("running", 0)
        return active == 0

    counts, best = snapshot()
    if watch and found is not None and not found.live and not finished(counts):
        # Its store was started for this command: nothing is running that could move it.
        click.echo(
            f"note: nothing is running on {found.folder}, so there is nothing to watch; "
            f"`{program()} run --resume {sweep_id}` finishes the sweep",
            err=True,
        )
        watch = False
    if as_json:
        while watch and not finished(counts):
            time.sleep(interval)
            counts, best = snapshot()
        click.echo(json.dumps({"sweep_id": sweep_id, "counts": counts, "best": best}, default=str))
        return
    console = Console()
    if not watch:
        console.print(_status_view(sweep, counts, best))
        return
    with Live(_status_view(sweep, counts, best), console=console, refresh_per_second=4) as live:
        while not finished(counts):
            time.sleep(interval)
            counts, best = snapshot()
            live.update(_status_view(sweep, counts, best))


def _sweep_entry(store: Store, doc: dict[str, Any]) -> dict[str, Any]:
    """One sweep of `ls`, as ``--json`` prints it."""
    best = store.reads.best(doc["_id"], 1)
    objective = doc.get("objective") or {}
    return exporting.plain(
        {
            "sweep_id": doc["_id"],
            "name": doc.get("name"),
            "created_at": doc.get("created_at"),
            "status": sweep_status(doc),
            "trials": sum(doc["counts"].values()),
            "counts": doc["counts"],
            "objective": objective,
            "best": best[0].get("objective") if best else None,
            "best_trial": best[0]["_id"] if best else None,
        }
    )


def _when(value: Any) -> str:
    if isinstance(value, datetime):
        return value.astimezone().strftime("%Y-%m-%d %H:%M")
    return "-"


def _ls_table(docs: list[dict[str, Any]], entries: list[dict[str, Any]], title: str) -> Table:
    table = Table(title=title, header_style="bold")
    for name in ("sweep", "name", "created", "status", "trials"):
        table.add_column(name, justify="right" if name == "trials" else "left", no_wrap=True)
    for state in ("complete", "failed", "pruned", "cancelled"):
        table.add_column(state, justify="right", style=STATE_COLOURS[state])
    table.add_column("left", justify="right")
    table.add_column("best", justify="right")
    table.add_column("of", no_wrap=True)
    for doc, entry in zip(docs, entries, strict=True):
        counts = entry["counts"]
        value = entry["best"]
        metric = entry["objective"].get("metric", "")
        table.add_row(
            entry["sweep_id"],
            str(entry["name"] or ""),
            _when(doc.get("created_at")),
            entry["status"],
            f"{entry['trials']:,}",
            *(f"{counts[s]:,}" for s in ("complete", "failed", "pruned", "cancelled")),
            f"{counts['queued'] + counts['running']:,}",
            f"{value:.4f}" if isinstance(value, float) else "-",
            metric,
        )
    return table


@click.command("ls")
@data_option
@click.option(
    "--limit",
    type=click.IntRange(min=1, max=1000),
    default=50,
    show_default=True,
    help="The newest this many sweeps.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, one object a sweep.")
@click.option(
    "-q",
    "--quiet",
    is_flag=True,
    help="Print only the sweep ids, one a line (for scripts: $(sweepstack ls -q --limit 1)).",
)
def ls(data_dir: str | None, limit: int, as_json: bool, quiet: bool) -> None:
    """List the sweeps of a data folder (or of SWEEPSTACK_MONGO_URL), newest first."""
    if as_json and quiet:
        raise click.UsageError("--json and --quiet each choose the output; give one")
    settings = with_data_dir(read_settings(), data_dir)
    try:
        store = open_store(settings)
    except NoResults as exc:  # nothing stored there yet: an empty list, and why
        if as_json:
            click.echo("[]")
        click.echo(f"note: {exc}", err=as_json or quiet)  # stdout stays JSON, or ids only
        return
    docs, more = store.reads.list_sweeps(limit=limit)
    if quiet:
        for doc in docs:
            click.echo(doc["_id"])
        return
    entries = [_sweep_entry(store, doc) for doc in docs]
    if as_json:
        click.echo(json.dumps(entries))
        return
    found = reached()
    where = str(found.folder) if found else "the store of SWEEPSTACK_MONGO_URL"
    if not docs:
        click.echo(f"no sweeps in {where}")
        return
    console = Console(width=max(120, shutil.get_terminal_size((160, 24)).columns))
    console.print(_ls_table(docs, entries, f"sweeps in {where}"))
    if more:
        console.print("… and older ones; use --limit (at most 1000)")
    if found is not None and found.holder is not None:
        console.print(f"served by {found.holder.describe()}", style="dim")


@click.command("export")
@click.argument("sweep_id")
@data_option
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["csv", "jsonl", "parquet"]),
    default="csv",
    show_default=True,
    help="CSV (one column per parameter and metric), JSON Lines, or Parquet (typed columns).",
)
@click.option(
    "--out",
    "-o",
    "out_path",
    type=click.Path(dir_okay=False, writable=True),
    help="Write to this file [default: standard output; parquet needs a file].",
)
def export(sweep_id: str, data_dir: str | None, fmt: str, out_path: str | None) -> None:
    """Every trial of a sweep, one row each: id, state, objective, params, final metrics,
    epochs, seconds, parameter count, device, error (the API's export, the same rows)."""
    if fmt == "parquet" and not out_path:
        raise click.UsageError("--format parquet writes a binary file: give it with -o FILE")
    store = open_store(with_data_dir(read_settings(), data_dir))
    sweep = find_sweep(store, sweep_id)
    trials = sum(sweep["counts"].values()) - int(sweep.get("planned") or 0)
    if fmt == "parquet":
        written = exporting.write_parquet(store.reads, sweep, str(out_path))
        click.echo(f"wrote {written:,} trials of sweep {sweep_id} to {out_path}", err=True)
        return
    reads = store.reads
    chunks = exporting.csv_text(reads, sweep) if fmt == "csv" else exporting.jsonl(reads, sweep_id)
    if out_path is None:
        for chunk in chunks:
            click.echo(chunk, nl=False)
        return
    path = Path(out_path)
    with path.open("w", encoding="utf-8", newline="") as handle:
        for chunk in chunks:
            handle.write(chunk)
    click.echo(f"wrote {trials:,} trials of sweep {sweep_id} to {path}", err=True)

