"""``GET /api/v1/sweeps/{id}/analysis`` and the dashboard panel's data, on the real store:
the owner's answer conforms to the OpenAPI document, anyone else's is a 404, none without a
credential, and a finished sweep's analysis is stored once and served from there."""

from __future__ import annotations

from flask.testing import FlaskClient

from core.analysis.sweep import SNAPSHOT
from core.store.store import Store
from tests.api import ALICE, BOB, BOB_TOKEN
from tests.api.test_schemathesis import schema
from tests.dashboard.conftest import login, small_sweep_spec
from tests.dashboard.seeding import seed_sweep


def test_the_owner_gets_the_analysis_and_no_one_else(client: FlaskClient, store: Store) -> None:
    seeded = seed_sweep(store, small_sweep_spec(), owner="alice", failed=2)
    url = f"/api/v1/sweeps/{seeded.sweep_id}/analysis"

    answer = client.get(url, headers=ALICE)
    assert answer.status_code == 200, answer.json
    body = answer.json
    schema["/api/v1/sweeps/{sweep_id}/analysis"]["GET"].validate_response(answer)
    assert body["sweep"]["analysed"] == seeded.count("complete") == 14
    assert body["states"] == {"complete": 14, "failed": 2}
    assert body["importance"]["available"] and set(body["importance"]["fanova"]) == {
        "model.hidden_layers", "model.hidden_units", "model.activation", "training.seed",
    }  # fmt: skip
    assert body["findings"] and all(isinstance(text, str) for text in body["findings"])
    # finished: stored with the sweep under its version, and served from there again
    version, _ = store.reads.view_snapshot(seeded.sweep_id, SNAPSHOT)
    assert version == body["version"]
    assert client.get(url, headers=ALICE).json == body

    missing = client.get("/api/v1/sweeps/0123456789ab/analysis", headers=BOB)
    other = client.get(url, headers=BOB)
    assert other.status_code == missing.status_code == 404
    assert other.json["code"] == missing.json["code"] == "not_found"
    assert client.get(url).status_code == 401
    bad = client.get("/api/v1/sweeps/$where/analysis", headers=ALICE)
    assert bad.status_code == 400 and bad.json["details"]["parameter"] == "sweep_id"
    assert client.get(f"{url}?format=md", headers=ALICE).status_code == 400

    panel = f"/dashboard/data/sweeps/{seeded.sweep_id}/analysis"
    assert client.get(panel).status_code == 401
    login(client, BOB_TOKEN)
    assert client.get(panel).status_code == 404
