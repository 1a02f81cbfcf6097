"""Pruning decided at the rung, with everything real: Celery worker processes train a grid
with Optuna's successive halving (ASHA, rungs 2 and 6) and a `sweepstack scheduler` process
feeds it and decides (RabbitMQ, SecantusDB).

What a user relies on (DESIGN.md): a pruning decision applies at the epoch it was made for.
A watched trial waits at each rung for the scheduler's verdict (`workers.claims`), so every
pruned trial stopped exactly at a rung, with its rows up to that rung stored once and none
after; for plain trials, for members of fused groups, for chunked trials and for
data-parallel trials. A pruner that judges a trial on its own reports and the complete
trials' alone (median here) is run by the worker itself after every epoch
(`workers.pruning`): the scheduler marks and requests nothing, and every pruned trial's
rows still end at the epoch it was pruned at. One stack (queue, database, a worker of two
processes) serves the module.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from core.spec.search import Pruning, decision_epochs
from core.spec.sweep import load_spec
from scheduler.submit import submit_sweep
from tests.integration.stack import Scheduler, Stack

pytestmark = pytest.mark.integration

RUNGS = [2, 6]
#: Learning rates from hopeless to good: successive halving has something to stop.
GRID = "lr: [0.0003, 0.001, 0.003, 0.01, 0.03, 0.1], seed: [0, 1]"


@pytest.fixture(scope="module")
def stack(
    broker_url: str, secantus_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("rungs")
    stack = Stack(broker_url, secantus_url, f"sweepstack_test_{uuid.uuid4().hex[:10]}", tmp)
    # The heartbeat thread alone would hear of a prune a minute late: only the wait at the
    # rung can stop a trial there.
    stack.env["SWEEPSTACK_HEARTBEAT_SECONDS"] = "60"
    stack.env["SWEEPSTACK_STALE_AFTER_SECONDS"] = "300"
    scheduler = Scheduler(stack.env, tmp / "scheduler.log", lease=3)
    try:
        stack.start_worker(concurrency=2)
        yield stack
    finally:
        scheduler.stop()
        stack.close()


ASHA = "{algorithm: asha, min_resource: 2, reduction_factor: 3}"
#: A pruner the worker runs itself (`core.spec.search.IN_WORKER`).
MEDIAN = "{algorithm: median, n_startup_trials: 2}"


def _spec(model: str, execution: str, pruning: str = ASHA) -> str:
    return (
        f"name: rungs-{uuid.uuid4().hex[:6]}\ndataset: {{name: digits}}\n"
        "objective: {metric: val_accuracy, direction: max}\n"
        f"model: {model}\n"
        f"training: {{optimizer: sgd, epochs: 7, batch_size: 64, {GRID}}}\n"
        f"execution: {execution}\n"
        f"pruning: {pruning}\n"
    )


def _epochs(stack: Stack, trial_id: str) -> list[int]:
    """The trial's stored epochs of its one attempt, each stored once."""
    found = stack.store.db["metrics"].find({"trial_id": trial_id}, {"attempt": 1, "epoch": 1})
    rows = [(row["attempt"], row["epoch"]) for row in found]
    assert len(rows) == len(set(rows)), rows
    assert {a for a, _ in rows} <= {1}
    return sorted(e for _, e in rows)


def _check_pruned_at_rungs(stack: Stack, sweep_id: str) -> list[dict[str, Any]]:
    counts = stack.wait_finished(sweep_id, timeout=300)
    docs = list(stack.store.db["trials"].find({"sweep_id": sweep_id}))
    assert counts.get("failed", 0) == 0, stack.logs()
    pruned = [d for d in docs if d["state"] == "pruned"]
    assert pruned, f"nothing was pruned: {counts}"
    late = {
        d["_id"]: (d.get("pruned_epoch"), _epochs(stack, d["_id"]))
        for d in pruned
        if d.get("pruned_epoch") not in RUNGS
        or _epochs(stack, d["_id"]) != list(range(1, d["pruned_epoch"] + 1))
    }
    assert late == {}, f"pruned past their rung (pruned_epoch, epochs stored): {late}"
    for d in docs:
        if d["state"] == "complete":
            assert _epochs(stack, d["_id"]) == list(range(1, 8))
    return docs


def test_the_rungs_are_the_decision_epochs() -> None:
    pruning = Pruning(algorithm="asha", min_resource=2, reduction_factor=3)
    assert decision_epochs(pruning, 7) == RUNGS


def test_plain_trials_are_pruned_at_their_rung(stack: Stack) -> None:
    model = "{hidden_layers: 2, hidden_units: 64}"
    sweep_id, total = stack.submit(_spec(model, "{device: cpu, fuse: off}"))
    assert total == 12
    docs = _check_pruned_at_rungs(stack, sweep_id)
    assert not any(d.get("fused") for d in docs)


def test_fused_members_are_pruned_at_their_rung(stack: Stack) -> None:
    model = "{hidden_layers: 1, hidden_units: 16}"
    sweep_id, _ = stack.submit(_spec(model, "{device: cpu, fuse: 6}"))
    docs = _check_pruned_at_rungs(stack, sweep_id)
    assert any(d.get("fused") for d in docs), "no trial trained in a fused group"


def test_data_parallel_trials_are_pruned_at_their_rung(stack: Stack) -> None:
    model = "{hidden_layers: 1, hidden_units: 32}"
    execution = "{device: cpu, fuse: off, parallel: {world_size: 2, strategy: allreduce}}"
    sweep_id, _ = stack.submit(_spec(model, execution))
    _check_pruned_at_rungs(stack, sweep_id)


def test_chunked_trials_are_pruned_at_their_rung(stack: Stack) -> None:
    # Cheap trials on iris that cannot fuse (each its own depth, activation, optimizer and
    # batch size) go several to a message, one after another (`scheduler.chunks`); the
    # window holds the whole grid and one worker is said to train it, so chunks form.
    spec = (
        f"name: rungs-{uuid.uuid4().hex[:6]}\ndataset: {{name: iris}}\n"
        "objective: {metric: val_accuracy, direction: max}\n"
        "model: {hidden_layers: [1, 2], hidden_units: 8, activation: [relu, tanh, sigmoid]}\n"
        "training: {optimizer: [sgd, adam], epochs: 7, batch_size: [16, 64], lr: 0.01}\n"
        "execution: {device: cpu}\n"
        "search: {algorithm: grid, parallelism: 32}\n"
        "pruning: {algorithm: asha, min_resource: 2, reduction_factor: 3}\n"
    )
    sweep_id, total = submit_sweep(load_spec(spec), stack.store, stack.app, workers=1)
    assert total == 24
    docs = _check_pruned_at_rungs(stack, sweep_id)
    chunked = [d for d in docs if d.get("group_size", 1) > 1 and d.get("fused") == 1]
    assert chunked, "no trial trained in a chunk"
    assert any(d["state"] == "pruned" for d in chunked)


def _check_pruned_by_the_worker(stack: Stack, sweep_id: str) -> list[dict[str, Any]]:
    """Every pruned trial stopped at the epoch its worker's pruner decided (its rows end
    there), and the scheduler judged nothing (no verdict, no prune request stored)."""
    counts = stack.wait_finished(sweep_id, timeout=300)
    docs = list(stack.store.db["trials"].find({"sweep_id": sweep_id}))
    assert counts.get("failed", 0) == 0, stack.logs()
    pruned = [d for d in docs if d["state"] == "pruned"]
    assert pruned, f"nothing was pruned: {counts}"
    for d in pruned:
        assert _epochs(stack, d["_id"]) == list(range(1, d["pruned_epoch"] + 1)), d["_id"]
        assert d["pruned_epoch"] < 7
    for d in docs:
        assert "judged" not in d and "prune_requested" not in d, d["_id"]
        if d["state"] == "complete":
            assert _epochs(stack, d["_id"]) == list(range(1, 8))
    return docs


def test_plain_trials_are_pruned_by_their_workers_pruner(stack: Stack) -> None:
    model = "{hidden_layers: 2, hidden_units: 64}"
    sweep_id, _ = stack.submit(_spec(model, "{device: cpu, fuse: off}", MEDIAN))
    docs = _check_pruned_by_the_worker(stack, sweep_id)
    assert not any(d.get("fused") for d in docs)


def test_fused_members_are_pruned_by_their_workers_pruner(stack: Stack) -> None:
    model = "{hidden_layers: 1, hidden_units: 16}"
    sweep_id, _ = stack.submit(_spec(model, "{device: cpu, fuse: 6}", MEDIAN))
    docs = _check_pruned_by_the_worker(stack, sweep_id)
    assert any(d.get("fused", 1) > 1 and d["state"] == "pruned" for d in docs), (
        "no fused member was pruned"
    )


def test_data_parallel_trials_are_pruned_by_their_workers_pruner(stack: Stack) -> None:
    model = "{hidden_layers: 1, hidden_units: 32}"
    execution = "{device: cpu, fuse: off, parallel: {world_size: 2, strategy: allreduce}}"
    sweep_id, _ = stack.submit(_spec(model, execution, MEDIAN))
    _check_pruned_by_the_worker(stack, sweep_id)
