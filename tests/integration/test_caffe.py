"""Caffe nets from `configs/caffe/` trained through the real platform: RabbitMQ, a MongoDB
wire-protocol server, a Celery worker, the REST API and the dashboard's data routes.

LeNet on the digits resized to 28x28 reaches 0.95 val accuracy in 300 iterations; the
sigmoid autoencoder's losses fall; a sweep over ip1's width and the solver's base rate,
sent through the API as texts, shows both as parallel-coordinates axes; a trial asked to
stop ends pruned at its next evaluation; a small net learns three patterns from a folder of
generated PNG files by class in the worker's datasets folder. One worker serves the module;
each test has a sweep of its own.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from cli.app import create_app
from core.spec.caffe.net import build_graph
from core.spec.caffe.prototxt import parse
from core.spec.limits import dataset_file_problems
from core.spec.sweep import load_spec
from scheduler.enqueue import enqueue
from scheduler.expand import expand
from scheduler.messages import messages
from scheduler.submit import submit_sweep
from tests.api import ALICE, api_settings
from tests.integration.stack import Stack, wait_for

pytestmark = pytest.mark.integration
CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The worker's datasets folder (``SWEEPSTACK_DATASETS_DIR``)."""
    return tmp_path_factory.mktemp("caffe-datasets")


@pytest.fixture(scope="module")
def cstack(
    broker_url: str, secantus_url: str, tmp_path_factory: pytest.TempPathFactory, datasets: Path
) -> Iterator[Stack]:
    stack = Stack(
        broker_url, secantus_url, f"sweepstack_test_{uuid.uuid4().hex[:10]}",
        tmp_path_factory.mktemp("caffe"),
    )  # fmt: skip
    try:
        stack.env["SWEEPSTACK_DATASETS_DIR"] = str(datasets)
        stack.start_worker()
        yield stack
    finally:
        stack.close()


@pytest.fixture(scope="module")
def client(cstack: Stack) -> FlaskClient:
    settings = dataclasses.replace(
        api_settings(cstack.settings.broker_url, cstack.settings.mongo_url, "unused"),
        mongo_db=cstack.store.db.name,
        queue=cstack.queue,
    )
    return create_app(settings, store=cstack.store, sender=cstack.app).test_client()


def _submit(stack: Stack, name: str) -> str:
    spec = load_spec(CONFIGS / name)  # as the CLI reads it: the files become texts
    spec = spec.model_copy(update={"name": f"{spec.name}-{uuid.uuid4().hex[:6]}"})
    sweep_id, _ = submit_sweep(spec, stack.store, stack.app, owner="alice")
    return sweep_id


def _trials(stack: Stack, sweep_id: str) -> list[dict[str, Any]]:
    docs, _ = stack.store.reads.trials(sweep_id)
    return [stack.store.reads.get_trial(doc["_id"]) for doc in docs]


def _rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [row["metrics"] for row in doc["metrics"]]


def test_lenet_reaches_95_percent_on_resized_digits(cstack: Stack, client: FlaskClient) -> None:
    sweep_id = _submit(cstack, "caffe-lenet.yaml")
    counts = cstack.wait_finished(sweep_id, timeout=90)
    assert counts["complete"] == 1, cstack.logs()
    (doc,) = _trials(cstack, sweep_id)
    rows = _rows(doc)
    assert [r["epoch"] for r in rows] == [1, 2, 3]  # test_interval 100 of max_iter 300
    assert [r["iteration"] for r in rows] == [100, 200, 300]
    assert rows[-1]["val_accuracy"] >= 0.95, rows
    assert rows[-1]["train_loss"] < rows[0]["train_loss"]
    assert doc["result"]["objective"] == max(r["val_accuracy"] for r in rows)
    net = parse(doc["config"]["caffe"]["net_text"])
    graph = build_graph(net, "TRAIN", (1, 28, 28), 10)
    assert doc["param_count"] == graph.param_count == 431_080  # Caffe's LeNet on 28x28
    assert [row["name"] for row in doc["layer_table"]] == [
        layer.name for layer in graph.layers
    ]  # fmt: skip
    page = client.get(f"/dashboard/data/trials/{doc['_id']}", headers=ALICE).json
    assert page["trial"]["param_count"] == 431_080
    assert page["trial"]["layer_table"] == doc["layer_table"]
    assert page["series"]["metrics"] == ["val_accuracy"]  # iteration and lr are no curves
    html = client.get(f"/trials/{doc['_id']}", headers=ALICE)
    assert html.status_code == 200 and b'id="layers"' in html.data


def test_the_autoencoders_losses_fall(cstack: Stack) -> None:
    sweep_id = _submit(cstack, "caffe-autoencoder.yaml")
    assert cstack.wait_finished(sweep_id, timeout=60)["complete"] == 1, cstack.logs()
    (doc,) = _trials(cstack, sweep_id)
    rows = _rows(doc)
    assert [r["iteration"] for r in rows] == [100, 200, 300, 400]
    for name in ("train_loss", "val_loss", "val_l2_error"):
        assert rows[-1][name] < rows[0][name], (name, rows)
    assert "val_accuracy" not in rows[0]
    assert doc["result"]["objective"] == min(r["val_loss"] for r in rows)


def test_a_sweep_sent_through_the_api_shows_its_parameters_as_axes(
    cstack: Stack, client: FlaskClient
) -> None:
    document = dict(load_spec(CONFIGS / "caffe-sweep.yaml").document)
    document["name"] = f"caffe-sweep-{uuid.uuid4().hex[:6]}"
    with_path = {**document, "caffe": {**document["caffe"], "net": "lenet_train_test.prototxt"}}
    refused = client.post("/api/v1/sweeps", json=with_path, headers=ALICE)
    assert refused.status_code == 422
    assert [p["path"] for p in refused.json["details"]["problems"]] == ["caffe.net"]
    response = client.post("/api/v1/sweeps", json=document, headers=ALICE)
    assert response.status_code == 201, response.get_data()[:500]
    sweep_id = response.json["id"]
    assert cstack.wait_finished(sweep_id, timeout=90)["complete"] == 4, cstack.logs()
    figure = client.get(f"/dashboard/data/sweeps/{sweep_id}/parallel", headers=ALICE).json
    dims = figure["figure"]["layout"]["meta"]["dims"]
    assert [d["path"] for d in dims] == [
        "caffe.layers.ip1.num_output", "caffe.solver_params.base_lr", "objective"
    ]  # fmt: skip
    params = {tuple(sorted(t["params"]["caffe"]["layers"]["ip1"].items())) for t in
              _trials(cstack, sweep_id)}  # fmt: skip
    assert params == {(("num_output", 50),), (("num_output", 200),)}
    found, _ = cstack.store.reads.trials(sweep_id, params={"caffe.layers.ip1.num_output": 200})
    assert len(found) == 2


def test_a_caffe_trial_asked_to_stop_ends_pruned_with_its_rows(cstack: Stack) -> None:
    document = dict(load_spec(CONFIGS / "caffe-lenet.yaml").document)
    document["name"] = f"caffe-prune-{uuid.uuid4().hex[:6]}"
    document["caffe"] = {**document["caffe"],
                         "solver_params": {"max_iter": 3000, "test_interval": 20}}  # fmt: skip
    spec = load_spec(document)
    trials = expand(spec, with_config=True)
    sweep_id = cstack.store.admin.create_sweep(spec, trials)
    sent = [(ids, limit, {**kw, "watch": True}) for ids, limit, kw in messages(sweep_id, trials)]
    assert enqueue(cstack.app, sent) == 1

    def reported() -> tuple[str, int] | None:
        docs, _ = cstack.store.reads.trials(sweep_id, state="running")
        rows = cstack.store.reads.get_trial(docs[0]["_id"])["metrics"] if docs else []
        return (docs[0]["_id"], rows[-1]["epoch"]) if len(rows) >= 2 else None

    trial_id, epoch = wait_for(reported, 60, "two evaluations reported")
    assert cstack.store.admin.request_prune({trial_id: (1, epoch)}) == [trial_id]
    assert cstack.wait_finished(sweep_id, timeout=60)["pruned"] == 1, cstack.logs()
    doc = cstack.store.reads.get_trial(trial_id)
    rows = _rows(doc)
    assert doc["pruned_epoch"] in (epoch, epoch + 1) and doc["error"] is None
    assert [r["iteration"] for r in rows] == [20 * e for e in range(1, len(rows) + 1)]
    assert rows[-1]["iteration"] < 3000


FOLDER_NET = """name: "Patterns"
layer { name: "data" type: "Data" top: "data" top: "label"
  transform_param { scale: 0.00390625 } data_param { source: "patterns_lmdb" batch_size: 16 } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 4 kernel_size: 3 weight_filler { type: "xavier" } } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "ip1" type: "InnerProduct" bottom: "conv1" top: "ip1"
  inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }
layer { name: "accuracy" type: "Accuracy" bottom: "ip1" bottom: "label" top: "accuracy"
  include { phase: TEST } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip1" bottom: "label" top: "loss" }
"""
FOLDER_SOLVER = """base_lr: 0.1\nmomentum: 0.9\nlr_policy: "fixed"\nmax_iter: 60
test_interval: 30\ntest_iter: 1\nrandom_seed: 1\n"""


def _patterns(folder: Path) -> None:
    """20 noisy 8x8 images each of horizontal stripes, vertical stripes and a checkerboard."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    rows, cols = np.indices((8, 8))
    patterns = {"horizontal": rows % 2, "vertical": cols % 2, "checker": (rows + cols) % 2}
    for name, pattern in patterns.items():
        (folder / name).mkdir(parents=True)
        for i in range(20):
            pixels = pattern * 180 + rng.integers(0, 60, size=(8, 8))
            Image.fromarray(pixels.astype(np.uint8)).save(folder / name / f"{i}.png")


def test_a_net_learns_from_a_folder_of_pngs_by_class(
    cstack: Stack, datasets: Path, tmp_path: Path
) -> None:
    _patterns(datasets / "patterns")
    (tmp_path / "net.prototxt").write_text(FOLDER_NET)
    (tmp_path / "solver.prototxt").write_text(FOLDER_SOLVER)
    spec_file = tmp_path / "patterns.yaml"
    spec_file.write_text(
        f"name: patterns-{uuid.uuid4().hex[:6]}\n"
        "caffe: {net: net.prototxt, solver: solver.prototxt}\n"
        "dataset: {path: patterns, validation_fraction: 0.3}\n"  # 18 held out >= 1 x 16
    )
    spec = load_spec(spec_file)
    settings = dataclasses.replace(cstack.settings, datasets_dir=datasets)
    assert dataset_file_problems(spec, settings) == []  # what `sweepstack validate` checks
    sweep_id, _ = submit_sweep(spec, cstack.store, cstack.app, owner="alice")
    assert cstack.wait_finished(sweep_id, timeout=60)["complete"] == 1, cstack.logs()
    (doc,) = _trials(cstack, sweep_id)
    rows = _rows(doc)
    assert [r["iteration"] for r in rows] == [30, 60]
    assert rows[-1]["val_accuracy"] >= 0.9, rows
    assert doc["config"]["dataset"]["path"] == "patterns"
    assert doc["param_count"] == (4 * 9 + 4) + (4 * 6 * 6 * 3 + 3)
    assert len(doc["dataset_fingerprint"]) == 64


#: A net built as Caffe's CIFAR-10 "quick" example is (3 conv / pool / relu stages on 32 x 32
#: colour images, then two inner products), narrower, written with the constructs Caffe's
#: own files use: its two data layers share one name (by phase), TEST takes a stage the
#: solver's test_state selects, and the mean is the per-channel `mean_value` that
#: `validate` offers for a `mean_file`.
CIFAR_QUICK = """name: "CIFAR10_quick_like"
layer { name: "cifar" type: "Data" top: "data" top: "label" include { phase: TRAIN }
  transform_param { mean_value: 100 mean_value: 110 mean_value: 120 scale: 0.01 }
  data_param { source: "examples/cifar10/cifar10_train_lmdb" batch_size: 20 } }
layer { name: "cifar" type: "Data" top: "data" top: "label"
  include { phase: TEST stage: "test-on-test" }
  transform_param { mean_value: 100 mean_value: 110 mean_value: 120 scale: 0.01 }
  data_param { source: "examples/cifar10/cifar10_test_lmdb" batch_size: 20 } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 8 pad: 2 kernel_size: 5
    weight_filler { type: "gaussian" std: 0.01 } } }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
  pooling_param { pool: MAX kernel_size: 3 stride: 2 } }
layer { name: "relu1" type: "ReLU" bottom: "pool1" top: "pool1" }
layer { name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2"
  convolution_param { num_output: 8 pad: 2 kernel_size: 5
    weight_filler { type: "gaussian" std: 0.01 } } }
layer { name: "relu2" type: "ReLU" bottom: "conv2" top: "conv2" }
layer { name: "pool2" type: "Pooling" bottom: "conv2" top: "pool2"
  pooling_param { pool: AVE kernel_size: 3 stride: 2 } }
layer { name: "conv3" type: "Convolution" bottom: "pool2" top: "conv3"
  convolution_param { num_output: 16 pad: 2 kernel_size: 5
    weight_filler { type: "gaussian" std: 0.01 } } }
layer { name: "relu3" type: "ReLU" bottom: "conv3" top: "conv3" }
layer { name: "pool3" type: "Pooling" bottom: "conv3" top: "pool3"
  pooling_param { pool: AVE kernel_size: 3 stride: 2 } }
layer { name: "ip1" type: "InnerProduct" bottom: "pool3" top: "ip1"
  inner_product_param { num_output: 16 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
  inner_product_param { num_output: 10 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "accuracy" type: "Accuracy" bottom: "ip2" bottom: "label" top: "accuracy"
  include { phase: TEST } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }
"""
CIFAR_SOLVER = """base_lr: 0.001\nmomentum: 0.9\nweight_decay: 0.004\nlr_policy: "fixed"
max_iter: 20\ntest_interval: 10\ntest_iter: 2\nrandom_seed: 1
test_state { stage: "test-on-test" }\n"""


def test_a_cifar10_quick_like_net_with_caffes_constructs_validates_and_trains(
    cstack: Stack, datasets: Path, tmp_path: Path
) -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    labels = np.arange(200) % 10
    images = rng.integers(80, 140, size=(200, 3, 32, 32)) + labels[:, None, None, None] * 3
    np.savez(datasets / "cifar-like.npz", X=images.astype(np.uint8), y=labels)
    (tmp_path / "net.prototxt").write_text(CIFAR_QUICK)
    (tmp_path / "solver.prototxt").write_text(CIFAR_SOLVER)
    spec_file = tmp_path / "cifar.yaml"
    spec_file.write_text(
        f"name: cifar-{uuid.uuid4().hex[:6]}\n"
        "caffe: {net: net.prototxt, solver: solver.prototxt}\n"
        "dataset: {path: cifar-like.npz, validation_fraction: 0.25}\n"  # 50 held out >= 2 x 20
    )
    spec = load_spec(spec_file)
    settings = dataclasses.replace(cstack.settings, datasets_dir=datasets)
    assert dataset_file_problems(spec, settings) == []  # what `sweepstack validate` checks
    sweep_id, _ = submit_sweep(spec, cstack.store, cstack.app, owner="alice")
    assert cstack.wait_finished(sweep_id, timeout=120)["complete"] == 1, cstack.logs()
    (doc,) = _trials(cstack, sweep_id)
    rows = _rows(doc)
    assert [r["iteration"] for r in rows] == [10, 20]
    assert all(np.isfinite(r["train_loss"]) and 0 <= r["val_accuracy"] <= 1 for r in rows)
