"""The front and its hypervolume (`core.analysis.pareto`, #31), checked against Optuna's
own non-dominated sorting and hypervolume on the same points."""

from __future__ import annotations

import numpy as np
import pytest
from optuna._hypervolume import compute_hypervolume
from optuna.study._multi_objective import _fast_non_domination_rank, _is_pareto_front

from core.analysis.pareto import front_rows, hypervolume, losses, nondominated, ranks
from core.spec.objectives import Goals


@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("n", [1, 7, 60])
def test_sorting_and_hypervolume_agree_with_optuna(k: int, n: int) -> None:
    rng = np.random.default_rng(k * 100 + n)
    for points in (rng.random((n, k)), rng.integers(0, 5, size=(n, k)).astype(float)):
        assert (nondominated(points) == _is_pareto_front(points, False)).all()
        assert (ranks(points) == _fast_non_domination_rank(points)).all()
        ref = points.max(axis=0) + 0.5
        assert hypervolume(points, ref) == pytest.approx(compute_hypervolume(points, ref))


@pytest.mark.parametrize("k", [2, 3, 4])
def test_fronts_across_blocks_agree_with_optuna(k: int) -> None:
    """More rows than one block of `nondominated` (256), with ties: rows kept in one block
    must strike rows of the next ones."""
    rng = np.random.default_rng(k)
    for points in (
        rng.random((700, k)),
        rng.integers(0, 6, size=(700, k)).astype(float),
        np.vstack([rng.random((300, k)), np.zeros((2, k)), rng.random((400, k))]),
    ):
        assert (nondominated(points) == _is_pareto_front(points, False)).all()


def test_hand_made_front() -> None:
    # (accuracy, parameters): c is dominated by b, d is infeasible, e is not complete.
    docs = [
        {"_id": "a", "index": 0, "state": "complete", "objectives": [0.9, 300], "feasible": True},
        {"_id": "b", "index": 1, "state": "complete", "objectives": [0.8, 100], "feasible": True},
        {"_id": "c", "index": 2, "state": "complete", "objectives": [0.7, 200], "feasible": True},
        {"_id": "d", "index": 3, "state": "complete", "objectives": [0.99, 10], "feasible": False},
        {"_id": "e", "index": 4, "state": "failed", "objectives": None},
        {"_id": "f", "index": 5, "state": "complete", "objectives": [0.6, None]},
    ]
    goals = Goals((("val_accuracy", "maximize"), ("param_count", "minimize")))
    front = front_rows(docs, goals, reference=[0.5, 400])
    assert [t["id"] for t in front["trials"]] == ["a", "b"]  # best first objective first
    assert (front["complete"], front["feasible"], front["size"]) == (4, 3, 2)
    # Dominated area up to (0.5, 400): b's 0.3 x 300, and a's 0.1 more accuracy over 100.
    assert front["hypervolume"] == pytest.approx(0.3 * 300 + 0.1 * 100)
    loss = losses(np.array([[0.9, 300], [0.8, 100], [0.7, 200]]), ["maximize", "minimize"])
    assert front["hypervolume"] == pytest.approx(compute_hypervolume(loss, np.array([-0.5, 400])))
    default = front_rows(docs, goals)
    assert default["reference"] == pytest.approx([0.7 - 0.02, 300 + 20])


def test_a_sweep_with_nothing_feasible_has_an_empty_front() -> None:
    goals = Goals((("val_loss", "minimize"), ("macs", "minimize")))
    front = front_rows([{"state": "complete", "objectives": [1, 2], "feasible": False}], goals)
    assert front["size"] == 0 and front["hypervolume"] is None and front["trials"] == []
