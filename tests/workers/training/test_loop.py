"""The training loop end to end on small real data: metrics, determinism, failures, stops."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from core.errors import TrainingError
from core.spec.config import TrialConfig
from workers.training import TrainResult, objective_value, train
from workers.training.loop import CHECK_EVERY_STEPS

CLASSIFICATION_KEYS = {
    "epoch",
    "train_loss",
    "val_loss",
    "val_accuracy",
    "lr",
    "epoch_seconds",
    "train_seconds",
}
REGRESSION_KEYS = {
    "epoch",
    "train_loss",
    "val_loss",
    "val_rmse",
    "lr",
    "epoch_seconds",
    "train_seconds",
}


def _config(**sections: dict[str, Any]) -> TrialConfig:
    """A quick digits trial; each keyword updates one section."""
    data: dict[str, dict[str, Any]] = {
        "dataset": {"name": "digits"},
        "model": {"hidden_layers": 2, "hidden_units": 64},
        "training": {"optimizer": "adam", "lr": 0.003, "batch_size": 64, "epochs": 2, "seed": 0},
        "execution": {"device": "cpu"},
    }
    for name, values in sections.items():
        if name == "dataset":
            data[name] = values
        else:
            data[name].update(values)
    return TrialConfig.from_dict(data)


def _without_time(rows: list[dict[str, float]]) -> list[dict[str, float]]:
    return [
        {k: v for k, v in row.items() if k not in ("epoch_seconds", "train_seconds")}
        for row in rows
    ]


def test_same_trial_twice_gives_identical_metrics() -> None:
    config = _config(model={"dropout": 0.2, "batch_norm": True})
    first, second = train(config), train(config)
    assert _without_time(first.metrics) == _without_time(second.metrics)
    assert first.param_count == second.param_count
    assert first.dataset_fingerprint == second.dataset_fingerprint
    other = train(_config(training={"seed": 1}))
    assert _without_time(other.metrics) != _without_time(first.metrics)


def test_cpu_seeding_gives_the_metrics_torch_manual_seed_gives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`seed_torch` seeds the CPU generator alone; a trial trained that way (dropout draws
    from it too) has bit for bit the metrics it had when `torch.manual_seed` seeded it."""
    import workers.training.loop as loop

    config = _config(model={"dropout": 0.3}, training={"seed": 7, "epochs": 3})
    fast = train(config)
    torch.manual_seed(12345)  # a different global state before the trial must not matter
    monkeypatch.setattr(loop, "seed_torch", lambda seed, device: torch.manual_seed(seed))
    full = train(config)
    assert _without_time(fast.metrics) == _without_time(full.metrics)
    assert len(fast.metrics) == 3


def test_digits_learns() -> None:
    result = train(_config(training={"epochs": 4}))
    assert result.final["val_accuracy"] > 0.9
    assert result.best["val_accuracy"] >= result.final["val_accuracy"]
    assert result.best["val_loss"] == min(row["val_loss"] for row in result.metrics)
    assert result.param_count == 64 * 64 + 64 + 64 * 64 + 64 + 64 * 10 + 10
    assert result.epochs_completed == 4 and not result.stopped_early
    assert result.device["device"] == "cpu" and result.device["threads"] == 1
    assert result.dataset["n_classes"] == 10
    json.dumps(result.to_dict())


def test_on_epoch_once_per_epoch_with_documented_keys() -> None:
    calls: list[tuple[int, dict[str, float]]] = []
    result = train(_config(training={"epochs": 3}), on_epoch=lambda e, m: calls.append((e, m)))
    assert [epoch for epoch, _ in calls] == [1, 2, 3]
    assert all(set(row) == CLASSIFICATION_KEYS for _, row in calls)
    assert [row for _, row in calls] == result.metrics
    assert result.final == result.metrics[-1]


def test_diverging_lr_is_a_training_error() -> None:
    config = _config(
        dataset={"name": "synthetic_regression", "samples": 400, "features": 8},
        training={"optimizer": "sgd", "lr": 100},
    )
    with pytest.raises(TrainingError) as caught:
        train(config)
    assert caught.value.reason.startswith("loss became inf at epoch 1, step ")


def test_should_stop_between_epochs() -> None:
    epochs_seen: list[int] = []
    result = train(
        _config(training={"epochs": 10}),
        on_epoch=lambda epoch, _: epochs_seen.append(epoch),
        should_stop=lambda: len(epochs_seen) >= 2,
    )
    assert result.stopped_early and result.epochs_completed == 2
    assert result.final == result.metrics[-1]


def test_should_stop_within_an_epoch() -> None:
    asked: list[int] = []

    def should_stop() -> bool:
        asked.append(1)
        return len(asked) >= 2  # the first ask is before epoch 1, the second mid-epoch

    # digits' 1437 training rows in batches of 8: far more than CHECK_EVERY_STEPS steps.
    assert CHECK_EVERY_STEPS < 1437 / 8
    result = train(_config(training={"batch_size": 8}), should_stop=should_stop)
    assert result.stopped_early and result.metrics == [] and result.final == {}
    assert objective_value(result, "val_accuracy", "maximize") is None


def test_regression_reports_rmse_in_target_units() -> None:
    config = _config(
        dataset={"name": "synthetic_regression", "samples": 400, "features": 8},
        training={"epochs": 3, "lr": 0.01},
    )
    result = train(config)
    assert all(set(row) == REGRESSION_KEYS for row in result.metrics)
    scale = result.final["val_rmse"] / math.sqrt(result.final["val_loss"])
    assert scale > 1  # the target's own standard deviation, not 1
    assert set(result.best) == {"val_loss", "val_rmse", "train_loss"}
    assert result.metrics[-1]["val_rmse"] < result.metrics[0]["val_rmse"]


def test_float64() -> None:
    result = train(_config(execution={"dtype": "float64"}, training={"epochs": 1}))
    assert result.device["dtype"] == "float64" and not result.device["mixed_precision"]
    assert math.isfinite(result.final["val_loss"])


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precisions_train_mixed(dtype: str) -> None:
    config = _config(execution={"dtype": dtype}, training={"epochs": 3})
    result = train(config)
    assert result.device["dtype"] == dtype and result.device["mixed_precision"]
    assert result.final["val_accuracy"] > 0.8


def test_unavailable_cuda_is_a_training_error() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(TrainingError, match=r"execution\.device cuda requested but CUDA"):
        train(_config(execution={"device": "cuda"}))


def test_model_too_large_is_a_training_error() -> None:
    config = _config(model={"hidden_layers": 3, "hidden_units": 1_000_000})
    with pytest.raises(TrainingError, match=r"model too large .* hidden layer 2"):
        train(config)


def test_zero_epochs_evaluates_the_untrained_model() -> None:
    calls: list[int] = []
    result = train(_config(training={"epochs": 0}), on_epoch=lambda e, _: calls.append(e))
    assert calls == [] and result.metrics == [] and not result.stopped_early
    assert set(result.final) == CLASSIFICATION_KEYS and result.final["epoch"] == 0
    assert 0 <= result.final["val_accuracy"] < 0.5
    assert objective_value(result, "val_accuracy", "maximize") == result.final["val_accuracy"]


def test_objective_value() -> None:
    result = TrainResult(
        metrics=[
            {"epoch": 1, "val_loss": 0.5, "val_accuracy": 0.8},
            {"epoch": 2, "val_loss": 0.4, "val_accuracy": 0.7},
        ],
        final={"epoch": 2, "val_loss": 0.4, "val_accuracy": 0.7},
        best={},
        param_count=1,
        train_seconds=0.0,
        setup_seconds=0.0,
        seed=0,
        device={},
        dataset={},
        dataset_fingerprint="",
    )
    assert objective_value(result, "val_accuracy", "maximize") == 0.8
    assert objective_value(result, "val_loss", "minimize") == 0.4
    assert objective_value(result, "val_rmse", "minimize") is None


def test_step_schedule_shows_in_lr() -> None:
    config = _config(training={"epochs": 3, "lr_schedule": "step", "lr_step_size": 1})
    assert [row["lr"] for row in train(config).metrics] == pytest.approx([3e-3, 3e-4, 3e-5])


def test_batch_norm_leaves_out_a_lone_last_row() -> None:
    # iris trains on 120 rows; batches of 7 leave one row over, which batch norm cannot take.
    config = _config(
        dataset={"name": "iris"}, model={"batch_norm": True}, training={"batch_size": 7}
    )
    assert math.isfinite(train(config).final["train_loss"])


def test_batch_norm_with_batches_of_one_is_a_training_error() -> None:
    config = _config(model={"batch_norm": True}, training={"batch_size": 1})
    with pytest.raises(TrainingError, match=r"model\.batch_norm needs batches of 2"):
        train(config)


def test_unseeded_trial_records_its_seed() -> None:
    config = _config(training={"seed": None, "epochs": 1})
    result = train(config)
    replay = train(_config(training={"seed": result.seed, "epochs": 1}))
    assert _without_time(replay.metrics) == _without_time(result.metrics)


def test_file_dataset_under_data_dir(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 5))
    frame = pd.DataFrame(x, columns=[f"f{i}" for i in range(5)])
    frame["target"] = (x[:, 0] + x[:, 1] > 0).astype(int)
    frame.to_csv(tmp_path / "two.csv", index=False)
    config = _config(dataset={"path": "two.csv"}, training={"epochs": 5})
    result = train(config, data_dir=tmp_path)
    assert result.dataset["source"] == "two.csv"
    assert result.final["val_accuracy"] > 0.8


def test_missing_dataset_file_is_a_training_error(tmp_path: Path) -> None:
    with pytest.raises(TrainingError, match=r"dataset\.path gone\.csv"):
        train(_config(dataset={"path": "gone.csv"}), data_dir=tmp_path)


def _raise(error: BaseException) -> Callable[[int, dict[str, float]], None]:
    def on_epoch(epoch: int, metrics: dict[str, float]) -> None:
        raise error

    return on_epoch


def test_cuda_out_of_memory_is_a_training_error() -> None:
    error = torch.OutOfMemoryError(
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 "
        "GiB of which 1.25 GiB is free. Process 12 has 77.9 GiB memory in use. Of the allocated"
    )
    with pytest.raises(TrainingError) as caught:
        train(_config(training={"epochs": 1}), on_epoch=_raise(error))
    assert caught.value.reason == (
        "CUDA out of memory: Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 "
        "GiB of which 1.25 GiB is free"
    )


def test_cpu_out_of_memory_is_a_training_error() -> None:
    error = RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate")
    with pytest.raises(TrainingError, match=r"^out of memory on the CPU: \[enforce"):
        train(_config(training={"epochs": 1}), on_epoch=_raise(error))


def test_other_errors_are_not_disguised() -> None:
    with pytest.raises(RuntimeError, match="a bug"):
        train(_config(training={"epochs": 1}), on_epoch=_raise(RuntimeError("a bug")))
