"""The platform on one machine with no servers: the processes `sweepstack run` starts.

- The store: SecantusDB (a MongoDB wire-protocol server) in its own process, with its data in
  ``DATA/db``, unless ``SWEEPSTACK_MONGO_URL`` is set.
- The broker: kombu's filesystem transport (messages are files in ``DATA/broker``), unless
  ``SWEEPSTACK_BROKER_URL`` is set. It needs no server and keeps Celery's code path. What it
  cannot do that RabbitMQ can: a message a worker had taken is gone from the folder, so if
  that worker is killed with ``kill -9`` the broker does not redeliver it (the store still
  has the trial, and ``sweepstack run --resume`` or the stale-heartbeat requeue sends it
  again); no publisher confirms; one machine only; workers poll the folder (every 0.01 s)
  instead of being pushed messages; no management UI.
- N Celery worker processes and the dashboard (gunicorn), with the same settings.

`sweepstack run` starts all of them at once and waits only for what the next step needs
(the store, before the sweep is stored); on a 2-core machine the workers' torch import is
the longest part of start-up. At the end it stops them all at once (`Processes.stop`).

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
from collections.abc import Collection
from pathlib import Path

from cli.gunicorn import gunicorn_argv
from cli.worker import worker_commands
from core.procs import die_with_parent, free_port

log = logging.getLogger(__name__)

#: Seconds a worker or the dashboard has to exit on SIGTERM at the end (`Processes.stop`).
STOP_GRACE_SECONDS = 0.2
#: Seconds the store has to save and close its data on SIGTERM (it takes well under one).
STORE_STOP_GRACE_SECONDS = 20.0


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
    """Child processes started by `sweepstack run`, each logging to ``DATA/logs``.

    Each child has a grace: how long `stop` lets it exit on SIGTERM before SIGKILL.
    """

    def __init__(self, data_dir: Path) -> None:
        self.logs = data_dir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.children: list[tuple[str, subprocess.Popen, float]] = []

    def start(
        self,
        name: str,
        cmd: list[str],
        env: dict[str, str],
        death_signal: int = signal.SIGKILL,
        grace: float = STOP_GRACE_SECONDS,
        pass_fds: tuple[int, ...] = (),
        nice: int = 0,
    ) -> subprocess.Popen:
        """Start `cmd` in a session of its own, logging to ``DATA/logs/NAME.log``; it gets
        no descriptor of ours but `pass_fds` (the data folder's lock, for the store), and
        runs `nice` steps below our CPU priority."""
        log_file = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
        proc = subprocess.Popen(
            cmd,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent(death_signal, nice),
            pass_fds=pass_fds,
        )
        log_file.close()
        self.children.append((name, proc, grace))
        return proc

    def check(self) -> None:
        """Raise if a child died on its own."""
        for name, proc, _ in self.children:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{name} exited with status {proc.returncode}; see "
                    f"{self.logs / (name + '.log')}"
                )

    def stop(self, at_once: Collection[str] = ()) -> None:
        """Stop every child and its process group: SIGTERM to all at once, SIGKILL after its grace.

        Workers and the dashboard hold nothing that is not already in the store (a trial
        cut short stays ``running`` and is requeued by ``--resume``), so they get a short
        grace; the store gets a long one, to close its data files cleanly. The children
        named in `at_once` get none (`sweepstack run` once its sweep has ended: no trial
        runs, a worker's warm shut-down took 0.2 s of a 7 s run and saved nothing).
        """
        started = time.monotonic()
        for name, proc, _ in self.children:
            if proc.poll() is None:
                now = signal.SIGKILL if name in at_once else signal.SIGTERM
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, now)
        for name, proc, grace in self.children:
            try:
                proc.wait(max(0.0, started + grace - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.info("%s did not exit within %.1f s of SIGTERM; killing it", name, grace)
            # The group too: a worker's pool processes, gunicorn's workers.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            log.debug("%s stopped %.2f s after SIGTERM", name, time.monotonic() - started)
        self.children.clear()


class Service:
    """A server child that `sweepstack run` started without waiting for it to listen."""

    def __init__(self, what: str, proc: subprocess.Popen, port: int, url: str) -> None:
        self.what = what
        self.proc = proc
        self.port = port
        self.url = url

    def wait(self, timeout: float = 60.0) -> str:
        """Wait until it listens (or fail naming it); return its URL."""
        wait_listening(self.port, timeout, self.proc, self.what)
        return self.url


def start_store(procs: Processes, data_dir: Path, keep_fds: tuple[int, ...] = ()) -> Service:
    """SecantusDB on a free port with its data in ``DATA/db``; `Service.wait` for its URL.

    `keep_fds` stay open in it: the data folder's lock (`cli.datafolder`), so that
    the folder stays held until this store has exited, even after a ``kill -9`` of its parent.
    """
    port = free_port()
    storage = data_dir / "db"
    storage.mkdir(parents=True, exist_ok=True)
    proc = procs.start(
        "store",
        [
            sys.executable,
            "-m",
            "cli.embedded_store",
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
        grace=STORE_STOP_GRACE_SECONDS,
        pass_fds=keep_fds,
    )
    return Service("SecantusDB", proc, port, f"mongodb://127.0.0.1:{port}/?retryWrites=false")


#: Off in the embedded worker: gossip and mingle talk to other workers (there are none) and
#: Celery's worker heartbeat events feed monitors (the store has its own heartbeats).
#: How far below the workers' CPU priority the dashboard of `sweepstack run` runs.
DASHBOARD_NICE = 10
EMBEDDED_WORKER_FLAGS = ("--without-gossip", "--without-mingle", "--without-heartbeat")


def start_workers(
    procs: Processes, env: dict[str, str], workers: int, queue: str, threads: int | None = None
) -> None:
    """One Celery worker with `workers` training processes, each with `threads` torch
    threads (None: the cores shared out, one each at least).

    It needs neither the store nor the broker to boot (the store is first used by a task,
    the broker is retried), so it starts at once, alongside the store.
    """
    for cmd, extra in worker_commands(workers, None, "INFO", queue, threads=threads):
        flags = [flag for flag in EMBEDDED_WORKER_FLAGS if flag not in cmd]
        procs.start("worker", [*cmd, *flags], {**env, **extra})


def port_free(port: int) -> bool:
    """Whether nothing listens on 127.0.0.1:port (so a server can bind it)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server will
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def start_dashboard(procs: Processes, env: dict[str, str], port: int) -> Service:
    """The dashboard under gunicorn on 127.0.0.1:port; `Service.wait` for its URL.

    It runs at `DASHBOARD_NICE` below the workers: its start (Flask, plotly) took CPU from
    the workers' own start on 2 cores, 2 s of a 12-trial run, and a page it serves can
    wait a moment where a trial would not.
    """
    argv = gunicorn_argv(
        "cli.dashboard_wsgi:app",
        "127.0.0.1",
        port,
        workers=1,
        threads=4,
        timeout=60,
        access_log=False,
    )
    proc = procs.start("dashboard", argv, env, nice=DASHBOARD_NICE)
    return Service("the dashboard", proc, port, f"http://127.0.0.1:{port}/")
