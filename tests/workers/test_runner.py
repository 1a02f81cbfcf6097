"""`workers.runner.settle`: how a trained trial ends (complete, cancelled or pruned), and
what a pruned one records. Pure logic; the paths through real workers are in
`tests/integration/test_pruning.py`."""

from __future__ import annotations

import math

from core.spec.kinds import KINDS
from core.states import TrialState
from workers.runner import TRAINERS, last_value, settle
from workers.training import TrainResult

OBJECTIVE = {"metric": "val_accuracy", "direction": "maximize"}


def _result(accuracies: list[float], stopped: bool) -> TrainResult:
    rows = [{"epoch": e, "val_accuracy": a} for e, a in enumerate(accuracies, start=1)]
    return TrainResult(
        metrics=rows,
        final=rows[-1] if rows else {},
        best={"val_accuracy": max(accuracies)} if accuracies else {},
        param_count=10,
        train_seconds=1.0,
        setup_seconds=0.1,
        seed=1,
        device={"device": "cpu"},
        dataset={},
        dataset_fingerprint="f",
        stopped_early=stopped,
    )


def test_a_pruned_trial_records_its_last_epoch_and_the_value_there() -> None:
    extra: dict = {}
    state, result, error = settle(
        _result([0.5, 0.8, 0.6], stopped=True), OBJECTIVE, extra, stopping=False, pruning=True
    )
    assert (state, error) == (TrialState.PRUNED, None)
    assert extra["pruned_epoch"] == 3
    assert result["objective"] == 0.6  # the last value, as Optuna has a pruned trial
    assert result["best"] == {"val_accuracy": 0.8} and result["epochs"] == 3


def test_a_request_after_the_last_epoch_leaves_the_trial_complete() -> None:
    extra: dict = {}
    state, result, _ = settle(
        _result([0.5, 0.8], stopped=False), OBJECTIVE, extra, stopping=False, pruning=True
    )
    assert state == TrialState.COMPLETE and result["objective"] == 0.8
    assert "pruned_epoch" not in extra


def test_a_cancel_wins_over_a_prune() -> None:
    state, _, error = settle(
        _result([0.5], stopped=True), OBJECTIVE, {}, stopping=True, pruning=True
    )
    assert state == TrialState.CANCELLED and "cancelled" in (error or "")


def test_pruned_before_any_epoch_has_epoch_0_and_no_objective() -> None:
    extra: dict = {}
    state, result, _ = settle(
        _result([], stopped=True), OBJECTIVE, extra, stopping=False, pruning=True
    )
    assert state == TrialState.PRUNED and extra["pruned_epoch"] == 0
    assert result["objective"] is None
    assert last_value(_result([math.nan], stopped=True), "val_accuracy") is None


def test_every_kind_names_a_trainer_of_the_table() -> None:
    """The worker trains each kind with the trainer its kind names (`TrialKind.trainer`)."""
    assert sorted(kind.trainer for kind in KINDS) == sorted(TRAINERS)
