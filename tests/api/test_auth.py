"""Bearer tokens and ownership: every protected route against no token, a bad token,
another owner's token and the owner's token; the open routes without one."""

from __future__ import annotations

import re

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from core.store.store import Store
from tests.api import ALICE, ALICE_TOKEN, BOB, submit

NONE: dict[str, str] = {}
BAD = {"Authorization": "Bearer not-a-token"}
WRONG_SCHEME = {"Authorization": "Basic dG9rLWFsaWNlOg=="}

# (method, path, expected status for the owner); {sweep} and {trial} are filled in.
SWEEP_ROUTES = [
    ("GET", "/api/v1/sweeps/{sweep}", 200),
    ("GET", "/api/v1/sweeps/{sweep}/trials", 200),
    ("GET", "/api/v1/sweeps/{sweep}/export?format=jsonl", 200),
    ("GET", "/api/v1/trials/{trial}", 200),
    ("POST", "/api/v1/sweeps/{sweep}/retry", 200),
    ("POST", "/api/v1/sweeps/{sweep}/pause", 200),
    ("POST", "/api/v1/sweeps/{sweep}/resume", 200),
    ("POST", "/api/v1/sweeps/{sweep}/change", 400),  # no body: the owner gets that far
    ("POST", "/api/v1/sweeps/{sweep}/cancel", 200),
    ("DELETE", "/api/v1/sweeps/{sweep}", 200),  # after the cancel above: nothing runs
]


@pytest.fixture
def ids(client: FlaskClient, store: Store) -> dict[str, str]:
    sweep_id = submit(client)
    trial_id = store.reads.trials(sweep_id, limit=1)[0][0]["_id"]
    return {"sweep": sweep_id, "trial": trial_id}


def call(client: FlaskClient, method: str, path: str, headers: dict[str, str]) -> TestResponse:
    return client.open(path, method=method, headers=headers)


@pytest.mark.parametrize("headers", [NONE, BAD, WRONG_SCHEME], ids=["none", "bad", "basic"])
def test_every_protected_route_needs_a_known_bearer_token(
    client: FlaskClient, ids: dict[str, str], store: Store, headers: dict[str, str]
) -> None:
    routes = [("GET", "/api/v1/sweeps", 200), ("POST", "/api/v1/sweeps", 201),
              ("GET", "/api/v1/workers", 200), *SWEEP_ROUTES]  # fmt: skip
    for method, template, _ in routes:
        response = call(client, method, template.format(**ids), headers)
        assert response.status_code == 401, (method, template)
        assert response.json["code"] == "unauthorized"
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert store.reads.counts(ids["sweep"])["queued"] == 6  # nothing was cancelled or deleted


def test_another_owner_sees_404_and_changes_nothing(
    client: FlaskClient, ids: dict[str, str], store: Store
) -> None:
    for method, template, _ in SWEEP_ROUTES:
        response = call(client, method, template.format(**ids), BOB)
        assert response.status_code == 404, (method, template)
        assert response.json["code"] == "not_found"
    assert store.reads.counts(ids["sweep"])["queued"] == 6
    assert client.get("/api/v1/sweeps", headers=BOB).json["items"] == []


def test_the_owner_may_do_everything(client: FlaskClient, ids: dict[str, str]) -> None:
    listed = client.get("/api/v1/sweeps", headers=ALICE).json["items"]
    assert [s["id"] for s in listed] == [ids["sweep"]] and listed[0]["owner"] == "alice"
    for method, template, status in SWEEP_ROUTES:
        response = call(client, method, template.format(**ids), ALICE)
        assert response.status_code == status, (method, template, response.get_data()[:300])
    assert client.get(f"/api/v1/sweeps/{ids['sweep']}", headers=ALICE).status_code == 404


def test_missing_and_foreign_sweeps_answer_alike(client: FlaskClient, ids: dict[str, str]) -> None:
    foreign = client.get(f"/api/v1/sweeps/{ids['sweep']}", headers=BOB).json
    missing = client.get("/api/v1/sweeps/0123456789ab", headers=BOB).json
    assert foreign["code"] == missing["code"] == "not_found"
    assert foreign["message"].replace(ids["sweep"], "X") == missing["message"].replace(
        "0123456789ab", "X"
    )


def test_open_routes_need_no_token(client: FlaskClient) -> None:
    assert client.get("/api/v1/health").status_code == 200
    assert client.get("/api/v1/openapi.json").json["openapi"].startswith("3.")
    assert client.get("/openapi.json").json == client.get("/api/v1/openapi.json").json


def test_every_api_route_of_the_url_map_needs_a_token(app: Flask, client: FlaskClient,
                                                       ids: dict[str, str]) -> None:
    """Taken from the app's URL map, so a new route cannot be left out."""
    open_paths = {"/api/v1/health", "/api/v1/openapi.json", "/openapi.json"}
    values = {"sweep_id": ids["sweep"], "trial_id": ids["trial"], "name": "alice"}
    seen = 0
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith("/api/v1/") or rule.rule in open_paths:
            continue
        path = rule.rule
        for name in rule.arguments:
            path = path.replace(f"<{name}>", values[name])
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            response = call(client, method, path, NONE)
            assert response.status_code == 401, (method, path)
            assert set(response.json) == {"code", "message", "details"}
            assert ids["sweep"] not in response.get_data(as_text=True)
            seen += 1
    assert seen >= 10


def test_the_session_cookie_is_no_credential_for_the_api(app: Flask, ids: dict[str, str]) -> None:
    client = app.test_client()
    form = client.get("/login").get_data(as_text=True)
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', form)
    assert csrf is not None
    logged_in = client.post("/login", data={"token": ALICE_TOKEN, "csrf_token": csrf.group(1)})
    assert logged_in.status_code == 303 and client.get("/").status_code == 200
    assert client.get("/api/v1/sweeps").status_code == 401
    assert client.post(f"/api/v1/sweeps/{ids['sweep']}/cancel").status_code == 401
