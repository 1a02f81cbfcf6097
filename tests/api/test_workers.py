"""With a real Celery worker: ``/api/v1/workers`` shows it and the trial it runs, and a sweep
submitted over the API is trained, followed and exported as a user would."""

from __future__ import annotations

import csv
import dataclasses
import io

import pytest
from flask.testing import FlaskClient

from cli.app import create_app
from tests.api import ALICE, ALICE_TOKEN
from tests.integration.stack import Stack, wait_for

pytestmark = pytest.mark.integration

LONG = {  # one trial that trains until it is cancelled
    "name": "long",
    "dataset": {"name": "digits"},
    "model": {"hidden_units": 256},
    "training": {"epochs": 5000},
}
QUICK = {
    "name": "quick",
    "dataset": {"name": "iris"},
    "model": {"hidden_units": [8, 16]},
    "training": {"epochs": 2},
    "objective": {"metric": "val_accuracy", "direction": "maximize"},
}


@pytest.fixture
def client(stack: Stack) -> FlaskClient:
    settings = dataclasses.replace(
        stack.settings, api_tokens={ALICE_TOKEN: "alice"}, api_max_epochs=5000
    )
    return create_app(settings, store=stack.store, sender=stack.app).test_client()


def test_workers_and_a_sweep_from_submit_to_export(client: FlaskClient, stack: Stack) -> None:
    worker = stack.start_worker()
    listed = client.get("/api/v1/workers", headers=ALICE).json
    assert listed["queue"] == stack.queue
    (me,) = listed["workers"]
    assert me["concurrency"] == 1 and me["queues"] == [stack.queue] and me["active"] == []
    assert me["pid"] == worker.proc.pid and me["device"] is None  # named test-…@host

    long_id = client.post("/api/v1/sweeps", json=LONG, headers=ALICE).json["id"]
    wait_for(lambda: stack.store.reads.counts(long_id)["running"], 60, "the long trial to start")
    (running,) = client.get("/api/v1/workers", headers=ALICE).json["workers"][0]["active"]
    assert running["task"] == "workers.run_trial" and running["started_at"].endswith("Z")
    assert [t.split("-")[0] for t in running["trial_ids"]] == [long_id]
    client.post(f"/api/v1/sweeps/{long_id}/cancel", headers=ALICE)
    assert stack.wait_finished(long_id, 60)["cancelled"] == 1

    quick_id = client.post("/api/v1/sweeps", json=QUICK, headers=ALICE).json["id"]
    counts = stack.wait_finished(quick_id, 120)
    assert counts["complete"] == 2, stack.logs()
    shown = client.get(f"/api/v1/sweeps/{quick_id}", headers=ALICE).json
    assert shown["status"] == "finished" and shown["best"]["state"] == "complete"
    text = client.get(f"/api/v1/sweeps/{quick_id}/export?format=csv", headers=ALICE).get_data()
    rows = list(csv.DictReader(io.StringIO(text.decode())))
    assert [r["model.hidden_units"] for r in rows] == ["8", "16"]
    assert all(r["state"] == "complete" and 0 <= float(r["val_accuracy"]) <= 1 for r in rows)
    assert all(r["epochs"] == "2" and int(r["param_count"]) > 0 for r in rows)
