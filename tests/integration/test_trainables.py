"""Users' training functions (``trainable:``) on real RabbitMQ, a real MongoDB wire-protocol
server and a real Celery worker, with the guarantees of built-in trials.

The functions are entry points found as a user's are: the example package (installed by
`make venv`) and the test package of `tests.trainables`, whose metadata is written to a
folder on the worker's ``PYTHONPATH`` (and on this process's path, for validation). One
worker serves every test of the module; each test has a sweep of its own.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from cli.app import create_app
from core.spec.sweep import load_spec
from scheduler.enqueue import enqueue
from scheduler.expand import expand
from scheduler.messages import messages
from tests import trainables
from tests.api import ALICE, BOB, api_settings
from tests.integration.stack import Stack, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The test package's metadata, on this process's path while the module runs."""
    folder = trainables.install(tmp_path_factory.mktemp("site"))
    sys.path.insert(0, str(folder))
    try:
        yield folder
    finally:
        sys.path.remove(str(folder))


@pytest.fixture(scope="module")
def tstack(
    broker_url: str, secantus_url: str, site: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """One stack and one worker process for the module, the test package on its path."""
    tmp = tmp_path_factory.mktemp("trainables")
    stack = Stack(broker_url, secantus_url, f"sweepstack_test_{uuid.uuid4().hex[:10]}", tmp)
    stack.env["PYTHONPATH"] = os.pathsep.join([stack.env["PYTHONPATH"], str(site)])
    try:
        stack.start_worker()
        yield stack
    finally:
        stack.close()


@pytest.fixture(scope="module")
def client(tstack: Stack) -> FlaskClient:
    """The API and the dashboard on the stack's store and queue."""
    settings = dataclasses.replace(
        api_settings(tstack.settings.broker_url, tstack.settings.mongo_url, "unused"),
        mongo_db=tstack.store.db.name,
        queue=tstack.queue,
    )
    return create_app(settings, store=tstack.store, sender=tstack.app).test_client()


def _spec(trainable: str, body: str = "", execution: str = "device: cpu") -> str:
    return (
        f"name: {trainable}-{uuid.uuid4().hex[:6]}\ntrainable: {trainable}\n"
        f"execution: {{{execution}}}\nobjective: {{metric: val_loss, direction: min}}\n{body}"
    )


def _trial(stack: Stack, sweep_id: str) -> dict[str, Any]:
    (doc,), _ = stack.store.reads.trials(sweep_id)
    return stack.store.reads.get_trial(doc["_id"])


def test_a_sweep_of_the_example_cnn_through_the_api_shows_every_epoch(
    tstack: Stack, client: FlaskClient
) -> None:
    spec = {
        "name": f"cnn-{uuid.uuid4().hex[:6]}",
        "trainable": "digits_cnn",
        "dataset": {"name": "digits"},
        "params": {"channels": [4, 8], "hidden": 32, "lr": 0.01},
        "training": {"epochs": 3},
        "execution": {"device": "cpu", "time_limit": 120},
        "objective": {"metric": "val_accuracy", "direction": "maximize"},
    }
    response = client.post("/api/v1/sweeps", json=spec, headers=ALICE)
    assert response.status_code == 201, response.get_data()[:500]
    sweep_id = response.json["id"]
    counts = tstack.wait_finished(sweep_id, timeout=90)
    assert counts["complete"] == 2, tstack.logs()
    sweep = client.get(f"/dashboard/data/sweeps/{sweep_id}", headers=ALICE)
    assert sweep.status_code == 200, sweep.get_data()[:500]
    assert "params.channels" in sweep.get_data(as_text=True)
    trials, _ = tstack.store.reads.trials(sweep_id)
    for doc in trials:
        view = client.get(f"/api/v1/trials/{doc['_id']}", headers=ALICE).json
        assert view["state"] == "complete" and view["result"]["objective"] > 0.5
        epochs = [row["epoch"] for row in view["metrics"]]
        assert epochs == [1, 2, 3], view["metrics"]
        full = tstack.store.reads.get_trial(doc["_id"])
        assert full["trainable"]["package"] == "sweepstack-examples"
        assert full["versions"]["sweepstack-examples"] == "0.1.0"
        page = client.get(f"/dashboard/data/trials/{doc['_id']}", headers=ALICE)
        assert page.status_code == 200
        series = page.json["series"]
        assert series["epochs"] == [1, 2, 3] and series["metrics"] == ["val_accuracy"]
        assert len(series["values"]["val_loss"]) == 3
        other = client.get(f"/dashboard/data/trials/{doc['_id']}", headers=BOB)
        assert other.status_code == 404


def test_an_unknown_trainable_is_422_listing_the_installed(client: FlaskClient) -> None:
    spec = {"name": "nope", "trainable": "not_installed", "params": {"a": [1, 2]}}
    response = client.post("/api/v1/sweeps", json=spec, headers=ALICE)
    assert response.status_code == 422
    (problem,) = response.json["details"]["problems"]
    assert problem["path"] == "trainable"
    assert "installed: digits_cnn, digits_sgd, test_final_only" in problem["message"]


def test_a_trainable_that_raises_ends_failed_with_its_message(tstack: Stack) -> None:
    sweep_id, _ = tstack.submit(_spec("test_raises", "params: {message: the data is gone}\n"))
    assert tstack.wait_finished(sweep_id, timeout=60)["failed"] == 1, tstack.logs()
    doc = _trial(tstack, sweep_id)
    assert doc["error"] == "ValueError: the data is gone"
    assert [row["epoch"] for row in doc["metrics"]] == [1]  # what it reported is kept
    assert "Traceback" in tstack.logs() and "Traceback" not in doc["error"]


def test_a_trainable_that_ignores_should_stop_is_stopped_at_the_time_limit(
    tstack: Stack,
) -> None:
    text = _spec("test_ignores_stop", execution="device: cpu, time_limit: 2")
    sweep_id, _ = tstack.submit(text)
    assert tstack.wait_finished(sweep_id, timeout=60)["failed"] == 1, tstack.logs()
    doc = _trial(tstack, sweep_id)
    assert doc["error"] == "time limit exceeded: execution.time_limit is 2.0 s"
    assert len(doc["metrics"]) >= 5


def test_a_trainable_killed_with_9_is_taken_over_by_attempt_2(tstack: Stack) -> None:
    sweep_id, _ = tstack.submit(
        _spec("test_slow", "params: {sleep: 0.1}\ntraining: {epochs: 15}\n")
    )

    def running() -> dict[str, Any] | None:
        docs, _ = tstack.store.reads.trials(sweep_id, state="running")
        return docs[0] if docs and tstack.store.reads.get_trial(docs[0]["_id"])["metrics"] else None

    doc = wait_for(running, 60, "the trial to report an epoch")
    os.kill(doc["worker"]["pid"], signal.SIGKILL)
    assert tstack.wait_finished(sweep_id, timeout=90)["complete"] == 1, tstack.logs()
    full = _trial(tstack, sweep_id)
    assert full["attempt"] == 2
    assert [h["state"] for h in full["history"]] == ["lost", "complete"]
    rows = list(tstack.store.db["metrics"].find({"trial_id": full["_id"], "attempt": 2}))
    assert sorted(row["epoch"] for row in rows) == list(range(1, 16))


def test_a_trainable_killed_with_9_resumes_from_its_own_checkpoint(tstack: Stack) -> None:
    sweep_id, _ = tstack.submit(
        _spec("test_resumable", "params: {sleep: 0.1}\ntraining: {epochs: 15}\n")
    )

    def checkpointed() -> dict[str, Any] | None:
        docs, _ = tstack.store.reads.trials(sweep_id, state="running")
        if docs and (found := tstack.store.artifacts.find(docs[0]["_id"], "checkpoint", "last")):
            return docs[0] if found["epoch"] >= 4 else None
        return None

    doc = wait_for(checkpointed, 60, "the trial's checkpoint after epoch 4")
    os.kill(doc["worker"]["pid"], signal.SIGKILL)
    assert tstack.wait_finished(sweep_id, timeout=90)["complete"] == 1, tstack.logs()
    full = _trial(tstack, sweep_id)
    assert [h["state"] for h in full["history"]] == ["lost", "complete"]
    (resumed,) = full["resumed"]
    assert resumed["epoch"] >= 4
    rows = sorted(
        (row["epoch"], row["metrics"]["total"])
        for row in tstack.store.db["metrics"].find({"trial_id": full["_id"], "attempt": 2})
    )
    # The function went on from its checkpoint: its running total is whole.
    assert rows == [(e, float(sum(range(1, e + 1)))) for e in range(1, 16)]
    kept = tstack.store.artifacts.of_trials([full["_id"]])[full["_id"]]
    (notes,) = kept
    assert (notes["kind"], notes["name"]) == ("file", "notes.txt")
    found = tstack.store.artifacts.find(full["_id"], "file", "notes.txt")
    assert tstack.store.artifacts.read(found) == b"total 120.0\n"


def test_a_trainable_asked_to_stop_ends_pruned(tstack: Stack) -> None:
    spec = load_spec(_spec("test_slow", "params: {sleep: 0.2}\ntraining: {epochs: 40}\n"))
    trials = expand(spec, with_config=True)
    sweep_id = tstack.store.admin.create_sweep(spec, trials)
    sent = [(ids, limit, {**kw, "watch": True}) for ids, limit, kw in messages(sweep_id, trials)]
    assert enqueue(tstack.app, sent) == 1

    def reported() -> tuple[str, int] | None:
        docs, _ = tstack.store.reads.trials(sweep_id, state="running")
        rows = tstack.store.reads.get_trial(docs[0]["_id"])["metrics"] if docs else []
        return (docs[0]["_id"], rows[-1]["epoch"]) if len(rows) >= 2 else None

    trial_id, epoch = wait_for(reported, 60, "two epochs reported")
    assert tstack.store.admin.request_prune({trial_id: (1, epoch)}) == [trial_id]
    assert tstack.wait_finished(sweep_id, timeout=60)["pruned"] == 1, tstack.logs()
    doc = tstack.store.reads.get_trial(trial_id)
    assert doc["pruned_epoch"] in (epoch, epoch + 1) and doc["error"] is None
    assert doc["result"]["objective"] == pytest.approx(1.0 / doc["pruned_epoch"])
