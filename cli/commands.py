"""CLI commands that talk to the broker and store: submit, worker, scheduler (and `_store`,
the store every command reads: `cli.results` has status, ls, export).

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

import click
from kombu.exceptions import OperationalError

from core.errors import SpecError, SweepstackError
from core.settings import Settings
from core.store.store import Store

log = logging.getLogger(__name__)
#: How often `sweepstack scheduler` feeds its sweeps, and asks how many workers are online.
FEED_SECONDS = 0.5
WORKERS_EVERY_SECONDS = 60.0
#: Where `_store` leaves the `cli.local.Reached` of a data folder, in ``ctx.meta``.
LOCAL_KEY = "sweepstack.local"


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
    """The store of ``SWEEPSTACK_MONGO_URL``; unset, that of the data folder
    (``settings.data_dir``), started for this command and stopped when it ends
    (`cli.local`; what was reached is in ``ctx.meta[LOCAL_KEY]``)."""
    if not settings.mongo_url:
        from cli.local import local_store

        ctx = click.get_current_context()
        command = ctx.info_name or "sweepstack"
        reached = ctx.with_resource(local_store(settings.data_dir, command, settings.mongo_db))
        ctx.meta[LOCAL_KEY] = reached
        return reached.store
    store = Store.connect(settings.mongo_url, settings.mongo_db)
    store.ensure_indexes()
    return store


@click.command()
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help='Print {"sweep_id": ..., "trials": N}.')
@click.option(
    "-q", "--quiet", is_flag=True, help="Print only the sweep id: ID=$(sweepstack submit -q SPEC)."
)
def submit(spec: str, as_json: bool, quiet: bool) -> None:
    """Store a sweep and enqueue its trials (needs SWEEPSTACK_BROKER_URL and _MONGO_URL)."""
    from cli.main import _fail_spec, _load
    from scheduler.enqueue import sender_app
    from scheduler.submit import submit_sweep

    settings = _settings()
    loaded = _load(spec)
    _need(settings.broker_url, "SWEEPSTACK_BROKER_URL")
    _need(settings.mongo_url, "SWEEPSTACK_MONGO_URL")
    store = _store(settings)
    try:
        sweep_id, count = submit_sweep(
            loaded, store, sender_app(settings), window=settings.feed_window
        )
    except SpecError as exc:
        _fail_spec(exc)
        return
    if as_json:
        click.echo(json.dumps({"sweep_id": sweep_id, "trials": count}))
    elif quiet:
        click.echo(sweep_id)
    else:
        click.echo(f"submitted sweep {sweep_id}: {count:,} trials queued")
        from cli.local import program  # cli.local imports this module's users

        click.echo(f"follow it with: {program()} status {sweep_id} --watch")


def _gpu_list(gpus: str) -> list[str]:
    if gpus == "all":
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                check=False,
            )
        except OSError as exc:  # not installed (no NVIDIA driver), or not runnable
            raise click.UsageError(
                f"--gpus all: cannot run nvidia-smi ({exc.strerror or exc}) to list the GPUs; "
                "install the NVIDIA driver, give GPU indices (--gpus 0,1), or leave --gpus "
                "out to train on the CPU"
            ) from exc
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


def node_names(
    gpus: list[str] | None, name: str | None = None, pid: int | None = None
) -> list[str]:
    """Celery node names of the processes `sweepstack worker` starts (``%h``: the host name).

    By default unique on a host, so that workers can share it: ``cpu-<pid>@%h`` for the CPU
    worker and ``gpu<N>-<pid>@%h`` for the process of GPU N, where pid is that of the
    `sweepstack worker` command. `name` (``--name``) replaces the default; ``@%h`` is added
    when it names no host, and ``-gpu<N>`` to its part before ``@`` for each GPU.
    """
    pid = os.getpid() if pid is None else pid
    if name is None:
        if gpus is None:
            return [f"cpu-{pid}@%h"]
        return [f"gpu{gpu}-{pid}@%h" for gpu in gpus]
    base, at, host = name.partition("@")
    host = host if at else "%h"
    if gpus is None:
        return [f"{base}@{host}"]
    return [f"{base}-gpu{gpu}@{host}" for gpu in gpus]


def worker_commands(
    workers: int,
    gpus: str | None,
    loglevel: str,
    queue: str,
    *,
    name: str | None = None,
    threads: int | None = None,
) -> list[tuple[list[str], dict[str, str]]]:
    """The Celery worker processes to start: one per GPU, or one with N CPU children, each
    with its node name (`node_names`) and its torch threads: `threads` (the settings'
    ``torch_threads``) when given, else the usable cores shared out (one per GPU process)."""
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
        indices = _gpu_list(gpus)
        out = []
        for gpu, node in zip(indices, node_names(indices, name), strict=True):
            env = {"CUDA_VISIBLE_DEVICES": gpu, "SWEEPSTACK_TORCH_THREADS": "1"}
            out.append(([*base, "--concurrency", "1", "--hostname", node], env))
        return out
    each = str(threads or max(1, cores // workers))
    (node,) = node_names(None, name)
    return [
        (
            [*base, "--concurrency", str(workers), "--hostname", node],
            {"SWEEPSTACK_TORCH_THREADS": each, "OMP_NUM_THREADS": each},
        )
    ]


def taken_names(settings: Settings, names: list[str]) -> list[str]:
    """Those of the node names (``%h`` expanded) that a worker connected to the broker holds.

    A Celery worker holds its name by its control queue (``NAME.celery.pidbox``), which is
    exclusive to its connection: a passive declare of it from another connection is refused
    with RESOURCE_LOCKED while that worker lives, and finds no queue once it is gone. The
    embedded broker (``sweepstack run``) has no such queues; nothing is taken there.
    """
    import amqp.exceptions

    from scheduler.enqueue import sender_app

    if not settings.broker_url or not settings.broker_url.startswith(("amqp", "pyamqp")):
        return []
    app = sender_app(settings)
    taken = []
    with app.connection_for_write(connect_timeout=5) as conn:
        conn.ensure_connection(max_retries=1)
        for name in names:
            queue = app.control.mailbox.get_queue(name)
            channel = conn.channel()
            try:
                channel.queue_declare(queue=queue.name, passive=True)
            except amqp.exceptions.ResourceLocked:
                taken.append(name)
                continue
            except amqp.exceptions.NotFound:
                continue
            channel.close()
    return taken


@click.command()
@click.option(
    "--workers",
    "-w",
    type=click.IntRange(min=1),
    default=None,
    help="CPU training processes [default: the number of cores].",
)
@click.option(
    "--concurrency",
    "-c",
    "old_workers",
    type=click.IntRange(min=1),
    default=None,
    hidden=True,
    help="The former name of --workers.",
)
@click.option("--gpus", default=None, help="all, or GPU indices like 0,1: one process per GPU.")
@click.option(
    "--name",
    default=None,
    metavar="NAME[@HOST]",
    help="Celery node name [default: cpu-PID@HOST, gpuN-PID@HOST]; %h is the host name. "
    "With --gpus, -gpuN is added to each.",
)
@click.option("--loglevel", default="INFO", show_default=True)
def worker(
    workers: int | None,
    old_workers: int | None,
    gpus: str | None,
    name: str | None,
    loglevel: str,
) -> None:
    """Start Celery workers that train trials (torch threads x processes <= cores).

    Several may run on one host: each has a node name of its own.
    """
    from celery.utils.nodenames import host_format

    from cli.main import EXIT_PROBLEM

    settings = _settings()
    _need(settings.broker_url, "SWEEPSTACK_BROKER_URL")
    _need(settings.mongo_url, "SWEEPSTACK_MONGO_URL")
    if workers and old_workers and workers != old_workers:
        raise click.UsageError(f"--workers {workers} and --concurrency {old_workers} disagree")
    if name is not None and (not name.partition("@")[0] or any(c.isspace() for c in name)):
        raise click.BadParameter(f"must be NAME or NAME@HOST, got {name!r}", param_hint="--name")
    workers = workers or old_workers or usable_cores()
    commands = worker_commands(
        workers, gpus, loglevel, settings.queue, name=name, threads=settings.torch_threads
    )
    names = [host_format(cmd[cmd.index("--hostname") + 1]) for cmd, _ in commands]
    try:
        taken = taken_names(settings, names)
    except (OSError, OperationalError) as exc:  # Celery waits for it, as it did before
        click.echo(f"warning: cannot ask the broker whether {names[0]} is free: {exc}", err=True)
        taken = []
    if taken:
        click.echo(
            f"error: worker name {', '.join(taken)} is taken: a worker of that name is "
            "connected to the broker; choose another with --name",
            err=True,
        )
        sys.exit(EXIT_PROBLEM)
    procs = [subprocess.Popen(cmd, env={**os.environ, **env}) for cmd, env in commands]

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
@click.option(
    "--lease",
    "lease_seconds",
    type=click.FloatRange(min=1.0),
    default=30.0,
    show_default=True,
    help="Seconds a sweep's feeding lease lasts unrenewed (another scheduler then takes over).",
)
def scheduler(interval: float | None, once: bool, lease_seconds: float) -> None:
    """Feed every unfinished sweep (ask, store and enqueue its next trials, tell results,
    decide pruning) and requeue trials whose worker stopped sending heartbeats."""
    from scheduler.enqueue import sender_app
    from scheduler.feeders import Feeders, workers_online
    from scheduler.submit import requeue_stale

    settings = _settings()
    _need(settings.broker_url, "SWEEPSTACK_BROKER_URL")
    _need(settings.mongo_url, "SWEEPSTACK_MONGO_URL")
    store = _store(settings)
    app = sender_app(settings)
    every = interval or settings.stale_after_seconds / 2
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(message)s")
    log.info(
        "feeding sweeps every %.1f s; requeueing trials silent for %.0f s every %.1f s",
        FEED_SECONDS,
        settings.stale_after_seconds,
        every,
    )
    feeders = Feeders(store, app, lease_seconds=lease_seconds, big_window=settings.feed_window)
    last_requeue = last_workers = -float("inf")
    try:
        while True:
            now = time.monotonic()
            try:
                if now - last_workers > WORKERS_EVERY_SECONDS:
                    feeders.set_workers(workers_online(app))
                    last_workers = now
                feeders.step()
                if once or now - last_requeue >= every:
                    ids = requeue_stale(
                        store, app, settings.stale_after_seconds, settings.max_attempts
                    )
                    last_requeue = now
                    if once:
                        click.echo(f"requeued {len(ids)} stale trials")
                        return
            except SweepstackError as exc:
                log.warning("scheduler pass failed: %s", exc)
            time.sleep(min(FEED_SECONDS, every))
    finally:
        feeders.close()
