"""The dashboard's HTTP surface with Flask's test client, on a real store: pages, JSON,
errors, plotly.js from the package; and the WSGI entry point under a real gunicorn."""

from __future__ import annotations

import gzip
import os
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from flask import Flask
from flask.testing import FlaskClient

from cli.dashboard_server import dashboard, gunicorn_argv
from core.states import TrialState
from dashboard import payloads, plotlyjs
from dashboard.blueprint import STATES_VERSION
from dashboard.figures import STATE_COLOURS
from tests.core import heartbeat, report
from tests.dashboard.conftest import Sweep, fresh_app, login
from tests.services import free_port, wait_listening


@pytest.fixture
def app(sweep: Sweep, secantus_url: str, db_name: str, monkeypatch: pytest.MonkeyPatch) -> Flask:
    """The dashboard alone on the test's store; tables sync and recompute on every request."""
    monkeypatch.setattr(payloads, "PREPARED_SECONDS", 0)
    return fresh_app(sweep.store, secantus_url, db_name)


@pytest.fixture
def client(app: Flask) -> Iterator[FlaskClient]:
    """A client logged in as alice, the sweep's owner."""
    with app.test_client() as client:
        yield login(client)


def get_json(client: FlaskClient, url: str, status: int = 200) -> Any:
    response = client.get(url)
    assert response.status_code == status, response.get_data(as_text=True)[:500]
    assert response.mimetype == "application/json"
    return response.get_json()


def test_pages_load_only_files_of_this_server(client: FlaskClient, sweep: Sweep) -> None:
    sweep.finish(0, objective=0.5)
    for url in ("/", f"/sweeps/{sweep.sweep_id}", f"/trials/{sweep.ids[0]}", "/workers"):
        response = client.get(url)
        assert response.status_code == 200, url
        html = response.get_data(as_text=True)
        sources = re.findall(r'(?:src|href)="([^"]+)"', html)
        assert sources and all(s.startswith(("/", "#", "data:")) for s in sources), sources
        assert "cdn" not in html.lower()
    plotly = client.get("/dashboard/plotly.min.js")
    assert plotly.status_code == 200 and plotly.mimetype == "text/javascript"
    assert plotly.get_data()[:40].startswith(b"/**\n* plotly.js v")
    assert "max-age" in plotly.headers["Cache-Control"]


def test_plotly_js_is_gzipped_for_browsers_that_accept_it(client: FlaskClient) -> None:
    wait = time.monotonic() + 30
    while plotlyjs.gzipped() is None and time.monotonic() < wait:  # compressed at setup
        time.sleep(0.05)
    whole = client.get("/dashboard/plotly.min.js").get_data()
    zipped = client.get("/dashboard/plotly.min.js", headers={"Accept-Encoding": "gzip, br"})
    assert zipped.status_code == 200 and zipped.headers["Content-Encoding"] == "gzip"
    assert zipped.mimetype == "text/javascript" and "Accept-Encoding" in zipped.headers["Vary"]
    assert "max-age" in zipped.headers["Cache-Control"]
    body = zipped.get_data()
    assert len(body) < len(whole) / 2 and gzip.decompress(body) == whole
    again = client.get("/dashboard/plotly.min.js", headers={
        "Accept-Encoding": "gzip", "If-None-Match": zipped.headers["ETag"]})
    assert again.status_code == 304
    plain = client.get("/dashboard/plotly.min.js", headers={"Accept-Encoding": "identity"})
    assert "Content-Encoding" not in plain.headers and plain.get_data() == whole


def test_pages_hold_no_inline_script_style_or_handler(
    client: FlaskClient, sweep: Sweep
) -> None:
    """What the CSP (`web.headers`) refuses: scripts run only from files (a page's data
    comes in JSON blocks, which are not run), no style element or attribute, no
    ``on…=`` handler; the states' colours come as a stylesheet of their own."""
    sweep.finish(0, objective=0.5)
    pages = ("/", f"/sweeps/{sweep.sweep_id}", f"/trials/{sweep.ids[0]}", "/workers",
             "/sweeps/no-such-sweep", "/login")  # fmt: skip
    for url in pages:
        html = client.get(url).get_data(as_text=True)
        for tag in re.findall(r"<script\b[^>]*>", html):
            assert " src=" in tag or 'type="application/json"' in tag, (url, tag)
        assert "<style" not in html and not re.search(r"\sstyle=", html), url
        assert not re.search(r"<[^>]+\son[a-z]+=", html), url
    states = client.get(f"/dashboard/states.css?v={STATES_VERSION}")
    assert states.status_code == 200 and states.mimetype == "text/css"
    assert all(f"--{s}: {c};" in states.get_data(as_text=True) for s, c in STATE_COLOURS.items())
    assert "max-age" in states.headers["Cache-Control"]
    assert f"states.css?v={STATES_VERSION}" in client.get("/workers").get_data(as_text=True)


def test_unknown_things_are_404_in_html_and_json(client: FlaskClient) -> None:
    page = client.get("/sweeps/abcdef012345")
    assert page.status_code == 404 and "not found" in page.get_data(as_text=True)
    # The error page does not poll: its header does not say it is connecting.
    assert "connecting…" not in page.get_data(as_text=True)
    assert "connecting…" in client.get("/workers").get_data(as_text=True)
    assert client.get("/trials/abcdef012345-0000000000000000").status_code == 404
    body = get_json(client, "/dashboard/data/sweeps/abcdef012345", 404)
    assert body["code"] == "not_found" and "abcdef012345" in body["message"]
    assert body == {"code": "not_found", "message": "no sweep abcdef012345",
                    "details": {"kind": "sweep"}}  # the API's shape and words
    get_json(client, "/dashboard/data/trials/abcdef012345-0000000000000000", 404)


def test_bad_arguments_are_400_naming_the_field(client: FlaskClient, sweep: Sweep) -> None:
    base = f"/dashboard/data/sweeps/{sweep.sweep_id}"
    cases = {
        f"{base}/changes": "since: is required",
        f"{base}/changes?since=soon": "since: must be an integer",
        f"{base}/changes?since=-4": "since: must be an integer from 0",
        f"{base}/changes?since={10**22}": "since: must be an integer from 0",
        f"{base}?mode=worst": "mode: must be best or recent",
        f"{base}/curves?indexes=a,b": "indexes: must be trial indexes",
        f"/dashboard/data/trials/{sweep.ids[0]}?attempt=x": "attempt: must be an integer",
        # The reproducer of issue 16: an attempt of 23 digits was a 500 (BSON overflow).
        f"/dashboard/data/trials/{sweep.ids[0]}?attempt=12345678901234567890123": (
            "attempt: must be an integer from"
        ),
    }
    for url, message in cases.items():
        body = get_json(client, url, 400)
        assert body["code"] == "invalid_parameter" and message in body["message"], url
        assert set(body) == {"code", "message", "details"} and body["details"]["parameter"]


def test_sweep_data_then_only_what_changed(client: FlaskClient, sweep: Sweep) -> None:
    for index in range(3):
        sweep.finish(index, objective=0.5 + index / 10, epochs=2)
    base = f"/dashboard/data/sweeps/{sweep.sweep_id}"
    first = get_json(client, base)
    assert first["summary"]["counts"]["complete"] == 3 and first["summary"]["best"]["index"] == 2
    assert first["param"] == "model.hidden_units" and first["params"][-1] == "index"
    assert set(first["figures"]) == {"width", "timing", "scatter", "parallel", "curves",
                                     "history"}
    assert set(first["figures"]["history"]) == {"trials", "time", "epochs"}
    assert set(first["figures"]["timing"]) == {"depth", "params"}
    assert first["summary"]["active_seconds"] > 0
    assert len(first["figures"]["scatter"]["data"][0]["x"]) == 3
    assert len(first["figures"]["curves"]["data"]) == 3
    assert [r["index"] for r in first["top"]] == [2, 1, 0]
    query = "&".join(f"{k}={v}" for k, v in first["versions"].items())

    quiet = get_json(client, f"{base}/changes?since={first['since']}&{query}")
    assert quiet["rows"] == [] and not set(payloads.AGGREGATES) & set(quiet)
    assert quiet["versions"] == first["versions"] and quiet["since"] >= first["since"]

    sweep.clock.advance(5)
    sweep.finish(3, objective=0.95)
    sweep.finish(4, TrialState.FAILED, error="NaN loss at epoch 1")
    changed = get_json(client, f"{base}/changes?since={quiet['since']}&{query}")
    assert [(r["index"], r["state"]) for r in changed["rows"]] == [(3, "complete"),
                                                                     (4, "failed")]
    assert [r["index"] for r in changed["top"]] == [3, 2, 1, 0]
    assert changed["reasons"] == [{"reason": "NaN loss at epoch 1", "n": 1, "example": 4}]
    assert "width" in changed and changed["summary"]["best"]["index"] == 3
    sweep.clock.advance(1)
    claimed = sweep.store.lifecycle.claim(sweep.ids[5], {"name": "w"}, stale_after=60)
    assert claimed is not None
    again = get_json(client, f"{base}/changes?since={changed['since']}")
    assert [r["index"] for r in again["rows"]] == [5]
    sweep.clock.advance(1)
    heartbeat(sweep.store, sweep.ids[5], 1)  # moves updated_at, changes nothing shown
    after = get_json(client, f"{base}/changes?since={again['since']}")
    assert after["rows"] == []


def test_figure_endpoints_and_trial_redirect(client: FlaskClient, sweep: Sweep) -> None:
    for index in range(4):
        sweep.finish(index, objective=0.5 + index / 10, epochs=2)
    base = f"/dashboard/data/sweeps/{sweep.sweep_id}"
    scatter = get_json(client, f"{base}/scatter?param=model.activation")
    assert scatter["figure"]["layout"]["xaxis"]["type"] == "category"
    assert get_json(client, f"{base}/scatter?param=nope")["param"] == "model.hidden_units"
    recent = get_json(client, f"{base}/parallel?mode=recent")["figure"]["layout"]["meta"]
    assert recent["mode"] == "recent" and [k[0] for k in recent["kept"]] == [3, 2, 1, 0]
    curves = get_json(client, f"{base}/curves?indexes=1,3,99")["traces"]
    assert [t["meta"]["index"] for t in curves] == [1, 3] and curves[0]["x"] == [1, 2]
    summary = get_json(client, f"{base}/summary")
    assert summary["best"]["index"] == 3 and summary["done"] == 4
    listing = get_json(client, "/dashboard/data/sweeps")
    assert [s["id"] for s in listing["sweeps"]] == [sweep.sweep_id]
    assert listing["sweeps"][0]["best"]["index"] == 3  # its table is in memory now
    updated = listing["sweeps"][0]["updated_at"]
    assert get_json(client, f"/dashboard/data/sweeps?since={updated}")["sweeps"] == []
    assert len(get_json(client, f"/dashboard/data/sweeps?since={updated - 1}")["sweeps"]) == 1
    redirect = client.get(f"/sweeps/{sweep.sweep_id}/trials/2")
    assert redirect.status_code == 302 and redirect.location.endswith(f"/trials/{sweep.ids[2]}")


def test_trial_data_and_its_new_epochs(client: FlaskClient, sweep: Sweep) -> None:
    trial_id = sweep.ids[0]
    assert sweep.store.lifecycle.claim(trial_id, {"name": "celery@w1"}, stale_after=60)
    report(sweep.store, trial_id, 1, 1, {"train_loss": 1.0, "val_accuracy": 0.3})
    base = f"/dashboard/data/trials/{trial_id}"
    full = get_json(client, base)
    assert full["trial"]["state"] == "running" and full["series"]["last"] == [1, 1]
    assert full["figures"]["loss"]["layout"]["xaxis"]["range"] == [0.5, 3.5]  # 3 epochs planned
    report(sweep.store, trial_id, 1, 2, {"train_loss": 0.5, "val_accuracy": 0.6})
    delta = get_json(client, f"{base}?attempt=1&epoch=1")
    assert delta["reset"] is False and delta["series"]["epochs"] == [2]
    assert delta["series"]["values"]["train_loss"] == [0.5]
    queued = get_json(client, f"/dashboard/data/trials/{sweep.ids[1]}?attempt=0&epoch=-1")
    assert queued["reset"] is False and queued["trial"]["state"] == "queued"
    assert get_json(client, f"{base}?attempt=0&epoch=-1")["reset"] is True


def test_workers_data_without_a_broker(client: FlaskClient, sweep: Sweep) -> None:
    sweep.finish(0, objective=0.5, worker="celery@w9")
    body = get_json(client, "/dashboard/data/workers")
    assert body["broker"] is False and body["error"] is None and body["flower_url"] is None
    assert [(w["name"], w["answered"], w["finished"]) for w in body["workers"]] == [
        ("celery@w9", None, 1)]  # no broker to ask: online only by what the store saw
    assert body["workers"][0]["last_seen"] == body["workers"][0]["last_activity"]


def test_dashboard_command_needs_a_store() -> None:
    result = CliRunner().invoke(dashboard, [], env={"SWEEPSTACK_MONGO_URL": ""})
    assert result.exit_code == 2 and "SWEEPSTACK_MONGO_URL is not set" in result.output
    argv = gunicorn_argv("127.0.0.1", 8050, 8)
    assert argv[2:4] == ["gunicorn", "cli.dashboard_wsgi:app"] and "gthread" in argv
    assert argv[argv.index("--workers") + 1] == "1"


def test_wsgi_app_under_gunicorn(sweep: Sweep, secantus_url: str, db_name: str) -> None:
    port = free_port()
    env = {**os.environ, "SWEEPSTACK_MONGO_URL": secantus_url, "SWEEPSTACK_MONGO_DB": db_name,
           "SWEEPSTACK_FLOWER_URL": "http://flower.example:5555"}
    env.pop("SWEEPSTACK_BROKER_URL", None)
    server = subprocess.Popen(gunicorn_argv("127.0.0.1", port, 2), env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_listening("127.0.0.1", port, 30, server)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/workers", timeout=10) as page:
            assert "http://flower.example:5555" in page.read().decode()
        url = f"http://127.0.0.1:{port}/dashboard/data/sweeps/{sweep.sweep_id}"
        with urllib.request.urlopen(url, timeout=30) as data:
            assert data.status == 200
    finally:
        server.terminate()
        server.wait(15)
