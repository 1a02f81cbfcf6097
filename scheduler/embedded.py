"""The platform on one machine with no servers: the processes `sweepstack run` starts.

- The store: SecantusDB (a MongoDB wire-protocol server) in its own process, with its data in
  ``DATA/db``, unless ``SWEEPSTACK_MONGO_URL`` is set.
- The broker: kombu's filesystem transport (messages are files in ``DATA/broker``), unless
  ``SWEEPSTACK_BROKER_URL`` is set. It needs no server and keeps Celery's code path. What it
  cannot do that RabbitMQ can: a message a worker had taken is gone from the folder, so if
  that worker is killed with ``kill -9`` the broker does not redeliver it (the store still
  has the trial, and ``sweepstack run --resume`` or the stale-heartbeat requeue sends it
  again); no publisher confirms; one machine only; workers poll the folder (every 0.1 s)
  instead of being pushed messages; no management UI.
- N Celery worker processes and the dashboard (gunicorn), with the same settings.

Every child is started with a parent-death signal, so that even a ``kill -9`` of
`sweepstack run` leaves no orphan behind (Linux).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from core.procs import die_with_parent, free_port
from scheduler.gunicorn import gunicorn_argv

log = logging.getLogger(__name__)


def wait_listening(port: int, timeout: float, proc: subprocess.Popen, what: str) -> None:
    """Wait until something accepts connections on 127.0.0.1:port, or fail naming `what`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with status {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {timeout:.0f} s")


class Processes:
    """Child processes started by `sweepstack run`, each logging to ``DATA/logs``."""

    def __init__(self, data_dir: Path) -> None:
        self.logs = data_dir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.children: list[tuple[str, subprocess.Popen]] = []

    def start(
        self, name: str, cmd: list[str], env: dict[str, str], death_signal: int = signal.SIGKILL
    ) -> subprocess.Popen:
        log_file = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
        proc = subprocess.Popen(
            cmd,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent(death_signal),
        )
        log_file.close()
        self.children.append((name, proc))
        return proc

    def check(self) -> None:
        """Raise if a child died on its own."""
        for name, proc in self.children:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{name} exited with status {proc.returncode}; see "
                    f"{self.logs / (name + '.log')}"
                )

    def stop(self, timeout: float = 15.0) -> None:
        """Stop every child and its process group: politely, then by force."""
        for _, proc in reversed(self.children):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for _, proc in self.children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        self.children.clear()


def start_store(procs: Processes, data_dir: Path) -> str:
    """SecantusDB on a free port with its data in ``DATA/db``; returns its URL."""
    port = free_port()
    storage = data_dir / "db"
    storage.mkdir(parents=True, exist_ok=True)
    proc = procs.start(
        "store",
        [
            sys.executable,
            "-m",
            "scheduler.embedded_store",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--storage-path",
            str(storage),
            "--log-level",
            "WARNING",
        ],
        dict(os.environ),
        death_signal=signal.SIGTERM,
    )
    wait_listening(port, 60, proc, "SecantusDB")
    return f"mongodb://127.0.0.1:{port}/?retryWrites=false"


def start_workers(procs: Processes, env: dict[str, str], workers: int, queue: str) -> None:
    """One Celery worker with `workers` training processes, one torch thread each at most."""
    from scheduler.commands import worker_commands

    for cmd, extra in worker_commands(workers, None, "INFO", queue):
        procs.start("worker", cmd, {**env, **extra})


def start_dashboard(procs: Processes, env: dict[str, str], port: int) -> str:
    """The dashboard under gunicorn on 127.0.0.1:port; returns its URL."""
    argv = gunicorn_argv(
        "web.dashboard_wsgi:app",
        "127.0.0.1",
        port,
        workers=1,
        threads=4,
        timeout=60,
        access_log=False,
    )
    proc = procs.start("dashboard", argv, env)
    wait_listening(port, 60, proc, "the dashboard")
    return f"http://127.0.0.1:{port}/"
