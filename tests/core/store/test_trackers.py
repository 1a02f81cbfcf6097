"""A sweep and its trials as the runs of an experiment tracker (`core.store.trackers`):
pure, from documents shaped as the store keeps them."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from core.store.trackers import sweep_run, trial_run


def test_a_trial_as_a_run() -> None:
    at = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
    doc = {
        "_id": "s1-k1", "sweep_id": "s1", "index": 3, "state": "complete", "attempt": 2,
        "seed": 7, "params": {"model": {"hidden_units": [64, 32], "dropout": None},
                              "training": {"lr": 0.1}},
        "result": {"final": {"epoch": 2, "val_accuracy": 0.9, "note": "text", "flag": True,
                             "only_at_end": 1.5}},
        "objective": 0.95, "train_seconds": 4.0, "param_count": 1000,
        "versions": {"torch": "2.13.0", "code": "0.1.0"}, "dataset_fingerprint": "abc",
        "error": None, "started_at": at, "finished_at": at,
    }  # fmt: skip
    rows = {2: {"epoch": 2, "val_accuracy": 0.9, "val_loss": math.nan},
            1: {"epoch": 1, "val_accuracy": 0.5, "val_loss": 1.0}}  # fmt: skip
    run = trial_run(doc, rows)
    assert run.params == {"model.hidden_units": [64, 32], "training.lr": 0.1}  # None: off
    assert [step for step, _ in run.curve] == [1, 2]  # by epoch, the step key left out
    assert run.curve[0][1] == {"val_accuracy": 0.5, "val_loss": 1.0}
    assert run.curve[1][1]["val_accuracy"] == 0.9 and math.isnan(run.curve[1][1]["val_loss"])
    assert run.last_step == 2
    assert run.final_only == {"only_at_end": 1.5, "objective": 0.95, "train_seconds": 4.0,
                              "param_count": 1000.0}  # fmt: skip
    assert run.tags["sweepstack.attempt"] == "2" and run.tags["sweepstack.seed"] == "7"
    assert run.tags["sweepstack.versions.torch"] == "2.13.0"
    assert run.tags["sweepstack.dataset_fingerprint"] == "abc"
    assert "sweepstack.error" not in run.tags
    assert run.start_ms == run.end_ms == int(at.timestamp() * 1000)
    assert run.metric_names == ["val_accuracy", "val_loss", "only_at_end", "objective",
                                "train_seconds", "param_count"]  # fmt: skip


def test_a_sweep_as_a_run() -> None:
    sweep = {
        "_id": "s1", "name": "quick", "objective": {"metric": "val_loss",
                                                    "direction": "minimize"},
        "spec": {"name": "quick", "dataset": {"name": "iris"}, "model": {"hidden_units": 8},
                 "search": {"algorithm": "random", "trials": 5}},
        "counts": {"queued": 1, "running": 0, "complete": 3, "failed": 1, "pruned": 0,
                   "cancelled": 0},
    }  # fmt: skip
    run = sweep_run(sweep, {"_id": "s1-k", "objective": 0.2})
    assert run.params["search.algorithm"] == "random" and run.params["search.trials"] == "5"
    assert run.params["pruning.algorithm"] == "none"
    assert run.params["counts.complete"] == "3" and run.params["trials"] == "5"
    assert run.metrics == {"objective": 0.2}
    assert run.tags["sweepstack.best_trial"] == "s1-k"
    assert not run.finished  # a trial is queued
