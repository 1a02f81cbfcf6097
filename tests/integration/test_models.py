"""Getting a sweep's models (#30 item 4) on real RabbitMQ, a real MongoDB wire-protocol
server and a real Celery worker: after a small digits sweep that keeps its 2 best models,
``sweepstack model`` writes the best trial's in each format (safetensors, torchscript,
onnx), and each, loaded as its users load it (`sweepstack.load_model`, ``torch.jit.load``,
onnxruntime), scores on the trial's validation split exactly its objective, the best epoch's
val_accuracy (the kept weights are the best epoch's). The worst trial has no model, and the
command says why."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import pytest
import torch

import sweepstack
from core.errors import NoModel
from core.spec.config import TrialConfig
from tests.integration.stack import ROOT, Stack
from workers.training.datasets import load_dataset

pytestmark = pytest.mark.integration

SPEC = """\
name: models-{tag}
dataset: {{name: digits}}
model: {{hidden_units: [8, 32, 64]}}
training: {{optimizer: adam, lr: 0.01, epochs: 3, batch_size: 64, seed: 0}}
execution: {{device: cpu, fuse: off}}
objective: {{metric: val_accuracy, direction: max}}
artifacts: {{keep: top_k, top_k: 2}}
"""
#: --format -> the file's suffix.
FORMATS = {"safetensors": "safetensors", "torchscript": "pt", "onnx": "onnx"}


def _sweepstack(stack: Stack, *args: str) -> subprocess.Popen[str]:
    """`sweepstack ARGS` on the stack's store (SWEEPSTACK_MONGO_URL), as a user runs it."""
    return subprocess.Popen(
        [sys.executable, "-m", "cli.main", *args], cwd=ROOT, env=stack.env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _accuracy(logits: np.ndarray, labels: np.ndarray) -> float:
    return int((logits.argmax(axis=1) == labels).sum()) / len(labels)


# TorchScript is deprecated by PyTorch, and still what the torchscript format is for.
@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")
def test_the_best_model_in_every_format_scores_what_the_trial_recorded(
    stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack.start_worker()
    sweep_id, count = stack.submit(SPEC.format(tag=uuid.uuid4().hex[:6]))
    assert count == 3
    assert stack.wait_finished(sweep_id, timeout=180)["complete"] == 3, stack.logs()
    ranked = [t["_id"] for t in stack.store.reads.best(sweep_id, 3)]
    best, worst = ranked[0], ranked[-1]
    trial: dict[str, Any] = stack.store.reads.get_trial(best, with_metrics=False)
    recorded = trial["objective"]  # the best epoch's val_accuracy: its weights are kept
    doc = stack.store.artifacts.find(best, "model", "model")
    assert doc is not None and doc["meta"]["metric"] == "val_accuracy"
    assert stack.store.artifacts.find(worst, "model", "model") is None

    # The three formats at once (each command starts torch); safetensors by the sweep's id,
    # which takes its best kept model.
    paths = {fmt: tmp_path / f"best.{suffix}" for fmt, suffix in FORMATS.items()}
    runs = {
        fmt: _sweepstack(stack, "model", sweep_id if fmt == "safetensors" else best,
                         "-o", str(path), "--format", fmt)
        for fmt, path in paths.items()
    }  # fmt: skip
    refused = _sweepstack(stack, "model", worst, "-o", str(tmp_path / "worst.safetensors"))
    for fmt, proc in runs.items():
        _, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, (fmt, err)
        assert f"wrote the model of trial {best} ({fmt}, " in err, err
    _, err = refused.communicate(timeout=60)
    assert refused.returncode == 1
    assert f"trial {worst} has no kept model: its sweep keeps the 2 best models by " in err
    assert "this trial is not among them" in err
    assert not (tmp_path / "worst.safetensors").exists()

    assert paths["safetensors"].read_bytes() == stack.store.artifacts.read(doc)
    torch.set_num_threads(1)  # as the worker evaluated
    data = load_dataset(TrialConfig.model_validate(trial["config"]).dataset)
    x_val = torch.tensor(data.x_val, dtype=torch.float32)
    with torch.no_grad():
        model = sweepstack.load_model(paths["safetensors"])
        assert not model.training
        logits = model(x_val).numpy()
        assert _accuracy(logits, data.y_val) == recorded
        from_store = sweepstack.load_model(best, store=stack.store)
        assert np.array_equal(from_store(x_val).numpy(), logits)
        monkeypatch.setenv("SWEEPSTACK_MONGO_URL", stack.env["SWEEPSTACK_MONGO_URL"])
        monkeypatch.setenv("SWEEPSTACK_MONGO_DB", stack.env["SWEEPSTACK_MONGO_DB"])
        assert np.array_equal(sweepstack.load_model(best)(x_val).numpy(), logits)
        with pytest.raises(NoModel, match="not among them"):
            sweepstack.load_model(worst)
        scripted = torch.jit.load(str(paths["torchscript"]))
        assert _accuracy(scripted(x_val).numpy(), data.y_val) == recorded

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(paths["onnx"]), options)
    (out,) = session.run(None, {"input": data.x_val.astype(np.float32)})
    np.testing.assert_allclose(out, logits, rtol=1e-5, atol=1e-5)
    assert _accuracy(out, data.y_val) == recorded
