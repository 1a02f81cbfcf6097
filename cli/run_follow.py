"""How `sweepstack run` follows its sweep to the end, and what it prints then.

`follow` shows a progress bar (trials finished, elapsed time, an ETA from rich's
`TimeRemainingColumn`, the best so far) while it feeds the sweep and requeues stale trials;
`top_table` is the table of the best trials at the end, and `results_note` says where the
results are kept and the commands that reach them after the run (`cli.local`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from cli import embedded
from cli.local import reach_commands
from core.store.records import flatten_params

if TYPE_CHECKING:
    from core.store.store import Store

REQUEUE_EVERY_SECONDS = 5.0
#: How often the progress loop reads the counts: the end of the sweep is seen this soon.
POLL_SECONDS = 0.2
#: How often `run` tries to take the feeding lease of a sweep with planned trials that it
#: does not feed (held by a `sweepstack scheduler`, or by a killed run until it expires).
LEASE_RETRY_SECONDS = 1.0


def results_note(err: Console, sweep_id: str, folder: Path | None, default: Path) -> None:
    """Where the results are kept (`folder`: the data folder of the embedded store; None:
    SWEEPSTACK_MONGO_URL's) and the commands that reach them after this run."""
    if folder is None:
        err.print(f"results: sweep {sweep_id}, in the store of SWEEPSTACK_MONGO_URL")
        return
    err.print(f"results: sweep {sweep_id}, kept in {folder}; reach them with", soft_wrap=True)
    for line in reach_commands(sweep_id, folder, default):
        err.print(f"  {line}", highlight=False, markup=False, soft_wrap=True)


def follow(
    store: Store,
    app: Any,
    procs: embedded.Processes,
    sweep_id: str,
    total: int,
    err: Console,
    stale_after: float,
    max_attempts: int,
    open_feeder: Callable[[], Any] | None = None,
) -> Any:
    """Show progress until no trial is queued or running; feed the sweep and requeue stale
    trials meanwhile. Returns the feeder it ended with (None if none), for its lease.

    `open_feeder` gives the sweep's `scheduler.feed.Feeder`, or None while another process
    holds its feeding lease (a `sweepstack scheduler`, which then feeds it; or a killed
    `run`, whose lease expires): it is called again every `LEASE_RETRY_SECONDS` while the
    sweep has trials left and no feeder here, so a resumed sweep is never left unfed (nor
    its counts unrepaired: `scheduler.feed`).
    Reads the counts every `POLL_SECONDS` (one small read; the feeder's step reads them
    while there is one) and the best trial only when the complete count changed.
    """
    from scheduler.feed import judge_until
    from scheduler.submit import requeue_stale

    metric = store.reads.get_sweep(sweep_id)["objective"]["metric"]
    last_requeue = time.monotonic()
    feeder = open_feeder() if open_feeder is not None else None
    next_open = time.monotonic() + LEASE_RETRY_SECONDS  # the first try was just now
    complete = -1
    best = ""
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[best]}"),
        console=err,
        transient=False,
    ) as progress:
        task = progress.add_task("trials", total=total, best="")
        while True:
            if feeder is not None:
                if not feeder.step():
                    # Finished, cancelled, or its lease lost; or its spec changed (`sweepstack
                    # extend`): a feeder on the new spec goes on at once.
                    changed = feeder.respecified and open_feeder is not None
                    feeder = open_feeder() if changed else None
            elif open_feeder is not None and time.monotonic() >= next_open:
                next_open = time.monotonic() + LEASE_RETRY_SECONDS
                feeder = open_feeder()
            if feeder is not None and feeder.sweep is not None:
                counts = feeder.sweep["counts"]  # as its step just read them
            else:
                counts = store.reads.counts(sweep_id)
            active = counts.get("queued", 0) + counts.get("running", 0)
            if counts.get("complete", 0) != complete:
                complete = counts.get("complete", 0)
                best = best_line(store, sweep_id, metric)
            progress.update(
                task,
                completed=total - active,
                best=best,
                description=f"{counts.get('running', 0)} running, {counts.get('failed', 0)} failed",
            )
            if active == 0:
                return feeder
            procs.check()
            if time.monotonic() - last_requeue > REQUEUE_EVERY_SECONDS:
                requeue_stale(store, app, stale_after, max_attempts)
                last_requeue = time.monotonic()
            judge_until([feeder] if feeder is not None else [], time.monotonic() + POLL_SECONDS)


def _count(value: Any) -> str:
    """A parameter count, or "-" where there is none (a trainable's model is its own)."""
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else "-"


def top_table(store: Store, sweep: dict[str, Any], k: int = 10) -> Table:
    objective = sweep["objective"]
    table = Table(
        title=f"top {k} trials of {sweep['name']} by {objective['metric']} "
        f"({objective['direction']})",
        header_style="bold",
    )
    best = store.reads.best(sweep["_id"], k)
    columns: list[str] = []
    for doc in best:
        for key in flatten_params(doc.get("params", {})):
            if key not in columns:
                columns.append(key)
    table.add_column("#", justify="right")
    table.add_column(objective["metric"], justify="right")
    for column in columns:
        table.add_column(column.split(".", 1)[-1], justify="right")
    table.add_column("params", justify="right")
    table.add_column("seconds", justify="right")
    table.add_column("trial", no_wrap=True)
    for rank, doc in enumerate(best, 1):
        params = flatten_params(doc.get("params", {}))
        value = doc.get("objective")
        table.add_row(
            str(rank),
            f"{value:.4f}" if isinstance(value, float) else "-",
            *(str(params.get(c, "-")) for c in columns),
            _count(doc.get("param_count")),
            f"{doc.get('train_seconds') or 0:.1f}",
            doc["_id"],
        )
    return table


def best_line(store: Store, sweep_id: str, metric: str) -> str:
    best = store.reads.best(sweep_id, 1)
    if not best or not isinstance(best[0].get("objective"), float):
        return "best: -"
    return f"best {metric}: {best[0]['objective']:.4f}"
