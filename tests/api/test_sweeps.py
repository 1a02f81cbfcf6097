"""``/api/v1/sweeps``: submitting (every refusal changes nothing), listing, showing,
cancelling, retrying and deleting, on the real store and broker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from flask.testing import FlaskClient

from core.settings import Settings
from core.states import TrialState
from core.store.store import Store
from tests.api import ALICE, YAML, enqueued_trials, queue_depth, small_spec, submit
from tests.core import WORKER, finish

ROOT = Path(__file__).resolve().parents[2]


def error(response: Any, status: int, code: str) -> dict[str, Any]:
    """The error body, after checking its status, shape and code."""
    assert response.status_code == status, response.get_data()[:500]
    body = response.json
    assert set(body) == {"code", "message", "details"} and body["code"] == code
    return body


def assert_nothing_stored(client: FlaskClient, settings: Settings) -> None:
    assert client.get("/api/v1/sweeps", headers=ALICE).json["items"] == []
    assert queue_depth(settings) == 0


# -- submitting ---------------------------------------------------------------------------


def test_submit_json_stores_and_enqueues_every_trial(
    client: FlaskClient, store: Store, settings: Settings
) -> None:
    response = client.post("/api/v1/sweeps", json=small_spec(), headers=ALICE)
    assert response.status_code == 201
    body = response.json
    assert body["trials"] == 6 and body["name"] == "api-test"
    assert response.headers["Location"] == f"/api/v1/sweeps/{body['id']}"
    assert body["links"]["export"] == f"/api/v1/sweeps/{body['id']}/export?format=csv"
    assert store.reads.get_sweep(body["id"], owner="alice")["trial_count"] == 6
    stored = [t["_id"] for t in store.reads.trials(body["id"], limit=6)[0]]
    assert sorted(enqueued_trials(settings)) == sorted(stored)


@pytest.mark.parametrize("media", ["application/yaml", "application/x-yaml", "text/yaml"])
def test_submit_yaml(client: FlaskClient, settings: Settings, store: Store, media: str) -> None:
    text = (ROOT / "configs" / "quickstart.yaml").read_text()
    response = client.post(
        "/api/v1/sweeps", data=text, headers={**ALICE, "Content-Type": f"{media}; charset=utf-8"}
    )
    assert response.status_code == 201 and response.json["trials"] == 12
    assert len(set(enqueued_trials(settings))) == 12


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/xml", "multipart/form-data; boundary=x", None]
)
def test_other_media_types_are_415(
    client: FlaskClient, settings: Settings, content_type: str | None
) -> None:
    headers = {**ALICE, **({"Content-Type": content_type} if content_type else {})}
    response = client.post("/api/v1/sweeps", data=json.dumps(small_spec()), headers=headers)
    body = error(response, 415, "unsupported_media_type")
    assert "application/yaml" in body["details"]["accepted"]
    assert_nothing_stored(client, settings)


def test_a_body_over_the_limit_is_413(client: FlaskClient, settings: Settings) -> None:
    spec = small_spec(description="x" * (settings.api_max_body_bytes + 1))
    error(client.post("/api/v1/sweeps", json=spec, headers=ALICE), 413, "body_too_large")
    assert_nothing_stored(client, settings)


def test_an_invalid_spec_is_422_listing_every_problem(
    client: FlaskClient, settings: Settings
) -> None:
    spec = small_spec(
        model={"hidden_units": [8, -1], "activation": "swish", "depth": 3},
        objective={"metric": "val_rmse"},
    )
    body = error(client.post("/api/v1/sweeps", json=spec, headers=ALICE), 422, "invalid_spec")
    paths = {p["path"] for p in body["details"]["problems"]}
    assert {"model.hidden_units[1]", "model.activation", "model.depth"} <= paths
    assert all(p["message"] for p in body["details"]["problems"])
    assert_nothing_stored(client, settings)


@pytest.mark.parametrize(
    ("spec", "count", "limit"),
    [
        (small_spec(model={"hidden_units": list(range(1, 502))}), 501, 500),
        (small_spec(limits={"max_trials": 4}), 6, 4),
    ],
    ids=["server-limit", "spec-limit"],
)
def test_too_many_trials_is_422_naming_the_count(
    client: FlaskClient, settings: Settings, spec: dict[str, Any], count: int, limit: int
) -> None:
    body = error(client.post("/api/v1/sweeps", json=spec, headers=ALICE), 422, "too_many_trials")
    assert body["details"]["count"] == count and body["details"]["limit"] == limit
    assert f"{count:,} trials" in body["message"]
    assert_nothing_stored(client, settings)


def test_a_huge_dimension_is_refused_before_it_is_listed(
    client: FlaskClient, settings: Settings
) -> None:
    spec = small_spec(model={"hidden_units": {"int": [1, 10**12]}})
    body = error(client.post("/api/v1/sweeps", json=spec, headers=ALICE), 422, "invalid_spec")
    assert body["details"]["problems"][0]["path"] == "model.hidden_units.int"
    assert "1,000,000,000,000 values" in body["message"]
    assert_nothing_stored(client, settings)


def test_a_huge_dimension_in_a_sub_section_is_refused_before_it_is_listed(
    client: FlaskClient, settings: Settings
) -> None:
    spec = small_spec(execution={"parallel": {"tau": {"int": [1, 10**12]}}})
    body = error(client.post("/api/v1/sweeps", json=spec, headers=ALICE), 422, "invalid_spec")
    assert body["details"]["problems"][0]["path"] == "execution.parallel.tau.int"
    assert_nothing_stored(client, settings)


def test_epochs_over_the_limit_are_422(client: FlaskClient, settings: Settings) -> None:
    spec = small_spec(training={"epochs": [1, settings.api_max_epochs + 1]})
    body = error(client.post("/api/v1/sweeps", json=spec, headers=ALICE), 422, "invalid_spec")
    assert body["details"]["problems"][0]["path"] == "training.epochs"
    assert_nothing_stored(client, settings)


@pytest.mark.parametrize(
    ("data", "headers", "code", "where"),
    [
        ('{"name": "x",', {"Content-Type": "application/json"}, "malformed_body", "JSON"),
        ("name: [x\n", YAML, "malformed_body", "YAML"),
        ("a: &x [1]\nname: *x\n", YAML, "malformed_body", "aliases"),
        (b"\xff\xfe", {"Content-Type": "application/json"}, "malformed_body", "UTF-8"),
        ("[" * 5000 + "]" * 5000, {"Content-Type": "application/json"}, "malformed_body", "deeper"),
        ('{"name": "x", "$where": "1"}', {"Content-Type": "application/json"},
         "invalid_parameter", "body.$where"),
        ('{"name": "x", "model": {"hidden_units": {"$gt": 1}}}',
         {"Content-Type": "application/json"}, "invalid_parameter", "body.model.hidden_units.$gt"),
        ("name: x\n1: y\n", YAML, "invalid_parameter", "keys must be strings"),
        ("name: x\ndescription: !!set {a}\n", YAML, "invalid_parameter", "JSON value"),
    ],
    ids=["json", "yaml", "alias", "utf8", "deep", "where", "operator", "int-key", "set"],
)
def test_malformed_bodies_and_operator_keys_are_400(
    client: FlaskClient,
    settings: Settings,
    data: str | bytes,
    headers: dict[str, str],
    code: str,
    where: str,
) -> None:
    response = client.post("/api/v1/sweeps", data=data, headers={**ALICE, **headers})
    body = error(response, 400, code)
    assert where in body["message"]
    assert_nothing_stored(client, settings)


def test_yaml_timestamps_stay_text_and_non_mappings_are_422(client: FlaskClient) -> None:
    text = yaml.safe_dump(small_spec(description="x"))
    text = text.replace("description: x", "description: 2024-01-01")
    response = client.post("/api/v1/sweeps", data=text, headers={**ALICE, **YAML})
    assert response.status_code == 201
    sweep = client.get(f"/api/v1/sweeps/{response.json['id']}", headers=ALICE).json
    assert sweep["description"] == "2024-01-01"
    for data in ("[1, 2]", "null", '"spec"'):
        response = client.post("/api/v1/sweeps", data=data, headers={**ALICE, **YAML})
        assert error(response, 422, "invalid_spec")["details"]["problems"][0]["path"] == ""


# -- reading ----------------------------------------------------------------------------


def test_list_sweeps_pages_with_a_cursor(client: FlaskClient) -> None:
    made = [submit(client, small_spec(name=f"s{i}")) for i in range(3)]
    first = client.get("/api/v1/sweeps?limit=2", headers=ALICE).json
    assert [s["id"] for s in first["items"]] == made[::-1][:2]
    assert first["links"]["next"].startswith("/api/v1/sweeps?limit=2&cursor=")
    second = client.get(first["links"]["next"], headers=ALICE).json
    assert [s["id"] for s in second["items"]] == [made[0]] and second["next_cursor"] is None
    assert second["items"][0]["status"] == "queued" and second["items"][0]["counts"]["queued"] == 6
    bad = client.get("/api/v1/sweeps?cursor=not-a-cursor", headers=ALICE)
    assert error(bad, 400, "invalid_parameter")["details"]["parameter"] == "cursor"
    for query in ("limit=0", "limit=51", "limit=x", "limit=1&limit=2", "limit=%C2%B2"):
        assert client.get(f"/api/v1/sweeps?{query}", headers=ALICE).status_code == 400


def test_show_gives_spec_counts_best_throughput_and_eta(client: FlaskClient, store: Store) -> None:
    sweep_id = submit(client)
    fresh = client.get(f"/api/v1/sweeps/{sweep_id}", headers=ALICE).json
    assert fresh["spec"] == small_spec() and fresh["best"] is None
    assert fresh["throughput"]["remaining"] == 6 and fresh["throughput"]["eta_seconds"] is None
    trials = store.reads.trials(sweep_id, limit=2)[0]
    for trial, objective in zip(trials, (0.5, 0.9), strict=True):
        attempt = store.lifecycle.claim(trial["_id"], WORKER, stale_after=60)["attempt"]
        finish(store, trial["_id"], attempt, TrialState.COMPLETE, result={"objective": objective})
    shown = client.get(f"/api/v1/sweeps/{sweep_id}", headers=ALICE).json
    assert shown["status"] == "running" and shown["counts"]["complete"] == 2
    assert shown["best"]["id"] == trials[1]["_id"] and shown["best"]["objective"] == 0.9
    assert shown["throughput"]["per_minute"] > 0 and shown["throughput"]["eta_seconds"] > 0


# -- cancel, retry, delete ----------------------------------------------------------------


def test_cancel_then_delete_and_409_while_anything_runs(client: FlaskClient, store: Store) -> None:
    sweep_id = submit(client)
    path = f"/api/v1/sweeps/{sweep_id}"
    body = error(client.delete(path, headers=ALICE), 409, "conflict")
    assert "6 queued and 0 running" in body["message"]
    running = store.reads.trials(sweep_id, limit=1)[0][0]["_id"]
    store.lifecycle.claim(running, WORKER, stale_after=60)
    cancelled = client.post(f"{path}/cancel", headers=ALICE).json
    assert cancelled["cancelled"] == 5 and cancelled["stopping"] == 1
    assert cancelled["sweep"]["status"] == "cancelled"
    assert client.post(f"{path}/cancel", headers=ALICE).json["cancelled"] == 0
    assert "1 running" in error(client.delete(path, headers=ALICE), 409, "conflict")["message"]
    finish(store, running, 1, TrialState.CANCELLED)
    assert client.delete(path, headers=ALICE).json == {
        "id": sweep_id, "deleted": True, "trials": 6, "metrics": 0, "texts": 0, "artifacts": 0,
    }  # fmt: skip
    error(client.get(path, headers=ALICE), 404, "not_found")
    error(client.delete(path, headers=ALICE), 404, "not_found")


def test_retry_requeues_failed_and_stale_trials_and_enqueues_them(
    client: FlaskClient, store: Store, settings: Settings
) -> None:
    sweep_id = submit(client)
    trials = [t["_id"] for t in store.reads.trials(sweep_id, limit=6)[0]]
    for trial_id in trials[:2]:
        attempt = store.lifecycle.claim(trial_id, WORKER, stale_after=60)["attempt"]
        finish(store, trial_id, attempt, TrialState.FAILED, error="boom")
    stale = store.lifecycle.claim(trials[2], WORKER, stale_after=60)
    store.db["trials"].update_one(
        {"_id": trials[2]}, {"$set": {"heartbeat_at": stale["heartbeat_at"].replace(year=2000)}}
    )
    enqueued_trials(settings)  # empty the queue of the submit's messages
    body = client.post(f"/api/v1/sweeps/{sweep_id}/retry", headers=ALICE).json
    assert body["retried"] == 2 and body["requeued_stale"] == 1
    assert body["sweep"]["counts"]["queued"] == 6 and body["sweep"]["counts"]["failed"] == 0
    assert sorted(enqueued_trials(settings)) == sorted(trials[:3])
    client.post(f"/api/v1/sweeps/{sweep_id}/cancel", headers=ALICE)
    error(client.post(f"/api/v1/sweeps/{sweep_id}/retry", headers=ALICE), 409, "conflict")
