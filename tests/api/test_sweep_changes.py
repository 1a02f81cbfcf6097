"""``/api/v1/sweeps/{id}/pause``, ``/resume`` and ``/change``, and ``search.warm_start`` at
submit: the owner's only (another user's sweep is a 404, as a missing one), every refusal
naming the field and rule and changing nothing, each change in the sweep's history."""

from __future__ import annotations

from flask.testing import FlaskClient

from core.store.store import Store
from tests.api import ALICE, BOB, small_spec, submit
from tests.api.test_sweeps import error
from tests.core import WORKER

TPE = {"algorithm": "tpe", "trials": 6, "parallelism": 2, "seed": 1}


def tpe_sweep(client: FlaskClient) -> str:
    model = {"hidden_units": {"choice": [8, 16, 32]}, "activation": ["relu", "tanh"]}
    return submit(client, small_spec(model=model, search=TPE))


def test_pause_resume_and_change_answer_the_sweep_and_keep_its_history(
    client: FlaskClient, store: Store
) -> None:
    sweep_id = tpe_sweep(client)
    url = f"/api/v1/sweeps/{sweep_id}"
    paused = client.post(f"{url}/pause", headers=ALICE)
    assert paused.status_code == 200, paused.json
    assert paused.json["changed"] is True and paused.json["sweep"]["status"] == "paused"
    assert client.post(f"{url}/pause", headers=ALICE).json["changed"] is False
    # A worker's claim now starts nothing: the trial stays queued.
    queued = [t["_id"] for t in store.reads.trials(sweep_id, limit=5)[0]]
    assert store.lifecycle.claim(queued[0], WORKER, stale_after=60) is None
    assert store.reads.counts(sweep_id)["running"] == 0
    resumed = client.post(f"{url}/resume", headers=ALICE).json
    assert resumed["changed"] is True and resumed["sweep"]["status"] == "queued"
    change = {"trials": 9, "add": {"model.hidden_units": [64]}}
    changed = client.post(f"{url}/change", json=change, headers=ALICE)
    assert changed.status_code == 200, changed.json
    assert changed.json["summary"] == "search.trials 6 -> 9; model.hidden_units + [64]"
    assert changed.json["spec_rev"] == 1
    detail = client.get(url, headers=ALICE).json
    assert detail["spec"]["search"]["trials"] == 9 and detail["spec_rev"] == 1
    assert detail["search"]["trials"] == 9
    assert [(c["kind"], c["by"]) for c in detail["changes"]] == [
        ("pause", "alice"), ("resume", "alice"), ("change", "alice")
    ]  # fmt: skip


def test_a_change_that_breaks_a_rule_is_a_422_naming_it_and_changes_nothing(
    client: FlaskClient,
) -> None:
    sweep_id = tpe_sweep(client)
    url = f"/api/v1/sweeps/{sweep_id}/change"
    for body, path in [
        ({"trials": 3}, "trials"),
        ({"add": {"model.activation": ["tanh"]}}, "add.model.activation"),
        ({"narrow": {"model.hidden_units": [8, 16]}}, "narrow.model.hidden_units"),
        ({"bigger": True}, "bigger"),
    ]:
        body_out = error(client.post(url, json=body, headers=ALICE), 422, "invalid_spec")
        assert body_out["details"]["problems"][0]["path"].startswith(path), body_out
    # Past the server's api_max_trials (500), as a submit would be.
    error(client.post(url, json={"trials": 501}, headers=ALICE), 422, "too_many_trials")
    bad = client.post(url, data="not json", headers={**ALICE, "Content-Type": "text/plain"})
    error(bad, 400, "invalid_parameter")
    detail = client.get(f"/api/v1/sweeps/{sweep_id}", headers=ALICE).json
    assert detail["spec_rev"] == 0 and detail["changes"] == []


def test_another_user_cannot_pause_resume_change_or_warm_start_from_a_sweep(
    client: FlaskClient, store: Store
) -> None:
    sweep_id = tpe_sweep(client)
    url = f"/api/v1/sweeps/{sweep_id}"
    for route, body in [("pause", None), ("resume", None), ("change", {"trials": 9})]:
        error(client.post(f"{url}/{route}", json=body, headers=BOB), 404, "not_found")
    model = {"hidden_units": {"choice": [8, 16, 32]}, "activation": ["relu", "tanh"]}
    warm = small_spec(model=model, search={**TPE, "warm_start": [sweep_id]})
    foreign = error(client.post("/api/v1/sweeps", json=warm, headers=BOB), 404, "not_found")
    missing = small_spec(model=model, search={**TPE, "warm_start": ["0123456789ab"]})
    gone = error(client.post("/api/v1/sweeps", json=missing, headers=BOB), 404, "not_found")
    assert foreign["message"].replace(sweep_id, "X") == gone["message"].replace(
        "0123456789ab", "X"
    )
    assert client.get("/api/v1/sweeps", headers=BOB).json["items"] == []
    sweep = store.reads.get_sweep(sweep_id)
    assert sweep.get("paused_at") is None and not sweep.get("changes")
    # The owner may warm-start from it.
    response = client.post("/api/v1/sweeps", json=warm, headers=ALICE)
    assert response.status_code == 201, response.json


def test_a_cancelled_sweep_cannot_be_paused_or_changed(client: FlaskClient) -> None:
    sweep_id = tpe_sweep(client)
    url = f"/api/v1/sweeps/{sweep_id}"
    assert client.post(f"{url}/cancel", headers=ALICE).status_code == 200
    error(client.post(f"{url}/pause", headers=ALICE), 409, "conflict")
    error(client.post(f"{url}/change", json={"trials": 9}, headers=ALICE), 409, "conflict")
