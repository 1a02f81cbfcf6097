"""Poison trials: a trial whose worker process dies every time it trains it ends `failed`
after `SWEEPSTACK_MAX_ATTEMPTS` lost attempts, and the queue flows on.

Real RabbitMQ, the real MongoDB wire-protocol server and a real `celery worker`. The test
plays the kernel's out-of-memory killer: each time a pool process starts the trial, it is
killed with SIGKILL, as a trial that allocates more than the host has would be.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator

import pytest

from core.broker import TASK_NAME
from tests.integration.stack import Scheduler, Stack, wait_for

pytestmark = pytest.mark.integration


def _spec(name: str, body: str) -> str:
    return (
        f"name: {name}-{uuid.uuid4().hex[:6]}\ndataset: {{name: digits}}\n"
        f"execution: {{device: cpu}}\nobjective: {{metric: val_accuracy, direction: max}}\n{body}"
    )


@pytest.fixture
def scheduler(stack: Stack) -> Iterator[Scheduler]:
    """A `sweepstack scheduler`, as a deployment runs one: the worker takes a killed
    attempt's trial over at once when its message comes back; should that message not
    come back, the scheduler requeues the trial once its heartbeats are 30 s old. Either
    way the lost attempt counts once."""
    stack.env["SWEEPSTACK_MAX_ATTEMPTS"] = "3"
    running = Scheduler(stack.env, stack.tmp / "scheduler.log")
    yield running
    running.stop()


def test_a_trial_killed_on_every_attempt_fails_after_max_attempts(
    stack: Stack, scheduler: Scheduler
) -> None:
    stack.start_worker()
    poison, _ = stack.submit(
        _spec("poison", "training:\n  epochs: 500\nmodel: {hidden_layers: 2, hidden_units: 64}\n")
    )
    behind, n_behind = stack.submit(_spec("behind", "training:\n  epochs: 1\n  seed: [1, 2, 3]\n"))
    (doc,), _ = stack.store.reads.trials(poison)
    tid = doc["_id"]
    pids = []
    for attempt in (1, 2, 3):

        def holder(attempt: int = attempt) -> int | None:
            trial = stack.store.reads.get_trial(tid, with_metrics=False)
            if trial["state"] == "running" and trial["attempt"] == attempt:
                return trial["worker"]["pid"]
            return None

        pid = wait_for(holder, 120, f"attempt {attempt} of the poison trial to start")
        pids.append(pid)
        os.kill(pid, signal.SIGKILL)
    try:
        counts = stack.wait_finished(poison, timeout=120)
    except AssertionError as exc:
        trial = stack.store.reads.get_trial(tid, with_metrics=False)
        logs = f"{stack.logs()}\n--- the scheduler's log:\n{scheduler.log_path.read_text()}"
        raise AssertionError(f"{exc}; the trial: {trial}; the worker's log:\n{logs}") from exc
    assert counts["failed"] == 1, stack.logs()
    trial = stack.store.reads.get_trial(tid, with_metrics=False)
    assert trial["attempt"] == 3 and trial["lost_attempts"] == 3
    host = trial["worker"]["host"]
    assert trial["error"].startswith(
        f"its worker died 3 times: attempt 3 (host {host}, pid {pids[2]}"
    )
    assert [h["state"] for h in trial["history"]] == ["lost", "lost", "lost"]
    assert [h["worker"]["pid"] for h in trial["history"]] == pids
    # The queue flows on: the trials behind it complete.
    assert stack.wait_finished(behind, timeout=180)["complete"] == n_behind, stack.logs()
    # A redelivered (or resent) message for the failed trial is acked and does nothing.
    wait_for(lambda: stack.queue_depth() == 0, 30, "the queue to empty")
    before = stack.store.reads.get_trial(tid)
    stack.app.send_task(TASK_NAME, args=[tid])
    wait_for(lambda: stack.queue_depth() == 0, 30, "the resent message to be taken")
    wait_for(
        lambda: f"trial {tid}: nothing to do" in stack.logs(), 30, "the resent message handled"
    )
    assert stack.store.reads.get_trial(tid) == before
    # A user's retry gives it max_attempts again.
    assert stack.store.admin.retry_failed(poison) == [tid]
    assert stack.store.reads.get_trial(tid, with_metrics=False)["lost_attempts"] == 0
