"""A training function run in this process (`workers.trainable.run_trainable`): what it is
given, what its reports become, and how each way of ending is told. The store, the broker
and worker processes are in tests/integration/test_trainables.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.errors import TrainingError
from tests import trainables
from workers.trainable import run_trainable
from workers.training.loop import TrainResult

ACCURACY = {"metric": "val_accuracy", "direction": "maximize"}


@pytest.fixture(autouse=True)
def test_trainables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.syspath_prepend(str(trainables.install(tmp_path / "site")))
    yield


def run(
    name: str,
    params: dict[str, Any] | None = None,
    *,
    epochs: int = 2,
    stop: bool = False,
    objective: dict[str, str] = ACCURACY,
    dataset: dict[str, Any] | None = None,
) -> tuple[TrainResult, list[tuple[int, dict[str, Any]]], dict[str, Any]]:
    """Run `name` on a CPU with seed 7; (its result, the rows it reported, the record's extra)."""
    rows: list[tuple[int, dict[str, Any]]] = []
    extra: dict[str, Any] = {"versions": {"sweepstack": "0.1.0"}}
    config: dict[str, Any] = {
        "trainable": name,
        "params": params or {},
        "training": {"epochs": epochs, "seed": 7},
        "execution": {"device": "cpu"},
    }
    if dataset is not None:
        config["dataset"] = dataset
    result = run_trainable(
        config,
        trial_id="t-1",
        attempt=1,
        on_epoch=lambda epoch, metrics: rows.append((epoch, metrics)),
        should_stop=lambda: stop,
        data_dir=None,
        objective=objective,
        extra=extra,
    )
    return result, rows, extra


def test_the_example_cnn_trains_on_digits_and_reports_every_epoch() -> None:
    result, rows, extra = run("digits_cnn", {"channels": 4, "lr": 0.01}, dataset={"name": "digits"})
    assert [epoch for epoch, _ in rows] == [1, 2]
    assert set(rows[0][1]) == {"epoch", "train_loss", "val_loss", "val_accuracy", "train_seconds"}
    assert 0 < rows[0][1]["train_seconds"] < rows[1][1]["train_seconds"]
    assert result.final == rows[-1][1] and result.final["val_accuracy"] > 0.7
    assert result.best["val_accuracy"] == max(m["val_accuracy"] for _, m in rows)
    assert not result.stopped_early and result.dataset["source"] == "digits"
    assert len(result.dataset_fingerprint) == 64 and result.device["device"] == "cpu"
    assert extra["trainable"] == {
        "name": "digits_cnn",
        "entry_point": "sweepstack_examples.digits_cnn:train",
        "package": "sweepstack-examples",
        "version": "0.1.0",
    }
    assert extra["versions"] == {"sweepstack": "0.1.0", "sweepstack-examples": "0.1.0"}


def test_the_scikit_learn_example_and_a_stop_request() -> None:
    result, rows, _ = run("digits_sgd", {"alpha": 0.001}, epochs=3, dataset={"name": "digits"})
    assert len(rows) == 3 and result.final["val_accuracy"] > 0.8
    stopped, rows, _ = run("digits_sgd", epochs=3, stop=True, dataset={"name": "digits"})
    assert len(rows) == 1 and stopped.stopped_early  # asked after its first epoch


def test_a_function_may_return_its_final_metrics_instead_of_reporting() -> None:
    result, rows, extra = run(
        "test_final_only", {"x": 3}, objective={"metric": "score", "direction": "maximize"}
    )
    assert rows == [] and result.final == {"score": 6.0, "seed_seen": 7.0}
    assert extra["trainable"]["package"] == trainables.DIST


def test_a_function_that_never_reports_the_objective_fails_saying_what_it_reported() -> None:
    with pytest.raises(TrainingError, match="never reported the objective's metric 'val_acc"):
        run("test_final_only")


def test_what_a_function_raises_is_raised_and_memory_is_said_so() -> None:
    with pytest.raises(ValueError, match=r"^bad data$"):
        run("test_raises", {"message": "bad data"})
    with pytest.raises(TrainingError, match=r"^out of memory on the CPU"):
        run("test_out_of_memory")


def test_an_unknown_name_on_the_worker_fails_listing_the_installed() -> None:
    with pytest.raises(TrainingError, match="'gone' is not installed on this worker") as caught:
        run("gone")
    assert "digits_cnn" in caught.value.reason and "test_slow" in caught.value.reason


@pytest.mark.parametrize(
    ("report", "rule"),
    [
        ({"epoch": 0, "val_loss": 1.0}, "epoch must be an integer >= 1"),
        ({"epoch": 1}, "give 1 to 64 metrics"),
        ({"epoch": 1, "val_loss": "low"}, "val_loss must be a number, got str"),
        ({"epoch": 1, "val_loss": float("nan")}, "val_loss is nan"),
    ],
)
def test_a_bad_report_fails_the_trial_naming_the_rule(report: dict[str, Any], rule: str) -> None:
    from workers.trainable import TrialContext

    ctx = TrialContext("t", 1, 0, 1, "cpu", None, {}, lambda e, m: None, lambda: False)
    epoch = report.pop("epoch")
    with pytest.raises(TrainingError, match=rule):
        ctx.report(epoch, **report)


def test_epochs_must_rise() -> None:
    from workers.trainable import TrialContext

    ctx = TrialContext("t", 1, 0, 1, "cpu", None, {}, lambda e, m: None, lambda: False)
    ctx.report(2, val_loss=1.0)
    with pytest.raises(TrainingError, match="epochs must rise, the last was 2"):
        ctx.report(2, val_loss=0.5)
    with pytest.raises(TrainingError, match="the spec has no dataset section"):
        ctx.dataset()
