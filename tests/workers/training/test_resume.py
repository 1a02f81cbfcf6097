"""Resuming from a checkpoint gives what an uninterrupted run gives (#30), with no store:
a plain trial and the members of a fused group, checkpointed after epoch 5, stopped after
epoch 7 (as a kill would), and trained again from the checkpoint's bytes, end with the
same rows as a run never stopped; a checkpoint cut short is refused cleanly."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from core.spec.artifacts import Artifacts
from core.spec.config import TrialConfig
from workers.training import train
from workers.training.checkpoints import (
    CheckpointError,
    model_file,
    pack,
    read_model_file,
    unpack,
)
from workers.training.datasets import load_dataset
from workers.training.epochs import Capture
from workers.training.fused import train_fused

EPOCHS = 10


class MemoryCheckpoints:
    """`Checkpointing` into a dict: the last checkpoint's bytes, as the store would keep them."""

    def __init__(self, every: int, saved: bytes | None = None) -> None:
        self.policy = Artifacts(checkpoint_every=every)
        self.saved = saved
        self.resumed_at: int | None = None
        self.notes: list[str] = []
        self.model: tuple[Any, dict[str, Any]] | None = None

    def resumed(self) -> tuple[Any, dict[str, Any]] | None:
        return None if self.saved is None else unpack(self.saved)

    def resuming(self, meta: dict[str, Any]) -> None:
        self.resumed_at = meta["epoch"]

    def unusable(self, err: Exception) -> None:
        self.notes.append(str(err))
        self.saved = None

    def after_epoch(self, epoch: int, capture: Capture) -> None:
        if self.policy.due(epoch, 0.0):
            state, meta = capture()
            self.save(epoch, state, meta)

    def epoch_model(self, epoch: int, row: dict[str, float], snapshot: Any) -> None:
        """The last epoch's weights are kept here (the store's keeper takes the best)."""

    def save(self, epoch: int, state: Any, meta: dict[str, Any]) -> None:
        self.saved = pack(state, {**meta, "epoch": epoch})

    def save_file(self, name: str, data: bytes) -> dict[str, Any]:
        raise AssertionError("no files here")

    def trained(self, model: Any, meta: dict[str, Any]) -> None:
        self.model = (model, meta)


def _config(**training: Any) -> TrialConfig:
    return TrialConfig.model_validate(
        {
            "dataset": {
                "name": "synthetic_classification", "samples": 400, "features": 8, "classes": 3
            },
            "model": {"hidden_units": training.pop("units", 16), "hidden_layers": 2,
                      "dropout": 0.2, "batch_norm": training.pop("batch_norm", False)},
            "training": {"epochs": EPOCHS, "batch_size": 32, "seed": 3, "optimizer": "adam",
                         "lr": 0.01, "lr_schedule": "step", "lr_step_size": 3, **training},
            "execution": {"device": "cpu"},
        }
    )


def _stopper(after: int):  # type: ignore[no-untyped-def]
    seen = {"epoch": 0}

    def on_epoch(epoch: int, row: dict[str, float]) -> None:
        seen["epoch"] = epoch

    return on_epoch, lambda: seen["epoch"] >= after


@pytest.mark.parametrize("optimizer", ["adam", "momentum", "rmsprop"])
def test_a_plain_trial_resumed_matches_an_uninterrupted_one(optimizer: str) -> None:
    torch.set_num_threads(1)
    config = _config(optimizer=optimizer)
    whole = train(config)
    first = MemoryCheckpoints(every=5)
    on_epoch, stop = _stopper(7)
    cut = train(config, on_epoch=on_epoch, should_stop=stop, checkpoints=first)
    assert len(cut.metrics) == 7 and cut.stopped_early and first.model is None
    again = MemoryCheckpoints(every=5, saved=first.saved)
    resumed_rows: list[int] = []
    rest = train(config, on_epoch=lambda e, r: resumed_rows.append(e), checkpoints=again)
    assert again.resumed_at == 5 and resumed_rows == list(range(6, EPOCHS + 1))
    assert [r["epoch"] for r in rest.metrics] == list(range(1, EPOCHS + 1))
    for got, want in zip(rest.metrics, whole.metrics, strict=True):
        for key in ("train_loss", "val_loss", "val_accuracy", "lr"):
            assert got[key] == want[key], (got["epoch"], key)
    model, meta = again.model  # type: ignore[misc]
    weights, read = read_model_file(model_file(model, meta))
    assert read["n_in"] == 8 and read["n_out"] == 3 and set(weights) == set(model.state_dict())


@pytest.mark.parametrize("batch_norm", [False, True])
def test_fused_members_resumed_match_an_uninterrupted_group(batch_norm: bool) -> None:
    torch.set_num_threads(1)
    settings = ((8, 0.01), (16, 0.003), (12, 0.02))
    configs = [_config(units=u, lr=lr, batch_norm=batch_norm) for u, lr in settings]
    whole = train_fused(configs)
    first = [MemoryCheckpoints(every=5) for _ in configs]
    seen = {"epoch": 0}

    def on_epoch(k: int, epoch: int, row: dict[str, float]) -> None:
        seen["epoch"] = epoch

    train_fused(configs, on_epoch=on_epoch, should_stop=lambda k: seen["epoch"] >= 7,
                checkpoints=first)  # fmt: skip
    again = [MemoryCheckpoints(every=5, saved=c.saved) for c in first]
    rest = train_fused(configs, checkpoints=again)
    assert [c.resumed_at for c in again] == [5, 5, 5]
    for got, want in zip(rest, whole, strict=True):
        assert not isinstance(got, Exception) and not isinstance(want, Exception)
        assert len(got.metrics) == EPOCHS
        for a, b in zip(got.metrics, want.metrics, strict=True):
            for key in ("train_loss", "val_loss", "val_accuracy", "lr"):
                assert a[key] == pytest.approx(b[key], rel=1e-6, abs=1e-9), (a["epoch"], key)
    # Each kept model is the member as a plain model: it scores what the fused one did.
    data = load_dataset(configs[0].dataset, None)
    x_val = torch.tensor(data.x_val, dtype=torch.float32)
    for config, saver, outcome in zip(configs, again, rest, strict=True):
        model, meta = saver.model  # type: ignore[misc]
        assert meta["config"]["model"]["hidden_units"] == config.model.hidden_units
        model.eval()
        with torch.no_grad():
            hits = (model(x_val).argmax(1).numpy() == data.y_val).mean()
        assert hits == pytest.approx(outcome.metrics[-1]["val_accuracy"])  # type: ignore[union-attr]


def test_a_resume_with_fewer_members_and_another_start_splits_the_group() -> None:
    torch.set_num_threads(1)
    configs = [_config(units=u) for u in (8, 16)]
    whole = train_fused(configs)
    first = [MemoryCheckpoints(every=5) for _ in configs]
    seen = {"epoch": 0}

    def on_epoch(k: int, epoch: int, row: dict[str, float]) -> None:
        seen["epoch"] = epoch

    train_fused(configs, on_epoch=on_epoch, should_stop=lambda k: seen["epoch"] >= 6,
                checkpoints=first)  # fmt: skip
    # The second member's checkpoint is lost: it trains from epoch 1, the first from 6.
    again = [MemoryCheckpoints(every=5, saved=first[0].saved), MemoryCheckpoints(every=5)]
    rest = train_fused(configs, checkpoints=again)
    assert [c.resumed_at for c in again] == [5, None]
    for got, want in zip(rest, whole, strict=True):
        assert [r["val_loss"] for r in got.metrics] == pytest.approx(  # type: ignore[union-attr]
            [r["val_loss"] for r in want.metrics], rel=1e-6  # type: ignore[union-attr]
        )


def test_a_checkpoint_cut_short_or_of_another_net_starts_from_epoch_1() -> None:
    torch.set_num_threads(1)
    config = _config()
    first = MemoryCheckpoints(every=5)
    train(config, checkpoints=first)
    assert first.saved is not None
    with pytest.raises(CheckpointError):
        unpack(first.saved[: len(first.saved) // 2])
    other = MemoryCheckpoints(every=5)
    train(_config(units=32), checkpoints=other)
    wrong = MemoryCheckpoints(every=100, saved=other.saved)
    rows: list[int] = []
    result = train(config, on_epoch=lambda e, r: rows.append(e), checkpoints=wrong)
    assert rows == list(range(1, EPOCHS + 1)) and len(result.metrics) == EPOCHS
    assert wrong.notes and "does not fit" in wrong.notes[0]
    alone = train(config).metrics
    assert [r["val_loss"] for r in result.metrics] == [r["val_loss"] for r in alone]


CAFFE_NET = """name: "Small"
layer { name: "data" type: "Input" top: "data" top: "label"
  input_param { shape { dim: 16 dim: 1 dim: 8 dim: 8 } shape { dim: 16 } } }
layer { name: "scale" type: "Power" bottom: "data" top: "scaled" power_param { scale: 0.0625 } }
layer { name: "ip1" type: "InnerProduct" bottom: "scaled" top: "ip1"
  inner_product_param { num_output: 32 weight_filler { type: "xavier" } } }
layer { name: "relu" type: "ReLU" bottom: "ip1" top: "ip1" }
layer { name: "drop" type: "Dropout" bottom: "ip1" top: "ip1" dropout_param { dropout_ratio: 0.2 } }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
  inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { name: "accuracy" type: "Accuracy" bottom: "ip2" bottom: "label" top: "accuracy"
  include { phase: TEST } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }
"""
CAFFE_SOLVER = """type: "Adam"
base_lr: 0.01
lr_policy: "step"
gamma: 0.5
stepsize: 20
max_iter: 60
test_iter: 3
test_interval: 10
random_seed: 7
"""


def test_a_caffe_net_resumed_by_iteration_matches_an_uninterrupted_one() -> None:
    from core.spec.sweep import load_spec
    from scheduler.expand import expand
    from workers.training.caffe.loop import train_caffe

    torch.set_num_threads(1)
    spec = load_spec({"name": "resume", "dataset": {"name": "digits"}, "training": {"seed": 3},
                      "caffe": {"net_text": CAFFE_NET, "solver_text": CAFFE_SOLVER}})  # fmt: skip
    (trial,) = expand(spec, with_config=True)
    whole = train_caffe(trial.config)
    first = MemoryCheckpoints(every=2)
    on_epoch, stop = _stopper(3)
    train_caffe(trial.config, on_epoch=on_epoch, should_stop=stop, checkpoints=first)
    again = MemoryCheckpoints(every=2, saved=first.saved)
    rest = train_caffe(trial.config, checkpoints=again)
    assert again.resumed_at == 2
    assert [r["iteration"] for r in rest.metrics] == [r["iteration"] for r in whole.metrics]
    for got, want in zip(rest.metrics, whole.metrics, strict=True):
        for key in ("train_loss", "val_loss", "val_accuracy", "lr"):
            assert got[key] == pytest.approx(want[key], rel=1e-6, abs=1e-12), (got["epoch"], key)
    assert again.model is not None and again.model[1]["kind"] == "caffe"


def test_a_data_parallel_trial_resumes_every_rank_from_rank_0s_state() -> None:
    torch.set_num_threads(2)
    config = TrialConfig.model_validate(
        {
            "dataset": {"name": "synthetic_classification", "samples": 400, "features": 8},
            "model": {"hidden_units": 16, "hidden_layers": 2},
            "training": {"epochs": 6, "batch_size": 32, "seed": 3, "optimizer": "adam",
                         "lr": 0.01, "lr_schedule": "step", "lr_step_size": 2},
            "execution": {"device": "cpu", "dtype": "float64",
                          "parallel": {"world_size": 2, "strategy": "allreduce"}},
        }
    )  # fmt: skip
    whole = train(config)
    first = MemoryCheckpoints(every=2)
    on_epoch, stop = _stopper(3)
    cut = train(config, on_epoch=on_epoch, should_stop=stop, checkpoints=first)
    assert cut.stopped_early and first.saved is not None
    again = MemoryCheckpoints(every=2, saved=first.saved)
    reported: list[int] = []
    rest = train(config, on_epoch=lambda e, r: reported.append(e), checkpoints=again)
    assert again.resumed_at == 2 and reported == [3, 4, 5, 6]
    assert [r["epoch"] for r in rest.metrics] == list(range(1, 7))
    for got, want in zip(rest.metrics, whole.metrics, strict=True):
        for key in ("train_loss", "val_loss", "val_accuracy", "lr"):
            assert got[key] == pytest.approx(want[key], rel=1e-6, abs=1e-12), (got["epoch"], key)
    model, meta = again.model  # type: ignore[misc]
    assert meta["n_in"] == 8 and sum(p.numel() for p in model.parameters()) == rest.param_count


def test_a_kept_caffe_net_scores_the_validation_batches_as_its_trial_did() -> None:
    from core.spec.sweep import load_spec
    from scheduler.expand import expand
    from workers.training.caffe.images import load_images, sequential_batch
    from workers.training.caffe.inference import caffe_module
    from workers.training.caffe.loop import train_caffe

    torch.set_num_threads(1)
    spec = load_spec({"name": "kept", "dataset": {"name": "digits"}, "training": {"seed": 3},
                      "caffe": {"net_text": CAFFE_NET, "solver_text": CAFFE_SOLVER}})  # fmt: skip
    (trial,) = expand(spec, with_config=True)
    keeper = MemoryCheckpoints(every=1000)
    result = train_caffe(trial.config, checkpoints=keeper)
    model, meta = keeper.model  # type: ignore[misc]
    weights, read = read_model_file(model_file(model, meta))
    module = caffe_module(weights, read)
    images = load_images(_caffe_dataset(trial.config))
    hits = 0
    with torch.no_grad():
        for step in range(3):  # test_iter batches of the TEST data layer's 16 rows
            x, y = sequential_batch(images.x_val, images.y_val, 16, step)
            hits += int((module(x).argmax(1) == y).sum())
    assert hits / 48 == pytest.approx(result.metrics[-1]["val_accuracy"])


def _caffe_dataset(config: dict[str, Any]) -> Any:
    from core.spec.caffe.trial import CaffeTrialConfig

    return CaffeTrialConfig.model_validate(config).dataset
