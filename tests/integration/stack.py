"""A real stack for integration tests: its own queue on the real RabbitMQ, its own database
on the real MongoDB wire-protocol server, and real `celery worker` processes."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kombu import Connection

from cli.worker import worker_commands
from core.settings import Settings
from core.spec.sweep import load_spec
from core.store.store import Store
from scheduler.enqueue import sender_app
from scheduler.submit import submit_sweep

ROOT = Path(__file__).resolve().parents[2]


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Process:
    """A command in its own process group, logging to a file, up once `ready` is logged."""

    def __init__(
        self, argv: list[str], env: dict[str, str], log_path: Path, ready: str, what: str
    ) -> None:
        self.log_path = log_path
        self.log = open(log_path, "a")  # noqa: SIM115
        self.proc = subprocess.Popen(
            argv,
            env=env,
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for(
            lambda: ready in log_path.read_text() or self.proc.poll() is not None,
            90,
            f"the {what} to be ready",
        )
        if self.proc.poll() is not None:
            raise AssertionError(f"{what} exited: {log_path.read_text()[-3000:]}")

    def kill_all(self) -> None:
        """kill -9 the process and every child: what a power cut does."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        else:  # children of a killed main process may linger
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()


class Scheduler(Process):
    """`sweepstack scheduler` (feeding sweeps, requeueing silent trials) with a lease of
    `lease` seconds; `kill_all` is a power cut (no lease given back, nothing flushed)."""

    def __init__(self, env: dict[str, str], log_path: Path, lease: float = 3) -> None:
        argv = [sys.executable, "-m", "cli.main", "scheduler", "--lease", str(lease)]
        super().__init__(argv, env, log_path, "feeding sweeps every", "scheduler")


class Worker(Process):
    """`celery -A workers.main worker` (the command `sweepstack worker` runs)."""

    def __init__(self, env: dict[str, str], log_path: Path, concurrency: int = 1) -> None:
        # Its thread settings come from `env`.
        ((argv, _),) = worker_commands(concurrency, None, "INFO", env["SWEEPSTACK_QUEUE"])
        argv = [*argv, "--without-gossip", "--hostname", f"test-{uuid.uuid4().hex[:6]}@%h"]
        super().__init__(argv, env, log_path, " ready.", "worker")


class Stack:
    """Settings, a store, a sender, and workers started on demand; `close` removes them."""

    def __init__(self, broker_url: str, mongo_url: str, db_name: str, tmp: Path) -> None:
        self.queue = f"sweepstack.test.{uuid.uuid4().hex[:10]}"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("SWEEPSTACK_")},
            "SWEEPSTACK_BROKER_URL": broker_url,
            "SWEEPSTACK_MONGO_URL": mongo_url,
            "SWEEPSTACK_MONGO_DB": db_name,
            "SWEEPSTACK_QUEUE": self.queue,
            "SWEEPSTACK_HEARTBEAT_SECONDS": "1",
            "SWEEPSTACK_STALE_AFTER_SECONDS": "30",
            "SWEEPSTACK_DATA_DIR": str(tmp / "data"),
            "PYTHONPATH": str(ROOT),
        }
        self.settings = Settings.from_env(self.env)
        self.store = Store.connect(mongo_url, db_name)
        self.store.ensure_indexes()
        self.app = sender_app(self.settings)
        self.tmp = tmp
        self.workers: list[Worker] = []

    def start_worker(self, concurrency: int = 1) -> Worker:
        worker = Worker(self.env, self.tmp / f"worker-{len(self.workers)}.log", concurrency)
        self.workers.append(worker)
        return worker

    def submit(self, text: str) -> tuple[str, int]:
        return submit_sweep(load_spec(text), self.store, self.app)

    def wait_finished(self, sweep_id: str, timeout: float) -> dict[str, int]:
        def done() -> dict[str, int] | None:
            counts = self.store.reads.counts(sweep_id)
            return None if counts.get("queued") or counts.get("running") else counts

        return wait_for(done, timeout, f"sweep {sweep_id} to finish", every=0.5)

    def all_trials(self, sweep_id: str) -> list[dict[str, Any]]:
        """Every trial of the sweep (its page fields), in index order."""
        out: list[dict[str, Any]] = []
        cursor = None
        while True:
            page, cursor = self.store.reads.trials(sweep_id, limit=500, cursor=cursor)
            out.extend(page)
            if not cursor:
                return out

    def queue_depth(self) -> int:
        with Connection(self.settings.broker_url) as conn:
            _, messages, _ = conn.default_channel.queue_declare(self.queue, passive=True)
            return messages

    def logs(self) -> str:
        return "\n".join(w.log_path.read_text()[-4000:] for w in self.workers)

    def close(self) -> None:
        for worker in self.workers:
            worker.stop()
        with Connection(self.settings.broker_url) as conn:
            conn.default_channel.queue_delete(self.queue)
            conn.default_channel.exchange_delete(self.queue)
        self.store.client.drop_database(self.store.db.name)
        self.store.close()
