"""Fused groups on real RabbitMQ, a real MongoDB wire-protocol server and real Celery workers.

A fused sweep completes with every trial's own metrics, faithful to unfused training and
marked with its group; a diverging member fails alone; kill -9 of the training child or of
the whole worker mid-group ends every trial exactly once, with no epoch row twice; a
redelivered group message changes nothing; a time limit fails the whole group and a
cancelled sweep stops it, trial by trial.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import uuid
from typing import Any

import pytest
import torch
from celery.exceptions import SoftTimeLimitExceeded
from kombu import Connection

from core.broker import GROUP_TASK_NAME, time_limits
from core.settings import Settings
from core.spec.config import TrialConfig
from scheduler.enqueue import enqueue, sender_app
from tests.integration.stack import Stack, wait_for
from workers import group_runner
from workers.group_runner import execute_group
from workers.runner import RunnerOptions, worker_identity
from workers.training import train

pytestmark = pytest.mark.integration


def regression_sweep(name: str, body: str) -> str:
    """Regression trials that all fall into one group (lr and width may differ): ``fuse: 64``,
    since ``auto`` would train such small sweeps one trial per worker."""
    return (
        f"name: {name}-{uuid.uuid4().hex[:6]}\n"
        "dataset: {name: synthetic_regression, samples: 600, features: 10}\n"
        "execution: {device: cpu, fuse: 64}\n"
        "objective: {metric: val_rmse, direction: min}\n" + body
    )


def _drain(settings: Settings) -> list[Any]:
    out = []
    with Connection(settings.broker_url) as conn:
        while (message := conn.default_channel.basic_get(settings.queue, no_ack=True)) is not None:
            out.append(message)
    return out


def _terminal(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [h for h in doc["history"] if h["state"] in ("complete", "failed", "pruned")]


def test_fused_sweep_completes_with_own_metrics_and_group(stack: Stack) -> None:
    sweep_id, count = stack.submit(
        regression_sweep(
            "fused",
            "model: {hidden_units: [16, 40]}\n"
            "training: {optimizer: sgd, lr: [0.01, 0.03, 50.0], epochs: 3, seed: 7}\n",
        )
    )
    assert count == 6
    assert stack.queue_depth() == 1  # one group message for the six trials
    stack.start_worker()
    counts = stack.wait_finished(sweep_id, timeout=180)
    assert (counts["complete"], counts["failed"]) == (4, 2), stack.logs()
    trials, _ = stack.store.reads.trials(sweep_id, limit=100)
    groups = {doc["group"] for doc in trials}
    assert len(groups) == 1 and all(doc["group_size"] == 6 for doc in trials)
    torch.set_num_threads(1)
    for doc in trials:
        full = stack.store.reads.get_trial(doc["_id"])
        assert full["attempt"] == 1 and len(_terminal(full)) == 1
        if full["state"] == "failed":
            assert full["config"]["training"]["lr"] == 50.0
            assert "inf" in full["error"] or "nan" in full["error"]
            continue
        assert full["fused"] == 6 and full["param_count"] > 0 and full["device"] == "cpu"
        assert [m["epoch"] for m in full["metrics"]] == [1, 2, 3]
        alone = train(TrialConfig.model_validate(full["config"]))
        for row, expected in zip(full["metrics"], alone.metrics, strict=True):
            assert row["metrics"]["val_loss"] == pytest.approx(expected["val_loss"], rel=1e-4)
        assert full["objective"] == pytest.approx(alone.best["val_rmse"], rel=1e-4)


def _rows_once(stack: Stack, trial_id: str) -> list[tuple[int, int]]:
    """The trial's (attempt, epoch) rows, checked: none twice in the store, and each
    attempt's epochs a run from 1 without a gap (a kill loses only the newest ones)."""
    found = stack.store.db["metrics"].find({"trial_id": trial_id}, {"attempt": 1, "epoch": 1})
    rows = [(row["attempt"], row["epoch"]) for row in found]
    assert len(rows) == len(set(rows)), rows
    for attempt in {a for a, _ in rows}:
        epochs = sorted(e for a, e in rows if a == attempt)
        assert epochs == list(range(1, len(epochs) + 1)), (attempt, epochs)
    return sorted(rows)


@pytest.mark.parametrize("kill", ["child", "whole worker"])
def test_kill_9_mid_group_ends_every_trial_once(stack: Stack, kill: str) -> None:
    worker = stack.start_worker()
    sweep_id, _ = stack.submit(
        regression_sweep(
            "fused-kill",
            "model: {hidden_units: 128}\n"
            # Enough epochs that the group is still training when the test looks (a fused
            # group of this size trains 80 epochs in about a second on a quiet machine).
            "training: {optimizer: sgd, lr: [0.002, 0.003, 0.004, 50.0], epochs: 600,"
            " batch_size: 16, seed: 3}\n",
        )
    )

    def training_after_an_epoch() -> dict[str, Any] | None:
        running, _ = stack.store.reads.trials(sweep_id, state="running")
        for doc in running:
            if stack.store.reads.get_trial(doc["_id"])["metrics"]:
                return doc
        return None

    doc = wait_for(training_after_an_epoch, 120, "a fused trial with a reported epoch")
    failed, _ = stack.store.reads.trials(sweep_id, state="failed")
    assert len(failed) == 1  # the diverged member ended before the kill, in attempt 1
    if kill == "child":
        os.kill(doc["worker"]["pid"], signal.SIGKILL)
    else:
        worker.kill_all()
        stack.start_worker()
    counts = stack.wait_finished(sweep_id, timeout=240)
    assert (counts["complete"], counts["failed"]) == (3, 1), stack.logs()
    trials, _ = stack.store.reads.trials(sweep_id)
    for trial in trials:
        full = stack.store.reads.get_trial(trial["_id"])
        assert len(_terminal(full)) == 1
        epochs = _rows_once(stack, trial["_id"])
        if full["state"] == "failed":
            assert full["attempt"] == 1
            continue
        assert full["attempt"] == 2 and [h["state"] for h in full["history"]] == [
            "lost",
            "complete",
        ]
        assert [e for a, e in epochs if a == 2] == list(range(1, 601))
        assert full["group"] == trials[0]["group"] and full["fused"] == 3


def test_redelivered_group_changes_nothing_and_unknown_ids_are_left_out(stack: Stack) -> None:
    sweep_id, _ = stack.submit(
        regression_sweep("fused-again", "training: {lr: [0.01, 0.02], epochs: 1, seed: 1}\n")
    )
    (message,) = _drain(stack.settings)  # run the group in this process, not in a worker
    ids = json.loads(message.body)[0][0]
    assert message.headers["task"] == GROUP_TASK_NAME and len(ids) == 2
    torch.set_num_threads(1)
    options = RunnerOptions(heartbeat_seconds=1.0, stale_after_seconds=30.0)
    worker = worker_identity("in-process")
    missing = f"{sweep_id}-0000000000000000"
    outcomes = execute_group(stack.store.lifecycle, [*ids, missing], worker, options)
    assert outcomes == {ids[0]: "complete", ids[1]: "complete", missing: "unknown"}
    before = [stack.store.reads.get_trial(i) for i in ids]
    again = execute_group(stack.store.lifecycle, ids, worker, options)
    assert again == dict.fromkeys(ids, "skipped")
    assert [stack.store.reads.get_trial(i) for i in ids] == before


def test_group_messages_are_those_send_task_makes(stack: Stack) -> None:
    app = sender_app(stack.settings)
    ids = ["abc-1", "abc-2", 'odd"id']
    with app.producer_pool.acquire(block=True) as producer:
        app.send_task(GROUP_TASK_NAME, args=[ids], producer=producer, **time_limits(90))
    (reference,) = _drain(stack.settings)
    assert enqueue(app, [(ids, 90.0), ("abc-3", 30.0)]) == 2
    group, single = _drain(stack.settings)
    varying = {"id", "root_id", "argsrepr", "origin", "ignore_result"}
    assert {k: v for k, v in group.headers.items() if k not in varying} == {
        k: v for k, v in reference.headers.items() if k not in varying
    }
    assert json.loads(group.body)[0] == [ids] and group.headers["timelimit"] == [150.0, 90.0]
    assert single.headers["task"] == "workers.run_trial"


def _claimable_group(stack: Stack, name: str, body: str) -> list[str]:
    """Submit a sweep of one group and take its message off the queue; the group's ids."""
    stack.submit(regression_sweep(name, body))
    (message,) = _drain(stack.settings)
    return json.loads(message.body)[0][0]


def test_a_time_limit_fails_every_unfinished_trial_of_the_group(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = _claimable_group(stack, "fused-limit", "training: {lr: [0.01, 0.02], epochs: 1}\n")

    def out_of_time(*_args: Any, **_kwargs: Any) -> None:
        raise SoftTimeLimitExceeded()

    monkeypatch.setattr(group_runner, "_train", out_of_time)
    options = RunnerOptions(heartbeat_seconds=1.0, stale_after_seconds=30.0)
    outcomes = execute_group(stack.store.lifecycle, ids, worker_identity("in-process"), options)
    assert outcomes == dict.fromkeys(ids, "failed")
    for trial_id in ids:
        doc = stack.store.reads.get_trial(trial_id, with_metrics=False)
        assert doc["error"].startswith("time limit exceeded: the fused group of 2 trials ran past")
        assert doc["group"] == group_runner.group_id(ids) and len(_terminal(doc)) == 1


def test_cancelling_the_sweep_ends_the_group_cancelled(stack: Stack) -> None:
    ids = _claimable_group(
        stack, "fused-cancel", "training: {lr: [0.01, 0.02], epochs: 5000, batch_size: 8}\n"
    )
    torch.set_num_threads(1)
    options = RunnerOptions(heartbeat_seconds=0.5, stale_after_seconds=30.0)
    outcomes: dict[str, str] = {}
    runner = threading.Thread(
        target=lambda: outcomes.update(
            execute_group(
                stack.store.lifecycle, ids, worker_identity("in-process"), options
            )
        )
    )
    runner.start()
    try:
        wait_for(lambda: stack.store.reads.get_trial(ids[0])["metrics"], 60, "a reported epoch")
        stack.store.admin.cancel_sweep(stack.store.reads.get_trial(ids[0])["sweep_id"])
    finally:
        runner.join(60)
    assert outcomes == dict.fromkeys(ids, "cancelled")
    for trial_id in ids:
        doc = stack.store.reads.get_trial(trial_id)
        assert doc["state"] == "cancelled" and doc["result"]["epochs"] >= 1
