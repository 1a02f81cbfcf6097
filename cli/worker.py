"""``sweepstack worker``, and the Celery worker command lines it starts (`worker_commands`;
`sweepstack run` starts its workers by them too, `cli.embedded`).

A worker imports torch; this module does not: it starts Celery worker processes
(``celery -A workers.main worker``) that do.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import click
from kombu.exceptions import OperationalError

from cli.options import workers_option
from cli.shared import EXIT_PROBLEM, check_trial_queue, need, read_settings
from core.settings import Settings


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
@workers_option
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

    settings = read_settings()
    need(settings.broker_url, "SWEEPSTACK_BROKER_URL")
    need(settings.mongo_url, "SWEEPSTACK_MONGO_URL")
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
    check_trial_queue(settings)
    procs = [subprocess.Popen(cmd, env={**os.environ, **env}) for cmd, env in commands]

    def forward(signum: int, _frame: object) -> None:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    codes = [proc.wait() for proc in procs]
    sys.exit(max(codes, default=0))
