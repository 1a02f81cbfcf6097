"""The tracker formats of ``sweepstack export``: ``--format mlflow`` (`cli.export_mlflow`) and
``--format tensorboard`` (`cli.export_tensorboard`), with a progress bar on a terminal.

Both write the runs `core.store.trackers` makes of a sweep and its trials, read a page at a
time. Each tracker's package is an optional extra, imported only when its format is asked
for; a missing one is an error naming the install.

MLflow's client retries an unanswered call for minutes by default; unless
``MLFLOW_HTTP_REQUEST_MAX_RETRIES`` is set, the export lets it retry `MLFLOW_RETRIES` times
(about 15 s), so a wrong ``--tracking-uri`` is said soon.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from core.store.store import Store
from core.store.trackers import sweep_run, trial_runs

FORMATS = ("mlflow", "tensorboard")
MLFLOW_RETRIES = "3"


def kept_model(store: Store, trial_id: str) -> bytes | None:
    """The trial's kept model (safetensors bytes), or None when the sweep kept none for it."""
    doc = store.artifacts.find(trial_id, "model", "model")
    return store.artifacts.read(doc) if doc is not None else None


@contextmanager
def progress_bar(total: int, what: str) -> Iterator[Callable[[], None]]:
    """A progress bar of `total` trials on standard error when it is a terminal (nothing
    otherwise); yields the function that counts one more trial written."""
    console = Console(stderr=True)
    with Progress(
        TextColumn(what),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not console.is_terminal,
    ) as progress:
        task = progress.add_task(what, total=total)
        yield lambda: progress.advance(task)


def check_options(
    fmt: str, out_path: str | None, tracking_uri: str | None, experiment: str | None,
    epochs: bool,
) -> None:
    """Usage errors of the tracker formats' options, and of theirs given to another format."""
    if fmt not in FORMATS:
        if tracking_uri is not None or experiment is not None:
            raise click.UsageError("--tracking-uri and --experiment are for --format mlflow")
        return
    if epochs:
        raise click.UsageError(
            f"--epochs is for csv, jsonl and parquet: --format {fmt} carries every trial's "
            "curve, one step an epoch"
        )
    if fmt == "mlflow" and out_path is not None:
        raise click.UsageError("--format mlflow writes to a tracking server: give --tracking-uri "
                               "URI, not -o")  # fmt: skip
    if fmt == "mlflow" and not (tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")):
        raise click.UsageError(
            "--format mlflow needs the tracking server: give --tracking-uri URI "
            "(http://HOST:5000, or a store such as sqlite:///mlflow.db), or set "
            "MLFLOW_TRACKING_URI"
        )
    if fmt == "tensorboard" and out_path is None:
        raise click.UsageError("--format tensorboard writes a folder of event files: give it "
                               "with -o DIR")  # fmt: skip


def export(
    store: Store, sweep: dict[str, Any], fmt: str, out_path: str | None,
    tracking_uri: str | None, experiment: str | None,
) -> None:
    """Export `sweep` in a tracker format (options checked by `check_options`)."""
    total = sum(sweep["counts"].values()) - int(sweep.get("planned") or 0)
    best = store.reads.best(sweep["_id"], 1)
    parent = sweep_run(sweep, best[0] if best else None)
    trials = trial_runs(store.reads, sweep["_id"])
    sweep_id = sweep["_id"]
    if not parent.finished:
        click.echo(f"note: sweep {sweep_id} has trials queued or running: they are exported as "
                   "they stand now", err=True)  # fmt: skip
    if fmt == "tensorboard":
        from cli import export_tensorboard

        export_tensorboard.check_installed()
        root = Path(str(out_path))
        with progress_bar(total, "tensorboard") as advance:
            written = export_tensorboard.export(root, parent, trials, advance)
        click.echo(f"wrote {written:,} trials of sweep {sweep_id} to {root}; see them with "
                   f"tensorboard --logdir {root}", err=True)  # fmt: skip
        return
    from cli import export_mlflow

    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", MLFLOW_RETRIES)
    # Else MLflow prints two links per run ended on standard output, reading each run again.
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    client = export_mlflow.mlflow_client(tracking_uri or os.environ["MLFLOW_TRACKING_URI"])
    from mlflow.exceptions import MlflowException

    name = experiment or parent.name
    try:
        with progress_bar(total, "mlflow") as advance:
            run_id, written = export_mlflow.export(
                client, name, parent, trials, advance, model=lambda t: kept_model(store, t)
            )
    except MlflowException as exc:
        raise click.ClickException(f"MLflow at {client.tracking_uri}: {exc.message}") from exc
    click.echo(f"exported {written:,} trials of sweep {sweep_id} to MLflow experiment {name!r} "
               f"at {client.tracking_uri}: run {run_id}", err=True)  # fmt: skip
