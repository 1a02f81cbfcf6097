"""Checkpoints and kept models on real RabbitMQ, a real MongoDB wire-protocol server and real
Celery workers (#30).

kill -9 of the training child at epoch 15 of 20: the retried attempt resumes after the last
checkpoint, its curve is whole with no epoch written twice, and its final metrics equal an
uninterrupted run's to 1e-6; the checkpoint is gone once the trial ends, and the sweep keeps
the weights of its best trials only (``keep: top_k``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from typing import Any

import pytest
import torch

from core.spec.config import TrialConfig
from tests.integration.stack import Stack, wait_for
from workers.training import train
from workers.training.checkpoints import read_model_file

pytestmark = pytest.mark.integration

EPOCHS = 20


def _spec(name: str, body: str) -> str:
    return (
        f"name: {name}-{uuid.uuid4().hex[:6]}\n"
        "dataset: {name: synthetic_classification, samples: 3000, features: 20, classes: 4}\n"
        "objective: {metric: val_accuracy, direction: max}\n" + body
    )


def _progress(stack: Stack, trial_id: str) -> int:
    doc = stack.store.lifecycle.trial(trial_id)
    return int((doc.get("progress") or {}).get("epoch", 0)) if doc["state"] == "running" else 0


def _rows(stack: Stack, trial_id: str) -> list[tuple[int, int]]:
    found = stack.store.db["metrics"].find({"trial_id": trial_id}, {"attempt": 1, "epoch": 1})
    rows = sorted((row["attempt"], row["epoch"]) for row in found)
    assert len(rows) == len(set(rows)), rows
    return rows


def checkpointed(stack: Stack, sweep_id: str, epoch: int) -> tuple[dict[str, Any], int]:
    """A running trial of the sweep once its checkpoint of `epoch` (or later) is stored, and
    the epoch of that checkpoint."""

    def there() -> tuple[dict[str, Any], int] | None:
        running, _ = stack.store.reads.trials(sweep_id, state="running")
        for doc in running:
            found = stack.store.artifacts.find(doc["_id"], "checkpoint", "last")
            if found is not None and found["epoch"] >= epoch:
                return doc, found["epoch"]
        return None

    return wait_for(there, 180, f"a checkpoint of epoch {epoch}", every=0.02)


def _killed_at(stack: Stack, sweep_id: str, epoch: int) -> tuple[dict[str, Any], int]:
    """kill -9 the training child once a running trial's checkpoint of `epoch` (or later) is
    stored; the trial, and the epoch of the checkpoint seen (a later one may come before the
    kill lands)."""
    doc, saved = checkpointed(stack, sweep_id, epoch)
    os.kill(doc["worker"]["pid"], signal.SIGKILL)
    return doc, saved


def test_kill_9_at_epoch_15_resumes_from_the_checkpoint(stack: Stack) -> None:
    stack.start_worker()
    sweep_id, count = stack.submit(
        _spec(
            "resume",
            "model: {hidden_units: 256, hidden_layers: 2, dropout: 0.1}\n"
            f"training: {{optimizer: adam, lr: 0.001, epochs: {EPOCHS}, batch_size: 16, seed: 5,"
            " lr_schedule: step, lr_step_size: 4, lr_gamma: 0.7}\n"
            "execution: {device: cpu, fuse: off}\n"
            "artifacts: {keep: top_k, top_k: 1, checkpoint_every: 5}\n",
        )
    )
    assert count == 1
    doc, saved = _killed_at(stack, sweep_id, 15)
    counts = stack.wait_finished(sweep_id, timeout=240)
    assert counts["complete"] == 1, stack.logs()

    full = stack.store.reads.get_trial(doc["_id"])
    assert [h["state"] for h in full["history"]] == ["lost", "complete"]
    (resumed,) = full["resumed"]
    assert resumed["attempt"] == 2 and resumed["from_attempt"] == 1
    assert resumed["epoch"] in (saved, saved + 5), resumed  # the last one before the kill
    rows = _rows(stack, doc["_id"])
    assert [e for a, e in rows if a == 2] == list(range(1, EPOCHS + 1))
    # What attempt 1 trained after its last checkpoint stays its own, for the record.
    assert all(e > resumed["epoch"] for a, e in rows if a == 1)
    final = [m for m in full["metrics"] if m["attempt"] == 2]
    assert [m["epoch"] for m in final] == list(range(1, EPOCHS + 1))

    torch.set_num_threads(1)
    alone = train(TrialConfig.model_validate(full["config"]))
    for row, expected in zip(final, alone.metrics, strict=True):
        for key in ("train_loss", "val_loss", "val_accuracy", "lr"):
            assert row["metrics"][key] == pytest.approx(expected[key], rel=1e-6, abs=1e-9), key
    assert full["objective"] == pytest.approx(alone.best["val_accuracy"], abs=1e-9)

    kinds = {a["kind"] for a in stack.store.artifacts.of_trials([doc["_id"]])[doc["_id"]]}
    assert kinds == {"model"}  # the checkpoint went when the trial ended
    # The kept weights are the best epoch's, known across the resume (checkpoints carry it).
    scores = [row["metrics"]["val_accuracy"] for row in final]
    kept = stack.store.artifacts.find(doc["_id"], "model", "model")
    _, meta = read_model_file(stack.store.artifacts.read(kept))  # type: ignore[arg-type]
    assert meta["epoch"] == 1 + scores.index(max(scores))


def test_top_k_keeps_the_best_models_only(stack: Stack) -> None:
    stack.start_worker()
    sweep_id, count = stack.submit(
        _spec(
            "top-k",
            "model: {hidden_units: [4, 8, 16, 32]}\n"
            "training: {optimizer: adam, lr: 0.01, epochs: 2, seed: 1}\n"
            "execution: {device: cpu}\n"
            "artifacts: {keep: top_k, top_k: 2}\n",
        )
    )
    assert count == 4
    stack.wait_finished(sweep_id, timeout=180)
    best = stack.store.reads.best(sweep_id, k=2)
    models = stack.store.artifacts.models(sweep_id, "maximize")
    assert [m["trial_id"] for m in models] == [b["_id"] for b in best]
    assert all(m["size"] > 0 and not m.get("epoch") for m in models)
    assert stack.store.db["artifacts"].count_documents({"sweep_id": sweep_id}) == 2
    stack.store.admin.delete_sweep(sweep_id)
    assert stack.store.db["artifacts"].count_documents({"sweep_id": sweep_id}) == 0
    assert stack.store.db["blobs.files"].count_documents({}) == 0


def test_kill_9_mid_fused_group_resumes_each_member_from_its_slice(stack: Stack) -> None:
    stack.start_worker()
    sweep_id, count = stack.submit(
        _spec(
            "fused-resume",
            "model: {hidden_units: [32, 48, 64], dropout: 0.1}\n"
            "training: {optimizer: adam, lr: 0.003, epochs: 30, batch_size: 8, seed: 9}\n"
            "execution: {device: cpu, fuse: 64}\n"
            "artifacts: {keep: all, checkpoint_every: 5}\n",
        )
    )
    assert count == 3
    _, saved = _killed_at(stack, sweep_id, 15)
    counts = stack.wait_finished(sweep_id, timeout=300)
    assert counts["complete"] == 3, stack.logs()
    trials, _ = stack.store.reads.trials(sweep_id)
    configs, fulls, starts = [], [], []
    for trial in trials:
        full = stack.store.reads.get_trial(trial["_id"])
        assert [h["state"] for h in full["history"]] == ["lost", "complete"]
        assert full["group"] == trials[0]["group"] and full["fused"] == 3
        (resumed,) = full["resumed"]
        # Members' checkpoints upload one after another: the kill may land between them,
        # and members resumed at different epochs train on in separate fused runs.
        assert resumed["epoch"] >= saved - 5 and resumed["epoch"] % 5 == 0
        starts.append(resumed["epoch"])
        rows = _rows(stack, trial["_id"])
        assert [e for a, e in rows if a == 2] == list(range(1, 31))
        configs.append(TrialConfig.model_validate(full["config"]))
        fulls.append(full)
    assert max(starts) >= saved
    torch.set_num_threads(1)
    from workers.training.fused import train_fused

    for full, alone in zip(fulls, train_fused(configs), strict=True):
        got = [row["metrics"]["val_loss"] for row in full["metrics"] if row["attempt"] == 2]
        want = [row["val_loss"] for row in alone.metrics]  # type: ignore[union-attr]
        assert got == pytest.approx(want, rel=1e-6)
    artifacts = stack.store.artifacts.of_trials([t["_id"] for t in trials])
    assert all({a["kind"] for a in found} == {"model"} for found in artifacts.values())


def test_a_broker_restart_mid_trial_ends_it_once_with_an_uninterrupted_runs_metrics(
    stack: Stack,
) -> None:
    stack.start_worker()
    sweep_id, _ = stack.submit(
        _spec(
            "broker-restart",
            "model: {hidden_units: 256, hidden_layers: 2}\n"
            f"training: {{optimizer: adam, lr: 0.001, epochs: {EPOCHS}, batch_size: 16, seed: 4}}\n"
            "execution: {device: cpu, fuse: off}\n"
            "artifacts: {checkpoint_every: 5}\n",
        )
    )

    doc, _ = checkpointed(stack, sweep_id, 5)
    for action in ("stop_app", "start_app"):
        subprocess.run(["rabbitmqctl", action], check=True, capture_output=True, timeout=120)
    subprocess.run(["rabbitmqctl", "await_startup"], check=True, capture_output=True, timeout=120)
    counts = stack.wait_finished(sweep_id, timeout=300)
    assert counts["complete"] == 1, stack.logs()
    full = stack.store.reads.get_trial(doc["_id"])
    assert [h["state"] for h in full["history"]][-1] == "complete"
    assert sum(h["state"] == "complete" for h in full["history"]) == 1
    rows = _rows(stack, doc["_id"])
    final = [m for m in full["metrics"] if m["attempt"] == full["attempt"]]
    assert [m["epoch"] for m in final] == list(range(1, EPOCHS + 1)), rows
    torch.set_num_threads(1)
    alone = train(TrialConfig.model_validate(full["config"]))
    for row, expected in zip(final, alone.metrics, strict=True):
        assert row["metrics"]["val_loss"] == pytest.approx(expected["val_loss"], rel=1e-6)
