"""Pruning a multi-objective sweep by Pareto rank (#31): the rule on hand-made reports
(`core.analysis.rank_pruner`), the crowding distance against Optuna's NSGA-II, and the
epochs it decides at (`core.spec.search.rank_decision_epochs`)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from optuna.samplers.nsgaii._elite_population_selection_strategy import (
    _calc_crowding_distance,
)
from optuna.trial import create_trial

from core.analysis.pareto import crowding, ranks
from core.analysis.rank_pruner import (
    RankRule,
    asha_keeps,
    order_keys,
    percentile_prunes,
    vector,
)
from core.spec.search import Pruning, decision_epochs, rank_decision_epochs

ACC_PARAMS = [("val_accuracy", "maximize"), ("param_count", "minimize")]
DIRS = ["maximize", "minimize"]


@pytest.mark.parametrize("seed", range(6))
def test_crowding_agrees_with_optunas_nsga2(seed: int) -> None:
    rng = np.random.default_rng(seed)
    points = rng.integers(0, 6, size=(25, 3)).astype(float)
    rank = ranks(points)
    mine = crowding(points, rank)
    for r in np.unique(rank).tolist():
        members = np.flatnonzero(rank == r).tolist()
        trials = [create_trial(values=points[i].tolist()) for i in members]
        for number, trial in enumerate(trials):
            trial.number = number
        theirs = _calc_crowding_distance(trials)
        for number, i in enumerate(members):
            assert mine[i] == pytest.approx(theirs[number]), (r, i)


def test_vector_takes_per_trial_costs_at_every_epoch() -> None:
    assert vector(ACC_PARAMS, {"val_accuracy": 0.9}, {"param_count": 120}) == (0.9, 120.0)
    # A row's own value wins (a training function may report its cost itself).
    assert vector(ACC_PARAMS, {"val_accuracy": 0.9, "param_count": 7}, {"param_count": 1}) == (
        0.9,
        7.0,
    )
    assert vector(ACC_PARAMS, {"val_accuracy": 0.9}, {}) is None
    assert vector(ACC_PARAMS, {"val_accuracy": math.nan}, {"param_count": 1}) is None
    assert vector([("val_loss", "minimize"), ("train_loss", "minimize")], {"val_loss": 1}) is None


def test_asha_keeps_the_best_third_by_rank() -> None:
    # (accuracy, parameters). Ranks: a, b front (0); c dominated by b (1); d, e worse (2).
    a, b, c, d, e = (0.9, 500), (0.8, 100), (0.7, 200), (0.5, 600), (0.4, 700)
    # 6 at the rung, factor 3: the best 2 go on.
    assert asha_keeps(a, [b, c, d, e, (0.3, 900)], DIRS, 3)
    assert asha_keeps(b, [a, c, d, e, (0.3, 900)], DIRS, 3)
    assert not asha_keeps(c, [a, b, d, e, (0.3, 900)], DIRS, 3)
    assert not asha_keeps((0.3, 900), [a, b, c, d, e], DIRS, 3)


def test_asha_with_fewer_than_factor_keeps_only_the_best() -> None:
    # The first at a rung goes on; of two, only a best one (max(1, n // factor) = 1).
    assert asha_keeps((0.1, 1e6), [], DIRS, 3)
    assert not asha_keeps((0.5, 600), [(0.9, 500)], DIRS, 3)
    # Both on the front, both ends of it: both infinitely crowded, a tie, so kept.
    assert asha_keeps((0.5, 100), [(0.9, 500)], DIRS, 3)


def test_asha_ties_on_rank_go_to_the_larger_crowding_distance() -> None:
    # Five on one front (accuracy up, parameters up); one place (5 // 4).
    front = [(0.50, 100), (0.60, 200), (0.62, 220), (0.80, 400), (0.90, 900)]
    keys = order_keys(front, DIRS)
    assert {k[0] for k in keys} == {0}
    assert keys[0][1] == keys[4][1] == -math.inf  # the ends
    # (0.80, 400) is lonelier than (0.62, 220) and (0.60, 200).
    assert keys[3] < keys[1] and keys[3] < keys[2]
    # The ends tie with each other at infinity and are kept; an interior one is not.
    assert asha_keeps(front[0], front[1:], DIRS, 4)
    assert asha_keeps(front[4], front[:4], DIRS, 4)
    assert not asha_keeps(front[3], [p for p in front if p != front[3]], DIRS, 4)
    # With two places (factor 2), still only the ends (tied first): the interior loses.
    assert not asha_keeps(front[3], [p for p in front if p != front[3]], DIRS, 2)


def test_percentile_prunes_strictly_worse_ranks() -> None:
    complete = [(0.9, 500), (0.8, 100), (0.7, 200), (0.5, 600)]
    # With (0.85, 300) the complete ones rank 0, 0, 1, 2 (median 0.5); it ranks 0.
    assert not percentile_prunes((0.85, 300), complete, DIRS, 50)
    # (0.6, 550) is dominated by (0.7, 200) and dominates (0.5, 600): the complete ones
    # rank 0, 0, 1, 3 and it ranks 2, worse than the median (0.5) and the 75th percentile
    # (1.5), not worse than the 90th (2.4).
    assert percentile_prunes((0.6, 550), complete, DIRS, 50)
    assert percentile_prunes((0.6, 550), complete, DIRS, 75)
    assert not percentile_prunes((0.6, 550), complete, DIRS, 90)
    # Equal to the percentile is not worse.
    assert not percentile_prunes((0.7, 200), complete[:3], DIRS, 100)
    assert not percentile_prunes((0.1, 1e9), [], DIRS, 50)


def test_median_waits_for_startup_and_min_trials() -> None:
    rule = RankRule.of(Pruning(algorithm="median", n_startup_trials=3, n_min_trials=2), ACC_PARAMS)
    bad = (0.1, 1e6)
    at = {"a": (0.9, 100), "b": (0.8, 90), "r": (0.95, 80)}  # r is running, not complete
    assert not rule.prunes(bad, at, {"a", "b"}, n_complete=2)  # startup: 2 < 3
    assert rule.prunes(bad, at, {"a", "b"}, n_complete=3)
    assert not rule.prunes(bad, at, {"a"}, n_complete=3)  # one complete at the epoch < 2
    # Running trials are no reference for the median: only complete ones count.
    assert not rule.prunes(bad, {"r": (0.95, 80)}, set(), n_complete=9)


def test_rank_rule_refuses_a_single_objective_pruner() -> None:
    with pytest.raises(ValueError, match=r"pruning\.algorithm must be one of median"):
        RankRule.of(Pruning(algorithm="hyperband"), ACC_PARAMS)


@pytest.mark.parametrize(
    ("pruning", "epochs", "expected"),
    [
        ({"algorithm": "asha"}, 20, [1, 4, 16]),
        ({"algorithm": "asha", "min_resource": 2, "reduction_factor": 3}, 20, [2, 6, 18]),
        ({"algorithm": "asha", "min_resource": 1, "min_early_stopping_rate": 1}, 20, [4, 16]),
        ({"algorithm": "median"}, 4, [1, 2, 3, 4]),
        ({"algorithm": "median", "n_warmup_steps": 2, "interval_steps": 3}, 10, [2, 5, 8]),
        ({"algorithm": "percentile", "percentile": 25.0, "n_warmup_steps": 0,
          "interval_steps": 2}, 6, [2, 4, 6]),
    ],
)  # fmt: skip
def test_decision_epochs_of_several_objectives(
    pruning: dict, epochs: int, expected: list[int]
) -> None:
    section = Pruning.model_validate(pruning)
    assert rank_decision_epochs(section, epochs) == expected
    assert decision_epochs(section, epochs, objectives=2) == expected
