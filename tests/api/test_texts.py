"""Issue 29 item 3: large texts are kept once per sweep, through the real API on the real store
and broker; free strings have a ceiling.

A Caffe spec of 0.9 MB (a 470 KB net, a 420 KB solver) swept over 50 seeds stored 45 MB when
every trial held both texts; now its texts are stored once (`core.store.texts`), the trials
and their messages hold references, and the trial's JSON still shows the texts. A grid whose
values change the net stores each distinct net once. A long ``dataset.target`` or trainable
string is a 422 naming the field (``SWEEPSTACK_MAX_STRING_BYTES``)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bson
import pytest
from flask.testing import FlaskClient
from kombu import Connection

from cli.app import create_app
from core.settings import Settings
from core.spec.sweep import load_spec
from core.store.store import Store
from core.store.texts import REF
from scheduler.enqueue import sender_app
from scheduler.expand import expand
from tests.api import ALICE, SWEEPS, small_spec

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "caffe"
JSON = {"Content-Type": "application/json"}
#: The most a 50-trial sweep of the 0.9 MB spec may take in the store, every collection.
MAX_STORED = 2_000_000


def big_caffe_spec(
    grid: dict[str, Any], net_pad: int = 470_000, solver_pad: int = 420_000
) -> dict[str, Any]:
    """LeNet with a ReLU whose name is `net_pad` characters long, and its solver with a
    `solver_pad`-character snapshot_prefix: texts that stay as long in every trial."""
    net = (CONFIGS / "lenet_train_test.prototxt").read_text()
    pad = f'layer {{ name: "relu_pad{"x" * net_pad}" type: "ReLU" bottom: "ip1" top: "ip1" }}\n'
    net = net.replace('layer {\n  name: "ip2"', pad + 'layer {\n  name: "ip2"', 1)
    solver = (CONFIGS / "lenet_solver.prototxt").read_text()
    solver = solver.replace('net: "lenet_train_test.prototxt"\n', "")
    if solver_pad:
        solver += f'snapshot_prefix: "{"y" * solver_pad}"\n'
    return {
        "name": "big-texts",
        "caffe": {
            "net_text": net,
            "solver_text": solver,
            "resize": [28, 28],
            **grid.get("caffe", {}),
        },
        "dataset": {"name": "digits", "validation_fraction": 0.25},
        "training": {"seed": 1, **grid.get("training", {})},
        "execution": {"device": "cpu"},
        "objective": {"metric": "val_accuracy", "direction": "maximize"},
    }


@pytest.fixture
def big_client(settings: Settings, store: Store) -> Iterator[FlaskClient]:
    """The API taking bodies of up to 1 MiB (the default), on the test's store and queue."""
    roomy = dataclasses.replace(settings, api_max_body_bytes=1_048_576)
    yield create_app(roomy, store=store, sender=sender_app(roomy)).test_client()


def stored_bytes(store: Store, sweep_id: str) -> dict[str, int]:
    """The BSON bytes of every document of the sweep, by collection (what dataSize counts)."""
    out = {}
    for name in store.db.list_collection_names():
        mine = [{"_id": sweep_id}, {"sweep_id": sweep_id},
                {"trial_id": {"$regex": f"^{sweep_id}-"}}]  # fmt: skip
        found = store.db[name].find({"$or": mine})
        size = sum(len(bson.encode(doc)) for doc in found)
        if size:
            out[name] = size
    return out


def queued_messages(settings: Settings) -> list[str]:
    """The bodies of the messages in the test's queue (taken off it)."""
    bodies = []
    with Connection(settings.broker_url) as conn:
        channel = conn.default_channel
        while (message := channel.basic_get(settings.queue, no_ack=True)) is not None:
            body = message.body
            bodies.append(body.decode() if isinstance(body, bytes) else body)
    return bodies


def test_a_big_caffe_sweep_stores_its_texts_once(
    big_client: FlaskClient, store: Store, settings: Settings
) -> None:
    spec = big_caffe_spec({"training": {"seed": list(range(1, 51))}})
    body = json.dumps(spec)
    assert 880_000 < len(body) < 1_000_000
    response = big_client.post(SWEEPS, data=body, headers={**ALICE, **JSON})
    assert response.status_code == 201, response.get_data()[:800]
    sweep_id = response.json["id"]
    assert response.json["trials"] == 50

    sizes = stored_bytes(store, sweep_id)
    total = sum(sizes.values())
    points = expand(load_spec(spec), with_config=True)
    before = sum(len(bson.encode({"config": p.config})) for p in points) + sizes["sweeps"]
    print(
        f"\n50 trials of a {len(body):,}-byte Caffe spec: {total:,} bytes stored "
        f"({sizes}); each trial holding its texts: {before:,}"
    )
    assert total <= MAX_STORED
    assert store.db["texts"].count_documents({"sweep_id": sweep_id}) == 2

    # The trials hold references; the API's trial shows the texts, as resolved at submit.
    doc = store.db["trials"].find_one({"sweep_id": sweep_id, "index": 7})
    assert set(doc["config"]["caffe"]["net_text"]) == {REF}
    trial = big_client.get(f"/api/v1/trials/{doc['_id']}", headers=ALICE).json
    assert trial["config"] == points[7].config
    assert trial["config"]["caffe"]["net_text"].count('name: "relu_padxxx') == 1

    # Messages carry the references, not the texts.
    bodies = queued_messages(settings)
    assert len(bodies) == 50
    assert max(map(len, bodies)) < 4_000, max(map(len, bodies))

    # Deleting the sweep deletes its texts.
    assert big_client.post(f"{SWEEPS}/{sweep_id}/cancel", headers=ALICE).status_code == 200
    removed = big_client.delete(f"{SWEEPS}/{sweep_id}", headers=ALICE).json
    assert removed["texts"] == 2 and removed["trials"] == 50
    assert stored_bytes(store, sweep_id) == {}


def test_a_grid_over_the_net_and_solver_stores_each_text_once_and_changed_lines(
    big_client: FlaskClient, store: Store, settings: Settings
) -> None:
    """50 trials of the 0.9 MB spec, each with a net and a solver of its own (5 widths of ip1
    x 10 base rates): one whole net and one whole solver, and each other text as the lines
    that differ (`core.store.texts.SweepTexts.put`)."""
    rates = [round(0.01 * k, 2) for k in range(1, 11)]
    grid = {"caffe": {"layers": {"ip1": {"num_output": [100, 200, 300, 400, 500]}},
                      "solver_params": {"base_lr": rates}}}  # fmt: skip
    spec = big_caffe_spec(grid)
    body = json.dumps(spec)
    assert 880_000 < len(body) < 1_000_000
    response = big_client.post(SWEEPS, data=body, headers={**ALICE, **JSON})
    assert response.status_code == 201, response.get_data()[:800]
    sweep_id = response.json["id"]
    assert response.json["trials"] == 50
    texts = list(store.db["texts"].find({"sweep_id": sweep_id}))
    whole = [t for t in texts if "text" in t]
    assert len(texts) == 5 + 10 and len(whole) == 2, [t.get("lines") for t in texts]
    assert all(len(t["changes"]) == 1 for t in texts if "text" not in t)
    sizes = stored_bytes(store, sweep_id)
    print(
        f"\n50 trials, a net and a solver each, of a {len(body):,}-byte spec: "
        f"{sum(sizes.values()):,} bytes stored ({sizes})"
    )
    assert sum(sizes.values()) <= MAX_STORED
    # Every trial's texts come back whole, in a process that never saw them (no cache).
    points = {p.id: p.config for p in expand(load_spec(spec), with_config=True)}
    fresh = Store.connect(settings.mongo_url, settings.mongo_db)
    try:
        for doc in fresh.feeding.feed_trials(sweep_id):
            assert doc["config"] == points[doc["key"]]
    finally:
        fresh.close()
    some = store.db["trials"].find_one({"sweep_id": sweep_id, "index": 33})
    trial = big_client.get(f"/api/v1/trials/{some['_id']}", headers=ALICE).json
    assert trial["config"] == points[some["key"]]


TRAINABLE = {
    "name": "long-strings",
    "trainable": "digits_cnn",
    "training": {"epochs": 1},
    "objective": {"metric": "val_accuracy", "direction": "maximize"},
}


@pytest.mark.parametrize(
    ("spec", "path", "got"),
    [
        (
            small_spec(dataset={"path": "data.csv", "target": "t" * 5000}),
            "dataset.target",
            "its UTF-8 bytes must be <= 4,096 on this server (SWEEPSTACK_MAX_STRING_BYTES), "
            "got 5,000",
        ),
        ({**TRAINABLE, "params": {"note": "x" * 5000}}, "params.note", "got 5,000"),
        ({**TRAINABLE, "params": {"note": ["short", "é" * 2100]}}, "params.note", "got 4,200"),
        (
            {**TRAINABLE, "params": {"group": {"note": {"choice": ["a", "b" * 4097]}}}},
            "params.group.note",
            "one of its values must be <= 4,096",
        ),
    ],
)
def test_a_long_free_string_is_422_naming_the_field(
    client: FlaskClient, spec: dict[str, Any], path: str, got: str
) -> None:
    response = client.post(SWEEPS, json=spec, headers=ALICE)
    assert response.status_code == 422, response.get_data()[:800]
    problems = response.json["details"]["problems"]
    assert [p["path"] for p in problems] == [path], problems
    assert "SWEEPSTACK_MAX_STRING_BYTES" in problems[0]["message"]
    assert got in problems[0]["message"]
    assert client.get(SWEEPS, headers=ALICE).json["items"] == []


def test_strings_within_the_ceiling_pass(client: FlaskClient) -> None:
    spec = small_spec(dataset={"path": "data.csv", "target": "t" * 4096}, description="d" * 4096)
    assert client.post(SWEEPS, json=spec, headers=ALICE).status_code == 201
