"""Scale-down on real RabbitMQ, a real MongoDB wire-protocol server and real Celery workers
(#33, `workers.shutdown`).

A worker sent SIGTERM mid-trial (what ``docker compose stop`` and a Kubernetes scale-down
send) exits within ``SWEEPSTACK_SHUTDOWN_GRACE_SECONDS``; its trial, checkpointed at the
epoch it was in and put back in the queue, completes on the other worker, resumed from that
checkpoint: no epoch lost or written twice, no attempt counted lost, and its metrics equal an
uninterrupted run's to 1e-6. No scheduler runs here, so no stale-heartbeat scan can be what
requeued it. About 25 s.

A fused group stopped so hands back each unfinished member; the group's message goes back
to the queue and the other worker trains them on from their checkpoints, each ending once
with its curve whole. About 30 s.

A task that never stops (a training function that never asks ``should_stop``) is ended at
5 s of the 10 s grace (Celery's cold shutdown, `workers.shutdown.escalate_after`): the
worker still exits within the grace, the message goes back to the queue and the other
worker on this host takes the trial over at once (its holder's process is gone). About
35 s.
"""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest
import torch

from core.spec.config import TrialConfig
from tests import trainables
from tests.integration.stack import Stack, Worker, wait_for
from workers.training import train

pytestmark = pytest.mark.integration

EPOCHS = 16
GRACE = 10.0


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])


def _training(stack: Stack, sweep_id: str, epoch: int) -> dict:
    """The sweep's running trial once it has reported `epoch`."""

    def there() -> dict | None:
        counts = stack.store.reads.counts(sweep_id)
        assert not any(counts.get(s) for s in ("complete", "failed")), stack.logs()
        running, _ = stack.store.reads.trials(sweep_id, state="running")
        for doc in running:
            if int((doc.get("progress") or {}).get("epoch", 0)) >= epoch:
                return doc
        return None

    return wait_for(there, 120, f"a trial at epoch {epoch}", every=0.05)


def test_sigterm_mid_trial_hands_the_trial_to_another_worker(stack: Stack) -> None:
    stack.env["SWEEPSTACK_SHUTDOWN_GRACE_SECONDS"] = str(GRACE)
    workers = [stack.start_worker(), stack.start_worker()]
    sweep_id, count = stack.submit(
        f"name: scale-down-{uuid.uuid4().hex[:6]}\n"
        "dataset: {name: synthetic_classification, samples: 4000, features: 20, classes: 4}\n"
        "objective: {metric: val_accuracy, direction: max}\n"
        "model: {hidden_units: 256, hidden_layers: 2}\n"
        f"training: {{optimizer: adam, lr: 0.001, epochs: {EPOCHS}, batch_size: 8, seed: 3,"
        " lr_schedule: step, lr_step_size: 4, lr_gamma: 0.7}\n"
        "execution: {device: cpu, fuse: off}\n"
        # No checkpoint falls due by the policy before the end: the one resumed from is the
        # one the shutdown saved.
        "artifacts: {keep: best, checkpoint_seconds: 3600}\n"
    )
    assert count == 1
    doc = _training(stack, sweep_id, 2)
    (leaving,) = [w for w in workers if w.proc.pid == _parent(doc["worker"]["pid"])]
    (staying,) = [w for w in workers if w is not leaving]
    signalled_at = time.monotonic()
    leaving.proc.send_signal(signal.SIGTERM)  # the main process only, as compose does
    leaving.proc.wait(GRACE + 20)
    took = time.monotonic() - signalled_at
    assert took <= GRACE, f"exited {took:.1f} s after SIGTERM\n{leaving.log_path.read_text()}"
    assert leaving.proc.returncode == 0, leaving.log_path.read_text()[-3000:]

    counts = stack.wait_finished(sweep_id, timeout=120)
    assert counts["complete"] == 1, stack.logs()
    full = stack.store.reads.get_trial(doc["_id"])
    assert [h["state"] for h in full["history"]] == ["handed_back", "complete"], full["history"]
    assert full.get("lost_attempts", 0) == 0 and full["attempt"] == 2
    assert _parent(full["worker"]["pid"]) == staying.proc.pid
    (resumed,) = full["resumed"]
    assert (resumed["attempt"], resumed["from_attempt"]) == (2, 1)
    assert 2 <= resumed["epoch"] < EPOCHS
    rows = sorted(
        (row["attempt"], row["epoch"])
        for row in stack.store.db["metrics"].find({"trial_id": doc["_id"]})
    )
    assert rows == [(2, epoch) for epoch in range(1, EPOCHS + 1)]  # none lost, none twice
    assert stack.store.artifacts.find(doc["_id"], "checkpoint", "last") is None

    torch.set_num_threads(1)
    alone = train(TrialConfig.model_validate(full["config"]))
    final = [m for m in full["metrics"] if m["attempt"] == 2]
    for row, expected in zip(final, alone.metrics, strict=True):
        for key in ("train_loss", "val_loss", "val_accuracy", "lr"):
            assert row["metrics"][key] == pytest.approx(expected[key], rel=1e-6, abs=1e-9), key


def test_an_idle_worker_exits_at_once_on_sigterm(stack: Stack) -> None:
    stack.env["SWEEPSTACK_SHUTDOWN_GRACE_SECONDS"] = str(GRACE)
    worker: Worker = stack.start_worker()
    signalled_at = time.monotonic()
    os.kill(worker.proc.pid, signal.SIGTERM)
    worker.proc.wait(GRACE + 20)
    assert time.monotonic() - signalled_at <= GRACE, worker.log_path.read_text()
    assert worker.proc.returncode == 0


def test_a_trial_that_never_stops_is_ended_within_the_grace(stack: Stack) -> None:
    site = trainables.install(stack.tmp / "site")
    stack.env["PYTHONPATH"] = os.pathsep.join([stack.env["PYTHONPATH"], str(site)])
    stack.env["SWEEPSTACK_SHUTDOWN_GRACE_SECONDS"] = str(GRACE)
    workers = [stack.start_worker(), stack.start_worker()]
    sweep_id, _ = stack.submit(
        f"name: never-stops-{uuid.uuid4().hex[:6]}\ntrainable: test_ignores_stop\n"
        "execution: {device: cpu, time_limit: 15}\n"
        "objective: {metric: val_loss, direction: min}\n"
    )
    doc = _training(stack, sweep_id, 2)
    (leaving,) = [w for w in workers if w.proc.pid == _parent(doc["worker"]["pid"])]
    (staying,) = [w for w in workers if w is not leaving]
    signalled_at = time.monotonic()
    leaving.proc.send_signal(signal.SIGTERM)
    leaving.proc.wait(GRACE + 20)
    took = time.monotonic() - signalled_at
    assert took <= GRACE, f"exited {took:.1f} s after SIGTERM\n{leaving.log_path.read_text()}"
    assert "ending them" in leaving.log_path.read_text()

    counts = stack.wait_finished(sweep_id, timeout=60)  # attempt 2 ends at its time limit
    assert counts["failed"] == 1, stack.logs()
    (trial,) = stack.all_trials(sweep_id)
    full = stack.store.reads.get_trial(trial["_id"])
    assert [h["state"] for h in full["history"]] == ["lost", "failed"], full["history"]
    assert "its process is gone" in full["history"][0]["error"]
    assert "time limit" in full["error"]
    assert _parent(full["worker"]["pid"]) == staying.proc.pid


def test_sigterm_mid_group_hands_back_every_unfinished_member(stack: Stack) -> None:
    stack.env["SWEEPSTACK_SHUTDOWN_GRACE_SECONDS"] = str(GRACE)
    workers = [stack.start_worker(), stack.start_worker()]
    epochs = 100
    sweep_id, count = stack.submit(
        f"name: scale-down-group-{uuid.uuid4().hex[:6]}\n"
        "dataset: {name: synthetic_regression, samples: 6000, features: 10}\n"
        "execution: {device: cpu, fuse: 64}\n"
        "objective: {metric: val_rmse, direction: min}\n"
        "model: {hidden_units: 64}\n"
        f"training: {{optimizer: sgd, lr: [0.01, 0.02, 0.03, 0.04], epochs: {epochs},"
        " batch_size: 16,"
        " seed: 7}\n"
        "artifacts: {keep: best, checkpoint_seconds: 3600}\n"
    )
    assert count == 4
    doc = _training(stack, sweep_id, 2)
    (first,) = [w for w in workers if w.proc.pid == _parent(doc["worker"]["pid"])]
    (second,) = [w for w in workers if w is not first]
    signalled_at = time.monotonic()
    first.proc.send_signal(signal.SIGTERM)
    first.proc.wait(GRACE + 20)
    assert time.monotonic() - signalled_at <= GRACE, first.log_path.read_text()[-3000:]
    assert first.proc.returncode == 0, first.log_path.read_text()[-3000:]

    counts = stack.wait_finished(sweep_id, timeout=180)
    assert counts["complete"] == 4, stack.logs()
    for trial in stack.all_trials(sweep_id):
        full = stack.store.reads.get_trial(trial["_id"])
        states = [h["state"] for h in full["history"]]
        assert states == ["handed_back", "complete"], states
        assert full["group_size"] == 4 and full.get("lost_attempts", 0) == 0  # one group
        assert _parent(full["worker"]["pid"]) == second.proc.pid
        (resumed,) = full["resumed"]
        assert resumed["from_attempt"] == 1 and resumed["epoch"] >= 2
        rows = sorted(
            (row["attempt"], row["epoch"])
            for row in stack.store.db["metrics"].find({"trial_id": trial["_id"]})
        )
        assert rows == [(2, epoch) for epoch in range(1, epochs + 1)]
