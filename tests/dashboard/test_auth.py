"""The dashboard behind the login: every page and data route (taken from the app's URL map,
so a new route cannot be left out) against an anonymous caller, another owner, the owner
and an admin; the login form, logout, CSRF, the session cookie, the open loopback mode,
throttling of failed logins, and the paginated sweep list. Flask's client on the real
store (SecantusDB)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from flask import Flask, url_for
from flask.testing import FlaskClient

from cli.app import create_app
from cli.dashboard_server import gunicorn_argv
from core.errors import ConfigError
from core.settings import Settings
from dashboard import blueprint, payloads
from tests.core import make_sweep
from tests.dashboard.conftest import (
    ALICE_TOKEN,
    BOB_TOKEN,
    ROOT_TOKEN,
    TOKENS,
    Sweep,
    csrf_of,
    dashboard_app,
    dashboard_settings,
    login,
    small_sweep_spec,
)
from tests.kept_models import keep_model
from tests.services import free_port, wait_listening
from web.local_open import local_open_note

#: Routes that need no login (they carry no data): the files pages load.
OPEN_ENDPOINTS = {"dashboard.static", "dashboard.plotly_js", "dashboard.states_css"}
#: Routes every logged-in user may read, whoever owns what: the sweep list (filtered to
#: the caller's sweeps) and the workers (hosts and what they run, as GET /api/v1/workers).
SHARED_ENDPOINTS = {
    "dashboard.sweeps",
    "dashboard.sweeps_data",
    "dashboard.workers",
    "dashboard.workers_data",
}
#: Query arguments a data route requires.
QUERIES = {"dashboard.sweep_changes": "?since=0", "dashboard.trials.compare_trials": "?indexes=0,1"}


@pytest.fixture
def settings(secantus_url: str, db_name: str) -> Settings:
    return dashboard_settings(secantus_url, db_name)


@pytest.fixture
def app(settings: Settings, sweep: Sweep, monkeypatch: pytest.MonkeyPatch) -> Flask:
    monkeypatch.setattr(payloads, "PREPARED_SECONDS", 0)
    sweep.finish(0, objective=0.75, epochs=2)
    keep_model(sweep.store, sweep.store.reads.get_trial(sweep.ids[0]), 0.75)  # its download
    return dashboard_app(settings, sweep.store)


@pytest.fixture
def client(app: Flask) -> Iterator[FlaskClient]:
    with app.test_client() as client:
        yield client


def dashboard_urls(app: Flask, sweep: Sweep, method: str = "GET") -> list[tuple[str, str]]:
    """(endpoint, URL) of every dashboard route of `method` (GET or POST; every route is
    one of them), filled in with alice's sweep."""
    values = {"sweep_id": sweep.sweep_id, "trial_id": sweep.ids[0], "index": 0}
    urls = []
    with app.test_request_context():
        for rule in app.url_map.iter_rules():
            if not rule.endpoint.startswith("dashboard.") or rule.endpoint in OPEN_ENDPOINTS:
                continue
            assert rule.methods is not None and rule.methods & {"GET", "POST"}, rule
            if method not in rule.methods:
                continue
            args = {name: values[name] for name in rule.arguments}
            urls.append(
                (rule.endpoint, url_for(rule.endpoint, **args) + QUERIES.get(rule.endpoint, ""))
            )
    if method == "GET":
        assert len(urls) >= 18, urls  # four pages, a redirect, a download, twelve data routes
    return urls


def no_data(body: str, sweep: Sweep) -> None:
    for secret in (sweep.sweep_id, "dashboard-test", "alice", "val_accuracy"):
        assert secret not in body, (secret, body[:300])


def test_anonymous_requests_get_the_login_page_or_401_and_no_data(
    app: Flask, client: FlaskClient, sweep: Sweep
) -> None:
    for endpoint, url in dashboard_urls(app, sweep):
        response = client.get(url)
        body = response.get_data(as_text=True)
        if url.startswith("/dashboard/data/"):
            assert response.status_code == 401, (endpoint, url)
            assert set(response.json) == {"code", "message", "details"}
            assert response.json["code"] == "unauthorized"
        else:
            assert response.status_code == 302, (endpoint, url)
            assert response.headers["Location"].startswith("/login?next=")
        no_data(body.replace(url.split("?")[0], ""), sweep)  # the redirect names the URL


def test_another_owner_gets_404_and_no_data(app: Flask, client: FlaskClient, sweep: Sweep) -> None:
    login(client, BOB_TOKEN)
    for endpoint, url in dashboard_urls(app, sweep):
        response = client.get(url)
        body = response.get_data(as_text=True)
        if endpoint in SHARED_ENDPOINTS:
            assert response.status_code == 200, (endpoint, url)
            if "workers" not in endpoint:
                no_data(body, sweep)
            continue
        assert response.status_code == 404, (endpoint, url, body[:300])
        # The 404 names what was asked for, as for a missing one; nothing else of it.
        no_data(
            re.sub(
                r"(no (sweep|trial) [0-9a-f-]+)|((sweep|trial) &#39;[0-9a-f-]+&#39;"
                r" not found)",
                "",
                body,
            ),
            sweep,
        )


def test_every_dashboard_write_needs_the_owner_and_the_csrf_token(
    app: Flask, client: FlaskClient, sweep: Sweep
) -> None:
    posts = dashboard_urls(app, sweep, "POST")
    assert {endpoint for endpoint, _ in posts} >= {"dashboard.trials.cancel",
                                                   "dashboard.trials.retry_failed"}
    counts = sweep.store.reads.get_sweep(sweep.sweep_id)["counts"]
    for endpoint, url in posts:
        anonymous = client.post(url)
        assert anonymous.status_code in (400, 401), (endpoint, anonymous.status_code)
    page = login(client, BOB_TOKEN).get("/").get_data(as_text=True)
    bobs = {"X-CSRF-Token": csrf_of(page)}
    for endpoint, url in posts:
        response = client.post(url, headers=bobs)
        assert response.status_code == 404, (endpoint, response.get_data(as_text=True)[:300])
        no_data(re.sub(r"no sweep [0-9a-f]+", "", response.get_data(as_text=True)), sweep)
        bearer = client.post(url, headers={"Authorization": f"Bearer {BOB_TOKEN}"})
        assert bearer.status_code == 404, endpoint
    client.post("/logout", data={"csrf_token": csrf_of(page)})
    login(client, ALICE_TOKEN)
    for endpoint, url in posts:  # the owner's session without the page's token
        assert client.post(url).json["code"] == "csrf_failed", endpoint
    after = sweep.store.reads.get_sweep(sweep.sweep_id)
    assert after["counts"] == counts and after.get("cancelled_at") is None


@pytest.mark.parametrize("token", [ALICE_TOKEN, ROOT_TOKEN], ids=["owner", "admin"])
def test_the_owner_and_an_admin_see_every_route(
    app: Flask, client: FlaskClient, sweep: Sweep, token: str
) -> None:
    login(client, token)
    for endpoint, url in dashboard_urls(app, sweep):
        response = client.get(url)
        expected = 302 if endpoint == "dashboard.trial_by_index" else 200
        assert response.status_code == expected, (
            endpoint,
            url,
            response.get_data(as_text=True)[:300],
        )
    listed = client.get("/dashboard/data/sweeps").json["sweeps"]
    assert [s["id"] for s in listed] == [sweep.sweep_id]


def test_each_owner_lists_only_their_sweeps_and_the_admin_all(
    app: Flask, client: FlaskClient, sweep: Sweep
) -> None:
    bobs, _ = make_sweep(sweep.store, small_sweep_spec(name="bobs-sweep"), owner="bob")
    login(client, BOB_TOKEN)
    assert [s["id"] for s in client.get("/dashboard/data/sweeps").json["sweeps"]] == [bobs]
    page = client.get("/").get_data(as_text=True)
    assert bobs in page and sweep.sweep_id not in page
    client.post("/logout", data={"csrf_token": csrf_of(page)})
    login(client, ROOT_TOKEN)
    listed = {s["id"] for s in client.get("/dashboard/data/sweeps").json["sweeps"]}
    assert listed == {bobs, sweep.sweep_id}


def test_login_logout_and_the_session_cookie(client: FlaskClient) -> None:
    assert client.get("/").status_code == 302
    form = client.get("/login?next=/workers")
    html = form.get_data(as_text=True)
    assert 'name="token"' in html and 'value="/workers"' in html
    response = client.post(
        "/login", data={"token": ALICE_TOKEN, "next": "/workers", "csrf_token": csrf_of(html)}
    )
    assert response.status_code == 303 and response.headers["Location"] == "/workers"
    cookie = next(
        v
        for k, v in response.headers.items()
        if k == "Set-Cookie" and v.startswith("sweepstack_session=")
    )
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert "Secure" not in cookie  # plain http on 127.0.0.1 keeps working (auto)
    assert ALICE_TOKEN not in cookie
    page = client.get("/")
    assert page.status_code == 200 and 'id="logout"' in page.get_data(as_text=True)
    # The cookie holds a login's random id, never the token or a digest of it.
    value = cookie.split(";")[0].split("=", 1)[1]
    payload = client.application.session_interface.get_signing_serializer(
        client.application).loads(value)  # fmt: skip
    assert set(payload) == {"login", "csrf_token"} and len(payload["login"]) == 64
    assert hashlib.sha256(ALICE_TOKEN.encode()).hexdigest() not in json.dumps(payload)
    # A copy of the cookie taken before logout (another browser, a thief) ...
    thief = client.application.test_client()
    thief.set_cookie("sweepstack_session", value)
    assert thief.get("/dashboard/data/sweeps").status_code == 200
    out = client.post("/logout", data={"csrf_token": csrf_of(page.get_data(as_text=True))})
    assert out.status_code == 303 and out.headers["Location"] == "/login"
    assert client.get("/").status_code == 302
    assert client.get("/dashboard/data/sweeps").status_code == 401
    # ... opens nothing once the login ended.
    assert thief.get("/dashboard/data/sweeps").status_code == 401
    assert thief.get("/").status_code == 302


def test_the_cookie_is_secure_over_https_or_when_configured(
    settings: Settings, sweep: Sweep
) -> None:
    for secure, base_url, expect in [
        ("auto", "https://localhost", True),
        ("true", "http://localhost", True),
        ("false", "https://localhost", False),
    ]:
        app = dashboard_app(
            dataclasses.replace(settings, session_cookie_secure=secure), sweep.store
        )
        client = app.test_client()
        html = client.get("/login", base_url=base_url).get_data(as_text=True)
        response = client.post(
            "/login", base_url=base_url, data={"token": ALICE_TOKEN, "csrf_token": csrf_of(html)}
        )
        cookie = response.headers.get("Set-Cookie", "")
        assert ("; Secure" in cookie) is expect, (secure, base_url, cookie)


def test_forms_without_the_csrf_token_are_refused(client: FlaskClient) -> None:
    client.get("/login")
    refused = client.post("/login", data={"token": ALICE_TOKEN})
    assert refused.status_code == 400 and refused.json["code"] == "csrf_failed"
    forged = client.post("/login", data={"token": ALICE_TOKEN, "csrf_token": "x" * 43})
    assert forged.status_code == 400
    assert client.get("/").status_code == 302  # not logged in
    login(client)
    assert client.post("/logout").status_code == 400  # no token: still logged in
    assert client.get("/").status_code == 200


def test_a_wrong_token_and_a_foreign_next_are_refused(client: FlaskClient) -> None:
    html = client.get("/login").get_data(as_text=True)
    wrong = client.post("/login", data={"token": "x" * 40, "csrf_token": csrf_of(html)})
    assert wrong.status_code == 401 and 'id="login-error"' in wrong.get_data(as_text=True)
    for target in ("//evil.example/", "https://evil.example/", "/\\evil.example"):
        html = client.get("/login").get_data(as_text=True)
        response = client.post(
            "/login", data={"token": ALICE_TOKEN, "next": target, "csrf_token": csrf_of(html)}
        )
        assert response.headers["Location"] == "/", target


def test_a_removed_token_ends_its_sessions(settings: Settings, app: Flask, sweep: Sweep) -> None:
    client = login(app.test_client())
    cookie = client.get_cookie("sweepstack_session")
    assert cookie is not None
    tokens = {t: n for t, n in settings.api_tokens.items() if n != "alice"}
    later = dashboard_app(dataclasses.replace(settings, api_tokens=tokens), sweep.store)
    other = later.test_client()
    other.set_cookie("sweepstack_session", cookie.value)
    assert other.get("/dashboard/data/sweeps").status_code == 401


def test_bearer_tokens_work_on_data_routes_and_wrong_ones_are_401(
    client: FlaskClient, sweep: Sweep
) -> None:
    ok = client.get("/dashboard/data/sweeps", headers={"Authorization": f"Bearer {ALICE_TOKEN}"})
    assert ok.status_code == 200 and ok.json["sweeps"][0]["id"] == sweep.sweep_id
    bad = client.get("/dashboard/data/sweeps", headers={"Authorization": "Bearer " + "y" * 40})
    assert bad.status_code == 401 and bad.json["code"] == "unauthorized"


def test_failed_logins_are_throttled_per_address(settings: Settings, sweep: Sweep) -> None:
    app = dashboard_app(
        dataclasses.replace(settings, auth_failures=3, auth_window_seconds=2), sweep.store
    )
    client = app.test_client()
    client.environ_base["REMOTE_ADDR"] = "10.0.0.1"

    def attempt(token: str, c: FlaskClient = client) -> Any:
        html = c.get("/login").get_data(as_text=True)
        return c.post("/login", data={"token": token, "csrf_token": csrf_of(html)})

    for _ in range(5):  # right tokens never count
        assert attempt(ALICE_TOKEN).status_code == 303
    assert [attempt("z" * 40).status_code for _ in range(3)] == [401, 401, 401]
    blocked = attempt("z" * 40)
    assert blocked.status_code == 429 and int(blocked.headers["Retry-After"]) >= 1
    assert blocked.json["code"] == "too_many_failures"
    assert attempt("y" * 40).status_code == 429  # blocked for every wrong try from there
    assert attempt(ALICE_TOKEN).status_code == 303  # a right token is never locked out
    elsewhere = app.test_client()
    elsewhere.environ_base["REMOTE_ADDR"] = "10.0.0.2"
    assert attempt("z" * 40, elsewhere).status_code == 401
    time.sleep(int(blocked.headers["Retry-After"]) + 0.5)
    assert attempt("z" * 40).status_code == 401


def test_open_without_tokens_only_on_loopback(settings: Settings, sweep: Sweep) -> None:
    local = dataclasses.replace(settings, api_tokens={}, admins=frozenset(), bind_host="127.0.0.1")
    page = dashboard_app(local, sweep.store).test_client().get("/")
    assert page.status_code == 200 and sweep.sweep_id in page.get_data(as_text=True)
    for host in (None, "0.0.0.0", "10.1.2.3"):
        closed = dashboard_app(dataclasses.replace(local, bind_host=host), sweep.store)
        assert closed.test_client().get("/").status_code == 302, host
    with_tokens = dashboard_app(dataclasses.replace(settings, bind_host="127.0.0.1"), sweep.store)
    assert with_tokens.test_client().get("/").status_code == 302
    # Open, it answers loopback host names only: a DNS-rebinding page gets nothing.
    client = dashboard_app(local, sweep.store).test_client()
    for host in ("127.0.0.1:8050", "localhost", "[::1]:8050", "127.0.0.2"):
        assert client.get("/", headers={"Host": host}).status_code == 200, host
    for host in ("attacker.example", "attacker.example:8050", "10.1.2.3", "localhost.evil"):
        refused = client.get(f"/sweeps/{sweep.sweep_id}", headers={"Host": host})
        assert refused.status_code == 400 and refused.json["code"] == "host_refused", host
        assert sweep.sweep_id not in refused.get_data(as_text=True)
    cancel = client.post(f"/sweeps/{sweep.sweep_id}/cancel", headers={"Host": "attacker.example"})
    assert cancel.status_code == 400
    # With tokens, names are the token's business (a reverse proxy's name, say).
    assert with_tokens.test_client().get("/", headers={"Host": "sweeps.example"}).status_code == 302


def test_short_tokens_are_refused_at_start(settings: Settings, sweep: Sweep) -> None:
    short = dataclasses.replace(settings, api_tokens={"short-one": "carol"})
    with pytest.raises(ConfigError, match="carol") as raised:
        create_app(short, store=sweep.store, api=False)
    assert "short-one" not in str(raised.value)


def test_the_sweep_list_is_paginated(
    app: Flask, client: FlaskClient, sweep: Sweep, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(blueprint, "SWEEPS_PAGE", 2)
    more = [
        make_sweep(sweep.store, small_sweep_spec(name=f"more-{i}"), owner="alice")[0]
        for i in range(2)
    ]
    login(client)
    first = client.get("/").get_data(as_text=True)
    assert more[1] in first and more[0] in first and sweep.sweep_id not in first
    data = client.get("/dashboard/data/sweeps").json
    assert len(data["sweeps"]) == 2 and data["next"]
    older = client.get(f"/?cursor={data['next']}").get_data(as_text=True)
    assert sweep.sweep_id in older and more[1] not in older and 'id="older-sweeps"' in first


def test_launchers_say_when_the_dashboard_is_open() -> None:
    assert "open without a login" in (local_open_note(Settings(), "127.0.0.1") or "")
    assert local_open_note(Settings(), "0.0.0.0") is None
    assert local_open_note(Settings(api_tokens=dict(TOKENS)), "127.0.0.1") is None
    argv = gunicorn_argv("127.0.0.1", 8050, 4)
    assert "SWEEPSTACK_BIND_HOST=127.0.0.1" in argv and "python:cli.gunicorn_conf" in argv


def test_the_standalone_dashboard_under_gunicorn_asks_for_a_login(
    sweep: Sweep, secantus_url: str, db_name: str
) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWEEPSTACK_")}
    env.update(
        SWEEPSTACK_MONGO_URL=secantus_url,
        SWEEPSTACK_MONGO_DB=db_name,
        SWEEPSTACK_API_TOKENS=",".join(f"{n}:{t}" for t, n in TOKENS.items()),
    )
    server = subprocess.Popen(
        gunicorn_argv("127.0.0.1", port, 2),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_listening("127.0.0.1", port, 30, server)
        base = f"http://127.0.0.1:{port}"
        page = requests.get(f"{base}/sweeps/{sweep.sweep_id}", allow_redirects=False, timeout=10)
        assert page.status_code == 302 and page.headers["Location"].startswith("/login")
        data = requests.get(f"{base}/dashboard/data/sweeps", timeout=10)
        assert data.status_code == 401 and data.json()["code"] == "unauthorized"
        session = requests.Session()
        form = session.get(f"{base}/login", timeout=10).text
        session.post(
            f"{base}/login", data={"token": ALICE_TOKEN, "csrf_token": csrf_of(form)}, timeout=10
        )
        listed = session.get(f"{base}/dashboard/data/sweeps", timeout=10).json()["sweeps"]
        assert [s["id"] for s in listed] == [sweep.sweep_id]
    finally:
        server.terminate()
        server.wait(15)
