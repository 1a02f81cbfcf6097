"""Pruning a multi-objective sweep by Pareto rank (#31), with everything real: Celery worker
processes train, a `sweepstack scheduler` process feeds the sweep and judges each trial at
its rung by its rank among the trials that reached it (RabbitMQ, SecantusDB).

What a user relies on: a two-objective TPE sweep with Pareto-rank ASHA creates exactly
``search.trials`` trials, every pruned one stopped at a rung (its rows end there, stored
once), every complete one trained every epoch and holds both objectives; and the members
of a fused group each get their own decision at the rung.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from core.spec.search import decision_epochs
from core.spec.sweep import load_spec
from core.store.records import flatten_params
from tests.integration.stack import Scheduler, Stack, wait_for

pytestmark = pytest.mark.integration

RUNGS = [1, 3]
ASHA = "{algorithm: asha, min_resource: 1, reduction_factor: 3}"
OBJECTIVES = "[{metric: val_accuracy, direction: max}, {metric: param_count}]"


@pytest.fixture(scope="module")
def stack(
    broker_url: str, secantus_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("pareto")
    stack = Stack(broker_url, secantus_url, f"sweepstack_test_{uuid.uuid4().hex[:10]}", tmp)
    # Only the wait at the rung can stop a trial there (the heartbeat hears a minute late).
    stack.env["SWEEPSTACK_HEARTBEAT_SECONDS"] = "60"
    stack.env["SWEEPSTACK_STALE_AFTER_SECONDS"] = "300"
    schedulers = [Scheduler(stack.env, tmp / "scheduler.log", lease=3)]
    stack.schedulers = schedulers  # type: ignore[attr-defined]
    try:
        stack.start_worker(concurrency=2)
        yield stack
    finally:
        for scheduler in schedulers:
            scheduler.stop()
        stack.close()


def _epochs(stack: Stack, trial_id: str) -> list[int]:
    found = stack.store.db["metrics"].find({"trial_id": trial_id}, {"attempt": 1, "epoch": 1})
    rows = [(row["attempt"], row["epoch"]) for row in found]
    assert len(rows) == len(set(rows)), rows
    return sorted(e for _, e in rows)


def _check(stack: Stack, sweep_id: str, epochs: int) -> list[dict[str, Any]]:
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
            assert _epochs(stack, d["_id"]) == list(range(1, epochs + 1))
            accuracy, params = d["objectives"]
            assert 0 <= accuracy <= 1 and params == d["param_count"]
    return docs


def test_the_rungs_are_the_decision_epochs() -> None:
    spec = load_spec(
        f"name: r\ndataset: {{name: digits}}\nobjectives: {OBJECTIVES}\n"
        f"training: {{epochs: 4}}\nmodel: {{hidden_units: [8, 16]}}\npruning: {ASHA}\n"
    )
    assert decision_epochs(spec.pruning, 4, len(spec.objectives)) == RUNGS


def test_a_tpe_sweep_is_pruned_by_rank_at_its_rungs(stack: Stack) -> None:
    spec = (
        f"name: pareto-{uuid.uuid4().hex[:6]}\ndataset: {{name: digits}}\n"
        f"objectives: {OBJECTIVES}\n"
        "model: {hidden_layers: {int: [1, 3]}, hidden_units: [8, 16, 32, 64, 128]}\n"
        "training: {optimizer: sgd, epochs: 4, batch_size: 64, lr: {loguniform: [0.0003, 0.1]}}\n"
        "execution: {device: cpu, fuse: off}\n"
        "search: {algorithm: tpe, trials: 14, seed: 3, n_startup_trials: 4, parallelism: 3}\n"
        f"pruning: {ASHA}\n"
    )
    sweep_id, _ = stack.submit(spec)
    docs = _check(stack, sweep_id, epochs=4)
    assert len(docs) == 14
    assert len({d["_id"] for d in docs}) == 14


def test_fused_members_each_get_their_decision(stack: Stack) -> None:
    spec = (
        f"name: pareto-{uuid.uuid4().hex[:6]}\ndataset: {{name: digits}}\n"
        f"objectives: {OBJECTIVES}\n"
        "model: {hidden_layers: 1, hidden_units: 16}\n"
        "training: {optimizer: sgd, epochs: 4, batch_size: 64,"
        " lr: [0.0003, 0.001, 0.003, 0.01, 0.03, 0.1], seed: [0, 1]}\n"
        "execution: {device: cpu, fuse: 6}\n"
        f"pruning: {ASHA}\n"
    )
    sweep_id, total = stack.submit(spec)
    assert total == 12
    docs = _check(stack, sweep_id, epochs=4)
    assert any(d.get("fused", 1) > 1 and d["state"] == "pruned" for d in docs), (
        "no fused member was pruned"
    )


def test_a_constrained_sweep_survives_a_scheduler_kill_9_without_asking_twice(
    stack: Stack, tmp_path: Any
) -> None:
    """Multi-objective TPE with a constraint and Pareto-rank ASHA, its scheduler killed -9
    mid-sweep and a new one started: exactly ``search.trials`` trials, no point or Optuna
    number twice, every objective and the constraint's verdict stored, pruned trials
    stopped at their rungs."""
    spec = (
        f"name: pareto-kill-{uuid.uuid4().hex[:6]}\ndataset: {{name: digits}}\n"
        f"objectives: {OBJECTIVES}\nconstraints: ['param_count <= 3000']\n"
        "model: {hidden_layers: {int: [1, 2]}, hidden_units: [8, 16, 32, 64]}\n"
        "training: {optimizer: sgd, epochs: 4, batch_size: 64, lr: {loguniform: [0.0003, 0.1]}}\n"
        "execution: {device: cpu, fuse: off}\n"
        "search: {algorithm: tpe, trials: 18, seed: 11, n_startup_trials: 4, parallelism: 3}\n"
        f"pruning: {ASHA}\n"
    )
    sweep_id, _ = stack.submit(spec)
    trials = stack.store.db["trials"]
    wait_for(lambda: trials.count_documents({"sweep_id": sweep_id}) >= 7, 120, "7 trials")
    schedulers = stack.schedulers  # type: ignore[attr-defined]
    schedulers[-1].kill_all()
    assert trials.count_documents({"sweep_id": sweep_id}) < 18, "killed after the sweep was fed"
    schedulers.append(Scheduler(stack.env, tmp_path / "scheduler-2.log", lease=3))
    docs = _check(stack, sweep_id, epochs=4)
    assert len(docs) == 18
    asked = {repr(sorted(flatten_params(d["params"]).items())) for d in docs}
    assert len(asked) == 18, "a point was asked twice"
    assert len({d["optuna"]["number"] for d in docs}) == 18
    for d in docs:
        if d["state"] == "complete":
            assert d["feasible"] == (d["param_count"] <= 3000)
            assert len(d["constraints"]) == 1
