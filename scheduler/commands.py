"""CLI commands that talk to the broker and store: submit, status, worker, scheduler.

None of them imports torch: `worker` starts Celery worker processes that do.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from typing import Any

import click
from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from core.errors import NotFound, SpecError, SweepstackError
from core.records import flatten_params
from core.settings import Settings
from core.states import TERMINAL_STATES, TrialState
from core.store import Store

log = logging.getLogger(__name__)
STATE_COLOURS = {
    "queued": "grey62",
    "running": "blue",
    "complete": "green",
    "failed": "red",
    "pruned": "yellow",
    "cancelled": "magenta",
}


def _settings() -> Settings:
    try:
        return Settings.from_env()
    except SweepstackError as exc:
        raise click.UsageError(str(exc)) from exc


def _need(value: str | None, variable: str) -> str:
    if not value:
        raise click.UsageError(
            f"{variable} is not set; point it at your "
            f"{'RabbitMQ' if 'BROKER' in variable else 'MongoDB'}"
        )
    return value


def _store(settings: Settings) -> Store:
    store = Store.connect(_need(settings.mongo_url, "SWEEPSTACK_MONGO_URL"), settings.mongo_db)
    store.ensure_indexes()
    return store


@click.command()
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help='Print {"sweep_id": ..., "trials": N}.')
def submit(spec: str, as_json: bool) -> None:
    """Store a sweep and enqueue its trials (needs SWEEPSTACK_BROKER_URL and _MONGO_URL)."""
    from scheduler.cli import _fail_spec, _load
    from scheduler.enqueue import sender_app
    from scheduler.submit import submit_sweep

    settings = _settings()
    loaded = _load(spec)
    _need(settings.broker_url, "SWEEPSTACK_BROKER_URL")
    store = _store(settings)
    try:
        sweep_id, count = submit_sweep(loaded, store, sender_app(settings))
    except SpecError as exc:
        _fail_spec(exc)
        return
    if as_json:
        click.echo(json.dumps({"sweep_id": sweep_id, "trials": count}))
    else:
        click.echo(f"submitted sweep {sweep_id}: {count:,} trials queued")
        click.echo(f"follow it with: sweepstack status {sweep_id} --watch")


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
def status(sweep_id: str, watch: bool, interval: float, as_json: bool) -> None:
    """Counts by state, progress and the best trial so far of a sweep."""
    store = _store(_settings())
    try:
        sweep = store.get_sweep(sweep_id)
    except NotFound as exc:
        raise click.ClickException(f"no sweep {sweep_id}") from exc

    def snapshot() -> tuple[dict[str, int], dict[str, Any] | None]:
        counts = store.counts(sweep_id)
        best = store.best(sweep_id, 1)
        return counts, (best[0] if best else None)

    def finished(counts: dict[str, int]) -> bool:
        active = counts.get("queued", 0) + counts.get("running", 0)
        return active == 0

    counts, best = snapshot()
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


def _gpu_list(gpus: str) -> list[str]:
    if gpus == "all":
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=False,
        )
        found = [line.strip() for line in out.stdout.splitlines() if line.strip()]
        if not found:
            raise click.UsageError("--gpus all: nvidia-smi lists no GPU on this host")
        return found
    items = [g.strip() for g in gpus.split(",") if g.strip()]
    if not items or not all(g.isdigit() for g in items):
        raise click.BadParameter(
            f"must be all or a comma-separated list of GPU indices, got {gpus!r}",
            param_hint="--gpus",
        )
    return items


def usable_cores() -> int:
    """Cores this process may run on: its CPU affinity (cpusets, `docker --cpuset-cpus`)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:
        return os.cpu_count() or 1


def worker_commands(
    concurrency: int, gpus: str | None, loglevel: str, queue: str
) -> list[tuple[list[str], dict[str, str]]]:
    """The Celery worker processes to start: one per GPU, or one with N CPU children."""
    base = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "workers.main",
        "worker",
        "-Q",
        queue,
        "--loglevel",
        loglevel,
        "--pool",
        "prefork",
        "--without-mingle",
    ]
    cores = usable_cores()
    if gpus:
        out = []
        for gpu in _gpu_list(gpus):
            env = {"CUDA_VISIBLE_DEVICES": gpu, "SWEEPSTACK_TORCH_THREADS": "1"}
            out.append(([*base, "--concurrency", "1", "--hostname", f"gpu{gpu}@%h"], env))
        return out
    threads = os.environ.get("SWEEPSTACK_TORCH_THREADS") or str(max(1, cores // concurrency))
    return [
        (
            [*base, "--concurrency", str(concurrency), "--hostname", "cpu@%h"],
            {"SWEEPSTACK_TORCH_THREADS": threads, "OMP_NUM_THREADS": threads},
        )
    ]


@click.command()
@click.option(
    "--concurrency",
    "-c",
    type=click.IntRange(min=1),
    default=None,
    help="CPU worker processes [default: the number of cores].",
)
@click.option("--gpus", default=None, help="all, or GPU indices like 0,1: one process per GPU.")
@click.option("--loglevel", default="INFO", show_default=True)
def worker(concurrency: int | None, gpus: str | None, loglevel: str) -> None:
    """Start Celery workers that train trials (torch threads x processes <= cores)."""
    settings = _settings()
    _need(settings.broker_url, "SWEEPSTACK_BROKER_URL")
    _need(settings.mongo_url, "SWEEPSTACK_MONGO_URL")
    concurrency = concurrency or usable_cores()
    procs = [
        subprocess.Popen(cmd, env={**os.environ, **env})
        for cmd, env in worker_commands(concurrency, gpus, loglevel, settings.queue)
    ]

    def forward(signum: int, _frame: object) -> None:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    codes = [proc.wait() for proc in procs]
    sys.exit(max(codes, default=0))


@click.command()
@click.option(
    "--interval",
    type=click.FloatRange(min=0.5),
    default=None,
    help="Seconds between checks [default: half of SWEEPSTACK_STALE_AFTER_SECONDS].",
)
@click.option("--once", is_flag=True, help="Check once and exit.")
def scheduler(interval: float | None, once: bool) -> None:
    """Requeue trials whose worker stopped sending heartbeats."""
    from scheduler.enqueue import sender_app
    from scheduler.submit import requeue_stale

    settings = _settings()
    _need(settings.broker_url, "SWEEPSTACK_BROKER_URL")
    store = _store(settings)
    app = sender_app(settings)
    every = interval or settings.stale_after_seconds / 2
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(message)s")
    log.info(
        "requeueing trials silent for %.0f s, checking every %.1f s",
        settings.stale_after_seconds,
        every,
    )
    while True:
        try:
            ids = requeue_stale(store, app, settings.stale_after_seconds, settings.max_attempts)
            if once:
                click.echo(f"requeued {len(ids)} stale trials")
                return
        except SweepstackError as exc:
            log.warning("requeue check failed: %s", exc)
        time.sleep(every)
