"""Bearer tokens and ownership: every protected route against no token, a bad token,
another owner's token and the owner's token; the open routes without one."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from core.store import Store
from tests.api import ALICE, BOB, submit
from web.auth import identify

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
    ("POST", "/api/v1/sweeps/{sweep}/cancel", 200),
    ("DELETE", "/api/v1/sweeps/{sweep}", 200),  # after the cancel above: nothing runs
]


@pytest.fixture
def ids(client: FlaskClient, store: Store) -> dict[str, str]:
    sweep_id = submit(client)
    trial_id = store.trials(sweep_id, limit=1)[0][0]["_id"]
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
    assert store.counts(ids["sweep"])["queued"] == 6  # nothing was cancelled or deleted


def test_another_owner_sees_404_and_changes_nothing(
    client: FlaskClient, ids: dict[str, str], store: Store
) -> None:
    for method, template, _ in SWEEP_ROUTES:
        response = call(client, method, template.format(**ids), BOB)
        assert response.status_code == 404, (method, template)
        assert response.json["code"] == "not_found"
    assert store.counts(ids["sweep"])["queued"] == 6
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


def test_identify_compares_against_every_token() -> None:
    tokens = {"tok-alice": "alice", "tok-bob": "bob"}
    assert identify("Bearer tok-bob", tokens) == "bob"
    assert identify("bearer   tok-alice ", tokens) == "alice"
    assert identify("Bearer tok-alic", tokens) is None
    assert identify("Bearer tok-alice-and-more", tokens) is None
    assert identify("Bearer ", tokens) is None
    assert identify("tok-alice", tokens) is None
    assert identify(None, tokens) is None
    assert identify("Bearer tok-alice", {}) is None
    assert identify("Bearer \udcff\u00e9", tokens) is None
