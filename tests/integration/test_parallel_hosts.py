"""A data-parallel trial whose ranks spread over hosts, gathered through the queue (#33 part 3,
`workers.gang`), with real RabbitMQ, a real MongoDB wire-protocol server and real Celery
workers, on this one host: each worker process stands for a host (the network-namespace
hosts of `tests/hosts.py` are not used here yet).

- ``world_size: 4, hosts: 2``: the worker that claims the trial runs ranks 0-1 and another
  worker runs ranks 2-3, asked for through the queue; the record's metrics equal one
  process's on the global batch to 1e-6 (float64), as a one-host trial's do. About 20 s.
- With no second worker free, the leader gives up at ``gather_timeout``, puts the trial back
  in the queue (``handed_back``, no lost attempt) and sends it again later; a worker that
  starts meanwhile lets it complete. About 25 s.
- Two such trials competing for three workers (one share free at a time): neither waits on
  the other for ever; both complete. About 40 s.

A host lost mid-trial (its worker and ranks killed) is tested on namespace hosts, in
`tests/integration/test_parallel_netns.py`.
"""

from __future__ import annotations

import math
import uuid

import pytest
import torch

from core.spec.config import TrialConfig
from tests.integration.stack import Stack, wait_for
from workers.training import train

pytestmark = pytest.mark.integration

METRICS = ("train_loss", "val_loss", "val_accuracy")


def _spec(parallel: str, epochs: int = 3) -> str:
    return (
        f"name: hosts-{uuid.uuid4().hex[:6]}\ndataset: {{name: digits}}\n"
        "objective: {metric: val_accuracy, direction: max}\n"
        "model: {hidden_layers: 2, hidden_units: 32}\n"
        "training: {optimizer: adam, lr: 0.003, lr_schedule: step, lr_step_size: 2,"
        f" epochs: {epochs}, batch_size: 64, seed: 3}}\n"
        f"execution: {{device: cpu, dtype: float64, parallel: {parallel}}}\n"
    )


def _equal_to_one_process(stack: Stack, trial_id: str) -> dict:
    full = stack.store.reads.get_trial(trial_id)
    one = TrialConfig.model_validate(full["config"]).model_dump()
    one["execution"]["parallel"] = {}  # one process, the same global batch
    torch.set_num_threads(1)
    alone = train(TrialConfig.model_validate(one))
    rows = [m["metrics"] for m in full["metrics"] if m["attempt"] == full["attempt"]]
    assert len(rows) == len(alone.metrics) > 0
    for row, expected in zip(rows, alone.metrics, strict=True):
        for name in METRICS:
            assert math.isclose(row[name], expected[name], rel_tol=0, abs_tol=1e-6), (name, row)
    return full


def test_world_size_4_over_2_hosts_through_the_queue_equals_one_process(stack: Stack) -> None:
    stack.start_worker()
    stack.start_worker()
    sweep_id, count = stack.submit(
        _spec("{world_size: 4, hosts: 2, strategy: allreduce, gather_timeout: 60}")
    )
    assert count == 1
    counts = stack.wait_finished(sweep_id, timeout=120)
    assert counts["complete"] == 1, stack.logs()
    (trial,) = stack.all_trials(sweep_id)
    full = _equal_to_one_process(stack, trial["_id"])
    assert full["attempt"] == 1 and [h["state"] for h in full["history"]] == ["complete"]
    assert full["device_info"]["world_size"] == 4
    logs = stack.logs()
    assert "asked for 1 other host(s)' ranks" in logs and "started ranks [2, 3]" in logs, logs


def test_too_few_free_workers_hand_the_trial_back_until_one_comes(stack: Stack) -> None:
    stack.start_worker()
    sweep_id, _ = stack.submit(
        _spec("{world_size: 4, hosts: 2, strategy: allreduce, gather_timeout: 3}", epochs=2)
    )

    def handed_back() -> bool:
        (trial,) = stack.all_trials(sweep_id)
        doc = stack.store.lifecycle.trial(trial["_id"])
        return any(h["state"] == "handed_back" for h in doc.get("history") or [])

    wait_for(handed_back, 60, "the trial to be handed back for want of a second worker")
    stack.start_worker()
    counts = stack.wait_finished(sweep_id, timeout=150)
    assert counts["complete"] == 1, stack.logs()
    (trial,) = stack.all_trials(sweep_id)
    full = _equal_to_one_process(stack, trial["_id"])
    states = [h["state"] for h in full["history"]]
    assert states[-1] == "complete" and set(states[:-1]) == {"handed_back"}, states
    assert full.get("lost_attempts", 0) == 0
    assert "were not gathered" in (full["history"][0]["error"] or "")


def test_two_trials_competing_for_workers_both_complete(stack: Stack) -> None:
    for _ in range(3):
        stack.start_worker()
    sweep_id, count = stack.submit(
        _spec("{world_size: 4, hosts: 2, strategy: allreduce, gather_timeout: 4}").replace(
            "seed: 3", "seed: [3, 4]"
        )
    )
    assert count == 2
    counts = stack.wait_finished(sweep_id, timeout=240)
    assert counts["complete"] == 2, stack.logs()
    for trial in stack.all_trials(sweep_id):
        full = _equal_to_one_process(stack, trial["_id"])
        assert full.get("lost_attempts", 0) == 0
