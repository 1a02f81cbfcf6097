"""The Caffe trial loop (`workers.training.caffe.loop`): iterations, the test schedule as epoch
rows, iter_size, stopping, seeds and the errors a trial ends with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from core.errors import TrainingError
from core.spec.caffe.prototxt import parse
from core.spec.sweep import load_spec
from scheduler.expand import expand
from workers.training.caffe.loop import CaffeTrainer, train_caffe

NET = """name: "Small"
layer { name: "data" type: "Input" top: "data" top: "label"
  input_param { shape { dim: 16 dim: 1 dim: 8 dim: 8 } shape { dim: 16 } } }
layer { name: "scale" type: "Power" bottom: "data" top: "scaled" power_param { scale: 0.0625 } }
layer { name: "ip1" type: "InnerProduct" bottom: "scaled" top: "ip1"
  inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { name: "accuracy" type: "Accuracy" bottom: "ip1" bottom: "label" top: "accuracy"
  include { phase: TEST } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip1" bottom: "label" top: "loss" }
"""
SOLVER = """base_lr: 0.1
lr_policy: "step"
gamma: 0.5
stepsize: 10
momentum: 0.9
max_iter: 25
test_iter: 3
test_interval: 10
random_seed: 7
"""


def _config(solver: str = SOLVER, net: str = NET) -> dict[str, Any]:
    spec = load_spec({"name": "loop", "caffe": {"net_text": net, "solver_text": solver},
                      "dataset": {"name": "digits"}, "training": {"seed": 3}})  # fmt: skip
    (trial,) = expand(spec, with_config=True)
    return trial.config


def test_rows_follow_the_test_schedule_and_the_last_is_the_trained_net() -> None:
    seen: list[tuple[int, dict[str, float]]] = []
    result = train_caffe(_config(), on_epoch=lambda e, row: seen.append((e, row)))
    rows = result.metrics
    assert [e for e, _ in seen] == [1, 2, 3] and [r for _, r in seen] == rows
    assert [r["iteration"] for r in rows] == [10, 20, 25]  # every 10, and at max_iter
    assert [r["lr"] for r in rows] == [0.1, 0.05, 0.025]  # the rate of each row's last update
    for row in rows:
        assert set(row) == {"epoch", "iteration", "train_loss", "val_loss", "val_accuracy",
                            "lr", "epoch_seconds", "train_seconds"}  # fmt: skip
        assert 0 <= row["val_accuracy"] <= 1
    assert rows[-1]["val_loss"] < rows[0]["val_loss"]
    assert result.final == rows[-1] and result.best["val_accuracy"] == max(
        r["val_accuracy"] for r in rows
    )
    assert result.param_count == 64 * 10 + 10
    assert result.seed == 7  # the solver's random_seed wins over the trial's
    assert result.dataset["shape"] == [1, 8, 8]


def test_the_same_trial_twice_gives_the_same_rows() -> None:
    def strip(rows: list[dict[str, float]]) -> list[dict[str, float]]:
        return [{k: v for k, v in r.items() if k not in ("epoch_seconds", "train_seconds")}
                for r in rows]  # fmt: skip

    first, second = (strip(train_caffe(_config()).metrics) for _ in range(2))
    assert first == second


def test_without_testing_there_is_one_row_at_the_end() -> None:
    solver = SOLVER.replace("test_iter: 3\ntest_interval: 10\n", "")
    (row,) = train_caffe(_config(solver)).metrics
    assert row["iteration"] == 25 and "val_loss" not in row and row["train_loss"] > 0


def test_iter_size_runs_that_many_batches_per_update() -> None:
    trainer = CaffeTrainer(_config(SOLVER + "iter_size: 3\n"), None)
    batches = []
    real = trainer.train_batches.next
    trainer.train_batches.next = lambda: batches.append(1) or real()  # type: ignore[method-assign]
    trainer.run(None, None)
    assert len(batches) == 25 * 3


def test_should_stop_ends_the_trial_keeping_its_rows() -> None:
    calls = {"n": 0}

    def stop() -> bool:
        calls["n"] += 1
        return calls["n"] > 15  # during the second interval

    result = train_caffe(_config(), should_stop=stop)
    assert result.stopped_early and [r["iteration"] for r in result.metrics] == [10]


def test_float64_trials_train_in_float64() -> None:
    config = _config()
    config["execution"]["dtype"] = "float64"
    trainer = CaffeTrainer(config, None)
    assert all(info.param.dtype == torch.float64 for info in trainer.model.param_infos())


def test_a_non_finite_loss_fails_naming_the_iteration() -> None:
    net = NET.replace("power_param { scale: 0.0625 }", "power_param { power: -1 }")  # 1/0
    with pytest.raises(TrainingError, match=r"^loss became nan at iteration 0$"):
        train_caffe(_config(net=net))


def test_a_config_that_no_longer_builds_is_a_training_error() -> None:
    config = _config()
    net = parse(config["caffe"]["net_text"])
    assert net.get("name") == "Small"
    text = config["caffe"]["net_text"]
    config["caffe"]["net_text"] = text.replace("num_output: 10", "num_output: 0")
    expected = "the Caffe net or solver cannot be built: caffe.net: layer 'ip1'"
    with pytest.raises(TrainingError, match=expected):
        train_caffe(config)


def test_a_trial_reads_an_npz_file_of_images_from_the_datasets_folder(tmp_path: Path) -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    y = np.arange(200) % 2
    x = rng.normal(size=(200, 3, 6, 6)).astype(np.float32) + y[:, None, None, None] * 2
    np.savez(tmp_path / "blobs.npz", X=x, y=y)
    net = NET.replace("dim: 1 dim: 8 dim: 8", "dim: 3 dim: 6 dim: 6").replace(
        "num_output: 10", "num_output: 2"
    )
    spec = load_spec({"name": "npz", "caffe": {"net_text": net, "solver_text": SOLVER},
                      "dataset": {"path": "blobs.npz"}})  # fmt: skip
    (trial,) = expand(spec, with_config=True)
    result = train_caffe(trial.config, data_dir=tmp_path)
    assert result.dataset["shape"] == [3, 6, 6] and result.dataset["n_classes"] == 2
    assert result.final["val_accuracy"] > 0.9
    assert result.param_count == 3 * 6 * 6 * 2 + 2


def test_a_trial_reads_a_folder_of_pngs_by_class(tmp_path: Path) -> None:
    import numpy as np
    from PIL import Image

    for label, value in (("dark", 20), ("light", 220)):
        (tmp_path / "tones" / label).mkdir(parents=True)
        for i in range(12):
            Image.fromarray(np.full((8, 8), value + i, dtype=np.uint8)).save(
                tmp_path / "tones" / label / f"{i}.png"
            )
    net = NET.replace("power_param { scale: 0.0625 }", "power_param { scale: 0.00390625 }")
    spec = load_spec({"name": "folder", "caffe": {"net_text": net, "solver_text": SOLVER},
                      "dataset": {"path": "tones", "validation_fraction": 0.25}})  # fmt: skip
    (trial,) = expand(spec, with_config=True)
    result = train_caffe(trial.config, data_dir=tmp_path)
    assert result.dataset["source"] == "tones" and result.dataset["shape"] == [1, 8, 8]
    assert result.dataset["n_classes"] == 2 and result.dataset["n_train"] == 18
    assert len(result.dataset_fingerprint) == 64
