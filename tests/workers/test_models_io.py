"""A kept model file back to a module (`workers.models_io`, `sweepstack.load_model`), with
no store: the module rebuilt from the file's config gives what the trained one gave, in
each format; anything but a whole model file of ours is refused cleanly, naming why."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save as st_save

import sweepstack
from core.errors import ConfigError
from core.spec.config import TrialConfig
from workers import models_io
from workers.models_io import CheckpointError, ExportError, MissingExtra, load_model_bytes
from workers.training.checkpoints import model_file, pack
from workers.training.models import build_mlp

CONFIG = TrialConfig.model_validate({
    "dataset": {"name": "iris"},
    "model": {"hidden_units": 16, "hidden_layers": 2, "batch_norm": True, "dropout": 0.2},
    "training": {"epochs": 1},
})  # fmt: skip


def _trained(dtype: torch.dtype = torch.float32) -> tuple[torch.nn.Module, dict, bytes]:
    torch.manual_seed(1)
    module = build_mlp(CONFIG.model, 4, 3, dtype=dtype)
    with torch.no_grad():  # batch norm statistics other than the defaults
        module.train()(torch.randn(32, 4, dtype=dtype) * 3 + 1)
    meta = {"kind": "mlp", "config": CONFIG.model_dump(mode="json"), "n_in": 4, "n_out": 3,
            "task": "classification", "dtype": str(dtype).removeprefix("torch.")}  # fmt: skip
    return module.eval(), meta, model_file(module, meta)


# TorchScript is deprecated by PyTorch, and still what the torchscript format is for.
@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_rebuilt_module_gives_what_the_trained_one_gave(dtype: torch.dtype) -> None:
    module, meta, data = _trained(dtype)
    loaded, read = load_model_bytes(data)
    assert read == meta and not loaded.training
    x = torch.randn(7, 4, dtype=dtype)
    with torch.no_grad():
        assert torch.equal(loaded(x), module(x))
        scripted = torch.jit.load(io.BytesIO(models_io.to_torchscript(loaded, read)))
        assert torch.equal(scripted(x), module(x))


def test_load_model_reads_a_file_and_names_what_it_cannot(tmp_path: Path) -> None:
    module, _, data = _trained()
    path = tmp_path / "m.safetensors"
    path.write_bytes(data)
    x = torch.randn(3, 4)
    with torch.no_grad():
        assert torch.equal(sweepstack.load_model(path)(x), module(x))
        assert torch.equal(sweepstack.load_model(str(path))(x), module(x))
    with pytest.raises(FileNotFoundError, match="no model file"):
        sweepstack.load_model(tmp_path / "missing.safetensors")
    with pytest.raises(ConfigError, match="SWEEPSTACK_MONGO_URL"):
        sweepstack.load_model("0123456789ab-0123456789abcdef")


def _with_meta(**changes: object) -> bytes:
    module, meta, _ = _trained()
    return model_file(module, {**meta, **changes})


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (lambda: _trained()[2][:-10], "cut short|cannot be read"),
        (lambda: pack({"w": torch.zeros(2)}, {}), "not a sweepstack model file"),
        (lambda: b"\x00" * 4, "cut short"),
        (lambda: _with_meta(kind="keras"), "kind 'keras' cannot be rebuilt here"),
        (lambda: _with_meta(kind="caffe"), "does not describe its Caffe net"),
        (lambda: _with_meta(dtype="Tensor"), "unknown dtype 'Tensor'"),
        (lambda: _with_meta(n_in=5), "do not fit its config"),
        (lambda: _with_meta(config={"model": {"hidden_units": -1}}), "do not fit its config"),
        (lambda: st_save({"x": torch.zeros(1)}, metadata={
            "format": "sweepstack-model-1", "meta": json.dumps([1])}), "not a JSON object"),
    ],
    ids=["truncated", "a-checkpoint", "tiny", "unknown-kind", "caffe-meta", "dtype", "shape",
         "config", "meta-list"],
)
def test_anything_but_a_whole_model_file_is_refused(data, why: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CheckpointError, match=why):
        load_model_bytes(data())


def test_onnx_without_its_extra_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module, meta, _ = _trained()
    monkeypatch.setattr(models_io, "_importable", lambda name: name != "onnxscript")
    with pytest.raises(MissingExtra, match=r"onnxscript package: .*sweepstack\[onnx\]"):
        models_io.to_onnx(module, meta, tmp_path / "m.onnx")
    assert not (tmp_path / "m.onnx").exists()


@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")
def test_a_caffe_net_loads_and_traces_and_onnx_says_it_cannot(tmp_path: Path) -> None:
    from core.spec.sweep import load_spec
    from scheduler.expand import expand
    from tests.workers.training.test_resume import CAFFE_NET, CAFFE_SOLVER, MemoryCheckpoints
    from workers.training.caffe.loop import train_caffe

    torch.set_num_threads(1)
    spec = load_spec({"name": "kept", "dataset": {"name": "digits"}, "training": {"seed": 3},
                      "caffe": {"net_text": CAFFE_NET, "solver_text": CAFFE_SOLVER}})  # fmt: skip
    (trial,) = expand(spec, with_config=True)
    keeper = MemoryCheckpoints(every=1000)
    train_caffe(trial.config, checkpoints=keeper)
    assert keeper.model is not None
    loaded, meta = load_model_bytes(model_file(*keeper.model))
    x = torch.randn(5, *meta["shape"])  # another batch size than the trace's
    with torch.no_grad():
        scores = loaded(x)
        assert scores.shape == (5, 10)
        traced = torch.jit.load(io.BytesIO(models_io.to_torchscript(loaded, meta)))
        assert torch.equal(traced(x), scores)
    with pytest.raises(ExportError, match="cannot be exported to ONNX: GuardOnDataDependent"):
        models_io.to_onnx(loaded, meta, tmp_path / "net.onnx")
    assert not (tmp_path / "net.onnx").exists()
