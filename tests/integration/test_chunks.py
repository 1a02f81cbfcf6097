"""Chunks of cheap trials on real RabbitMQ, a real MongoDB wire-protocol server and real
Celery workers: a sweep of cheap trials goes in fewer messages than trials, every trial
trains alone with its own result (the same as training it by itself), each finish is
written as its trial ends, and kill -9 of the training child mid-chunk still ends every
trial exactly once with no epoch row twice.
"""

from __future__ import annotations

import os
import signal
import uuid
from typing import Any

import pytest
import torch

from core.spec.config import TrialConfig
from tests.integration.stack import Stack, wait_for
from workers.training import train

pytestmark = pytest.mark.integration


def cheap_sweep(name: str, trials: int, body: str) -> str:
    """Trials far below `scheduler.chunks.CHEAP_SECONDS`, one per seed, under ``fuse: auto``."""
    return (
        f"name: {name}-{uuid.uuid4().hex[:6]}\nexecution: {{device: cpu}}\n"
        f"{body}training: {{epochs: 2, seed: {{int: [1, {trials}]}}}}\n"
    )


def _terminal(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [h for h in doc["history"] if h["state"] in ("complete", "failed", "pruned")]


def test_cheap_trials_share_messages_and_each_ends_alone_with_its_own_result(
    stack: Stack,
) -> None:
    sweep_id, count = stack.submit(cheap_sweep("chunked", 60, "dataset: {name: iris}\n"))
    assert count == 60
    messages = stack.queue_depth()
    assert 16 <= messages < 60  # chunks, yet at least 4 units for each of 4 assumed workers
    stack.start_worker(concurrency=2)
    counts = stack.wait_finished(sweep_id, timeout=180)
    assert counts["complete"] == 60, stack.logs()
    trials = stack.all_trials(sweep_id)
    by_group: dict[str, list[dict[str, Any]]] = {}
    for doc in trials:
        assert doc["attempt"] == 1 and doc["fused"] == 1 and doc["group_size"] > 1
        by_group.setdefault(doc["group"], []).append(doc)
    assert len(by_group) == messages
    for docs in by_group.values():
        ended = [doc["finished_at"] for doc in docs]
        assert len(set(ended)) == len(ended)  # each finish written as its trial ended
    torch.set_num_threads(1)
    full = stack.store.reads.get_trial(trials[-1]["_id"])
    assert len(_terminal(full)) == 1 and [m["epoch"] for m in full["metrics"]] == [1, 2]
    alone = train(TrialConfig.model_validate(full["config"]))
    assert [m["metrics"]["val_loss"] for m in full["metrics"]] == [
        row["val_loss"] for row in alone.metrics
    ]


def test_kill_9_of_the_child_mid_chunk_ends_every_trial_once(stack: Stack) -> None:
    worker = stack.start_worker()
    # 120 cheap trials, no two of which may fuse (each its own optimiser, activation and
    # epoch count), so they go in chunks of several, trained one by one.
    sweep_id, count = stack.submit(
        f"name: chunk-kill-{uuid.uuid4().hex[:6]}\nexecution: {{device: cpu}}\n"
        "dataset: {name: iris}\nmodel: {activation: [relu, tanh, sigmoid]}\n"
        "training: {optimizer: [sgd, adam], epochs: {int: [10, 29], step: 1}, seed: 1}\n"
    )
    assert count == 120 and stack.queue_depth() < count

    def mid_chunk() -> dict[str, Any] | None:
        # A chunk's trials are claimed in one write, so they share their ``started_at``:
        # one of a chunk has finished, and two or more (so that one still runs when the
        # kill lands) wait or train.
        running, _ = stack.store.reads.trials(sweep_id, state="running", limit=100)
        done, _ = stack.store.reads.trials(sweep_id, state="complete", limit=500)
        claimed = {doc["started_at"] for doc in done}
        waiting = [doc for doc in running if doc["started_at"] in claimed]
        return waiting[0] if len(waiting) >= 2 else None

    doc = wait_for(mid_chunk, 120, "a chunk with a trial finished and one still running", 0.02)
    os.kill(doc["worker"]["pid"], signal.SIGKILL)
    # Counted from the trials themselves: a kill between a finish's two writes (the trial,
    # then the sweep's counters) leaves the counters one off until a scheduler recounts.
    wait_for(
        lambda: stack.store.admin.recount(sweep_id)["complete"] == count, 240, "every trial", 0.5
    )
    retried = 0
    for trial in stack.all_trials(sweep_id):
        full = stack.store.reads.get_trial(trial["_id"])
        assert len(_terminal(full)) == 1 and full.get("fused", 1) == 1
        rows = [(m["attempt"], m["epoch"]) for m in full["metrics"]]
        assert len(rows) == len(set(rows)), rows
        epochs = full["config"]["training"]["epochs"]
        assert [e for a, e in rows if a == full["attempt"]] == list(range(1, epochs + 1))
        if full["attempt"] == 2:
            retried += 1
            assert [h["state"] for h in full["history"]] == ["lost", "complete"]
    assert retried >= 1, stack.logs()
    assert worker.proc.poll() is None  # the worker went on with a new child
