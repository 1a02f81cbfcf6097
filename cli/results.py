"""CLI commands on the results a store keeps: ls, status, export, delete.

Each takes its store from `cli.local.open_store`: ``SWEEPSTACK_MONGO_URL`` when set,
else the data folder of `sweepstack run` (``--data``), whose store is started for the
command and stopped after it, or borrowed from the run or `open` serving it
(`cli.local`). So a local run's results can be listed, followed and exported after
it ended, with nothing set in the environment. `sweepstack open` is in `cli.open_dashboard`.
"""

from __future__ import annotations

import json
import shutil
import sys
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

from cli import trackers
from cli.failures import print_failures, sweep_failures
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


def _best_text(
    best: dict[str, Any] | None, objective: dict[str, str], counts: dict[str, int]
) -> str:
    if not best:
        if counts.get("queued", 0) + counts.get("running", 0):
            return "no complete trial yet"
        return "no trial completed" + (": the failed trials' reasons follow"
                                       if counts.get("failed") else "")  # fmt: skip
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
    return Group(table, bar, line, Text(_best_text(best, sweep["objective"], counts)))


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
    """Counts by state, progress and the best trial so far of a sweep, and why its failed
    trials failed (their reasons grouped, most frequent first)."""
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
        failures = sweep_failures(store, sweep_id)[0] if counts.get("failed") else []
        click.echo(json.dumps({"sweep_id": sweep_id, "counts": counts, "best": best,
                               "failures": failures, "changes": sweep.get("changes") or []},
                              default=str))  # fmt: skip
        return
    console = Console()
    if not watch:
        console.print(_status_view(sweep, counts, best))
        _print_changes(console, sweep)
        print_failures(console, store, sweep_id, counts)
        return
    with Live(_status_view(sweep, counts, best), console=console, refresh_per_second=4) as live:
        while not finished(counts):
            time.sleep(interval)
            counts, best = snapshot()
            live.update(_status_view(sweep, counts, best))
    print_failures(console, store, sweep_id, counts)


def _print_changes(console: Console, sweep: dict[str, Any]) -> None:
    """The sweep's pauses, resumes and spec changes (`sweepstack pause`, `extend`), if any."""
    if sweep.get("paused_at") is not None:
        console.print(f"paused since {_when(sweep['paused_at'])}: `{program()} resume "
                      f"{sweep['_id']}` goes on", style="bold")  # fmt: skip
    for entry in sweep.get("changes") or []:
        what = entry.get("summary") if entry.get("kind") == "change" else entry.get("kind")
        who = f" by {entry['by']}" if entry.get("by") else ""
        console.print(f"{_when(entry.get('at'))} {what}{who}", markup=False)


#: `ls`'s status of a data folder's sweep with trials left that no live run feeds.
STOPPED = "stopped"


def _status(doc: dict[str, Any]) -> str:
    """The sweep's status (`core.store.records.sweep_status`); in a data folder, a sweep
    with trials left is `STOPPED` unless the live `sweepstack run` holding the folder runs
    it: its run ended before it did (Ctrl-C, a kill), and only ``run --resume`` goes on."""
    status = sweep_status(doc)
    found = reached()
    if found is None or status not in ("running", "queued"):
        return status
    holder = found.holder
    if holder is not None and holder.command == "run" and holder.sweep in (None, doc["_id"]):
        return status
    return STOPPED


def _sweep_entry(store: Store, doc: dict[str, Any]) -> dict[str, Any]:
    """One sweep of `ls`, as ``--json`` prints it."""
    best = store.reads.best(doc["_id"], 1)
    objective = doc.get("objective") or {}
    return exporting.plain(
        {
            "sweep_id": doc["_id"],
            "name": doc.get("name"),
            "created_at": doc.get("created_at"),
            "status": _status(doc),
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
    stopped = [e["sweep_id"] for e in entries if e["status"] == STOPPED]
    if stopped:
        data = f" --data {found.folder}" if data_dir else ""
        console.print(
            f"stopped: its run ended before the sweep did; `{program()} run --resume "
            f"{stopped[0]}{data}` finishes it",
            style="dim", highlight=False, markup=False, soft_wrap=True,
        )  # fmt: skip
    if found is not None and found.holder is not None:
        console.print(f"served by {found.holder.describe()}", style="dim")


@click.command("export")
@click.argument("sweep_id")
@data_option
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["csv", "jsonl", "parquet", *trackers.FORMATS]),
    default="csv",
    show_default=True,
    help="CSV (one column per parameter and metric), JSON Lines, Parquet (typed columns); "
    "or a tracker: mlflow (a run per trial under one for the sweep, with --tracking-uri) or "
    "tensorboard (an event folder per trial with the HParams summary, with -o DIR).",
)
@click.option(
    "--out",
    "-o",
    "out_path",
    type=click.Path(writable=True),
    help="Write to this file (tensorboard: this new or empty folder) [default: standard "
    "output; parquet needs a file].",
)
@click.option(
    "--epochs",
    is_flag=True,
    help="One row per epoch of each trial (its final attempt's curve) instead of per trial.",
)
@click.option(
    "--tracking-uri",
    help="mlflow: the tracking server (http://HOST:5000) or store (sqlite:///mlflow.db) "
    "[default: MLFLOW_TRACKING_URI].",
)
@click.option("--experiment", help="mlflow: the experiment [default: the sweep's name].")
def export(
    sweep_id: str, data_dir: str | None, fmt: str, out_path: str | None, epochs: bool,
    tracking_uri: str | None, experiment: str | None,
) -> None:
    """Every trial of a sweep, one row each: id, state, objective, params, final metrics,
    epochs, seconds, parameter count, device and error (the API's export, the same rows).
    With --epochs, one row per epoch of each trial instead: its curve. Or the sweep into
    MLflow or TensorBoard, each trial with its parameters, curve, final metrics and tags."""
    trackers.check_options(fmt, out_path, tracking_uri, experiment, epochs)
    if fmt == "parquet" and not out_path:
        raise click.UsageError("--format parquet writes a binary file: give it with -o FILE")
    if fmt not in trackers.FORMATS and out_path and Path(out_path).is_dir():
        raise click.BadParameter(f"File {out_path!r} is a directory.", param_hint="'--out' / '-o'")
    store = open_store(with_data_dir(read_settings(), data_dir))
    sweep = find_sweep(store, sweep_id)
    if fmt in trackers.FORMATS:
        trackers.export(store, sweep, fmt, out_path, tracking_uri, experiment)
        return
    trials = sum(sweep["counts"].values()) - int(sweep.get("planned") or 0)
    what = "epoch rows" if epochs else "trials"
    reads = store.reads
    if fmt == "parquet":
        write = exporting.write_epochs_parquet if epochs else exporting.write_parquet
        written = write(reads, sweep, str(out_path))
        click.echo(f"wrote {written:,} {what} of sweep {sweep_id} to {out_path}", err=True)
        return
    if epochs:
        chunks = (exporting.epochs_csv(reads, sweep) if fmt == "csv"
                  else exporting.epochs_jsonl(reads, sweep_id))  # fmt: skip
    else:
        chunks = exporting.csv_text(reads, sweep) if fmt == "csv" else exporting.jsonl(
            reads, sweep_id)  # fmt: skip
    if out_path is None:
        for chunk in chunks:
            click.echo(chunk, nl=False)
        return
    path = Path(out_path)
    written = 0
    with path.open("w", encoding="utf-8", newline="") as handle:
        for chunk in chunks:
            handle.write(chunk)
            written += chunk.count("\n")
    count = max(0, written - (fmt == "csv")) if epochs else trials
    click.echo(f"wrote {count:,} {what} of sweep {sweep_id} to {path}", err=True)



@click.command("delete")
@click.argument("sweep_id")
@data_option
@click.option("--yes", "-y", is_flag=True, help="Delete without asking (needed with no terminal).")
def delete(sweep_id: str, data_dir: str | None, yes: bool) -> None:
    """Delete a sweep: its trials, their epoch rows, its summaries and its kept models,
    checkpoints and files, for good.

    A sweep still running is refused: stop its run (Ctrl-C), or cancel it through the API
    and wait for its trials to stop. A sweep of a data folder whose run ended before it did
    (`ls` says stopped) has its unfinished trials cancelled first: nothing trains them.
    """
    store = open_store(with_data_dir(read_settings(), data_dir))
    sweep = find_sweep(store, sweep_id)
    status = _status(sweep)
    if status in ("running", "queued"):
        left = sweep["counts"]["queued"] + sweep["counts"]["running"]
        raise click.ClickException(
            f"sweep {sweep_id} is {status} ({left:,} trials left): stop its run, or cancel it "
            "(POST /api/v1/sweeps/SWEEP/cancel) and wait for its trials to stop, then delete it"
        )
    trials = sum(sweep["counts"].values()) - int(sweep.get("planned") or 0)
    if not yes:
        if not sys.stdin.isatty():
            raise click.UsageError("give --yes to delete without a terminal to confirm on")
        click.confirm(f"delete sweep {sweep_id} ({sweep.get('name')}, {trials:,} trials)?",
                      abort=True)  # fmt: skip
    if status == STOPPED:
        # Its trials left were never going to end: no worker holds them. Cancelled, they
        # may be deleted (the store refuses a sweep with trials queued or running).
        store.admin.requeue_stale(0.0, sweep_id=sweep_id, count_lost=False)
        store.admin.cancel_sweep(sweep_id)
    removed = store.admin.delete_sweep(sweep_id)
    click.echo(
        f"deleted sweep {sweep_id}: {removed['trials']:,} trials, "
        f"{removed['metrics']:,} epoch rows, {removed.get('artifacts', 0):,} models and files"
    )
