"""The Celery app of the workers, and what each worker process sets up once.

`create_worker_app(settings)` builds the app from the shared config (`core.broker`),
registers `workers.run_trial` and `workers.run_group` (`workers.tasks`) bound to a
`workers.context.WorkerContext`, loads torch and the training code before the pool forks,
gives each pool process `torch_threads` threads, and answers only the remote-control
commands that change nothing of the work (`restrict_remote_control`), and on SIGTERM hands
its trials back within the shutdown grace (`workers.shutdown`). `workers.main` is
the entry point that reads the settings.
"""

from __future__ import annotations

import logging
import os
import time

from celery import Celery
from celery.signals import worker_process_init

from core.broker import celery_config
from core.settings import Settings
from workers.context import WorkerContext
from workers.shutdown import install_main
from workers.tasks import register

log = logging.getLogger(__name__)


def set_torch_threads(threads: int) -> None:
    """One torch thread per process unless told otherwise: 2 x 2 on 2 cores ran 7x slower."""
    import torch

    torch.set_num_threads(threads)


def preload_training() -> None:
    """Import torch and the training code once, in the parent, before the pool forks.

    Each pool process then starts with them already loaded (copy-on-write), instead of
    spending seconds importing them, which it used to do again after every crash.

    `torch._dynamo` (about 1.4 s on a CPU core) is not loaded here: every `torch.optim`
    optimiser imports it when it is built, so each pool process pays it with its first
    trial trained alone (the processes side by side, on their own cores), and a fused group
    with a constant learning rate, which builds none (`workers.training.fused_optim`),
    never does.
    """
    started = time.perf_counter()
    import workers.training  # noqa: F401  (torch and the training code)

    log.info("training code loaded in %.2fs", time.perf_counter() - started)


#: The remote-control commands a worker answers: every read-only inspection (Flower, the
#: Workers page, ``celery inspect``), and the few control commands that change nothing of
#: the work (events for Flower; the hello, heartbeat and election of workers meeting).
#: Shutting a worker down, restarting or resizing its pool, revoking tasks, changing its
#: queues or limits are refused (an error reply, the command unknown): any client of the
#: broker may send a command, and the platform stops workers with signals and cancels
#: trials in the store.
CONTROL_ALLOWED = frozenset({"enable_events", "disable_events", "heartbeat", "election"})


def restrict_remote_control() -> list[str]:
    """Drop every control command of Celery's registry but `CONTROL_ALLOWED` and the
    inspections, in this (worker) process; the names dropped."""
    from celery.worker.control import Panel

    dropped = [
        name for name, meta in Panel.meta.items()
        if meta.type != "inspect" and name not in CONTROL_ALLOWED
    ]  # fmt: skip
    for name in dropped:
        Panel.data.pop(name, None)
        Panel.meta.pop(name, None)
    return dropped


def create_worker_app(settings: Settings) -> Celery:
    """The workers' Celery app, with its tasks registered and the training code loaded."""
    app = Celery("sweepstack", set_as_current=True)
    app.conf.update(celery_config(settings))
    context = WorkerContext(settings)
    register(app, context)
    restrict_remote_control()
    install_main(settings.shutdown_grace_seconds)
    # OpenMP reads this when torch loads, which is here, in the parent, before the fork.
    threads = settings.torch_threads or 1
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    preload_training()

    @worker_process_init.connect(weak=False)
    def _init_process(**_: object) -> None:
        set_torch_threads(threads)

    return app
