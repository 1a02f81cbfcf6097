"""`sweepstack worker` processes sharing a host: real RabbitMQ, the real MongoDB
wire-protocol server, and the real command (which starts real `celery worker` processes)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.integration.stack import ROOT, Stack, wait_for

pytestmark = pytest.mark.integration


class Command:
    """`sweepstack worker ARGS` in its own process group, logging to a file."""

    def __init__(self, stack: Stack, log_path: Path, *args: str) -> None:
        self.log_path = log_path
        self.log = open(log_path, "a")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "worker", *args],
            env=stack.env,
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def text(self) -> str:
        return self.log_path.read_text()

    def wait_ready(self) -> None:
        wait_for(
            lambda: " ready." in self.text() or self.proc.poll() is not None,
            90,
            "the worker to be ready",
        )
        assert self.proc.poll() is None, self.text()[-3000:]

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()


@pytest.fixture
def commands(stack: Stack) -> list[Command]:
    started: list[Command] = []
    yield started
    for command in started:
        command.stop()


def test_two_workers_on_one_host_both_take_trials(stack: Stack, commands: list[Command]) -> None:
    # The documented --workers, and the former --concurrency, which still works.
    for i, args in enumerate((["--workers", "1"], ["--concurrency", "1"])):
        commands.append(Command(stack, stack.tmp / f"sweepstack-worker-{i}.log", *args))
    for command in commands:
        command.wait_ready()
    sweep_id, n = stack.submit(
        f"name: share-{uuid.uuid4().hex[:6]}\ndataset: {{name: digits}}\n"
        "execution: {device: cpu, fuse: off}\n"  # one message per trial
        "objective: {metric: val_accuracy, direction: max}\n"
        "training:\n  epochs: 3\n  seed: {int: [1, 8]}\n"
    )
    counts = stack.wait_finished(sweep_id, timeout=240)
    assert counts["complete"] == n == 8, "\n".join(c.text()[-3000:] for c in commands)
    trials, _ = stack.store.reads.trials(sweep_id, limit=100)
    names = {
        stack.store.reads.get_trial(t["_id"], with_metrics=False)["worker"]["name"] for t in trials
    }
    host = socket.gethostname()
    assert names == {f"cpu-{c.proc.pid}@{host}" for c in commands}
    assert all("ResourceLocked" not in c.text() for c in commands)


def test_a_taken_name_is_one_line_and_exit_2(stack: Stack, commands: list[Command]) -> None:
    name = f"taken-{uuid.uuid4().hex[:6]}"
    first = Command(stack, stack.tmp / "first.log", "--workers", "1", "--name", name)
    commands.append(first)
    first.wait_ready()
    second = subprocess.run(
        [sys.executable, "-m", "cli.main", "worker", "--workers", "1", "--name", name],
        env=stack.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert second.returncode == 2, second.stderr
    assert second.stderr == (
        f"error: worker name {name}@{socket.gethostname()} is taken: a worker of that name is "
        "connected to the broker; choose another with --name\n"
    )
    assert second.stdout == ""
    assert first.proc.poll() is None
