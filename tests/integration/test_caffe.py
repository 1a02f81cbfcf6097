"""Caffe nets from `configs/caffe/` trained through the real platform: RabbitMQ, a MongoDB
wire-protocol server, a Celery worker, the REST API and the dashboard's data routes.

LeNet on the digits resized to 28x28 reaches 0.95 val accuracy in 300 iterations; the
sigmoid autoencoder's losses fall; a sweep over ip1's width and the solver's base rate,
sent through the API as texts, shows both as parallel-coordinates axes; a trial asked to
stop ends pruned at its next evaluation. One worker serves the module; each test has a
sweep of its own.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from core.caffe.net import build_graph
from core.caffe.prototxt import parse
from core.spec import load_spec
from scheduler.enqueue import enqueue
from scheduler.expand import expand
from scheduler.submit import messages, submit_sweep
from tests.api import ALICE, api_settings
from tests.integration.stack import Stack, wait_for
from web.app import create_app

pytestmark = pytest.mark.integration
CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.fixture(scope="module")
def cstack(
    broker_url: str, secantus_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    stack = Stack(
        broker_url, secantus_url, f"sweepstack_test_{uuid.uuid4().hex[:10]}",
        tmp_path_factory.mktemp("caffe"),
    )  # fmt: skip
    try:
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
    docs, _ = stack.store.trials(sweep_id)
    return [stack.store.get_trial(doc["_id"]) for doc in docs]


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
    found, _ = cstack.store.trials(sweep_id, params={"caffe.layers.ip1.num_output": 200})
    assert len(found) == 2


def test_a_caffe_trial_asked_to_stop_ends_pruned_with_its_rows(cstack: Stack) -> None:
    document = dict(load_spec(CONFIGS / "caffe-lenet.yaml").document)
    document["name"] = f"caffe-prune-{uuid.uuid4().hex[:6]}"
    document["caffe"] = {**document["caffe"],
                         "solver_params": {"max_iter": 3000, "test_interval": 20}}  # fmt: skip
    spec = load_spec(document)
    trials = expand(spec, with_config=True)
    sweep_id = cstack.store.create_sweep(spec, trials)
    sent = [(ids, limit, {**kw, "watch": True}) for ids, limit, kw in messages(sweep_id, trials)]
    assert enqueue(cstack.app, sent) == 1

    def reported() -> tuple[str, int] | None:
        docs, _ = cstack.store.trials(sweep_id, state="running")
        rows = cstack.store.get_trial(docs[0]["_id"])["metrics"] if docs else []
        return (docs[0]["_id"], rows[-1]["epoch"]) if len(rows) >= 2 else None

    trial_id, epoch = wait_for(reported, 60, "two evaluations reported")
    assert cstack.store.request_prune({trial_id: (1, epoch)}) == [trial_id]
    assert cstack.wait_finished(sweep_id, timeout=60)["pruned"] == 1, cstack.logs()
    doc = cstack.store.get_trial(trial_id)
    rows = _rows(doc)
    assert doc["pruned_epoch"] in (epoch, epoch + 1) and doc["error"] is None
    assert [r["iteration"] for r in rows] == [20 * e for e in range(1, len(rows) + 1)]
    assert rows[-1]["iteration"] < 3000
