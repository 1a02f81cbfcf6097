"""The trials table's routes on the real store and broker (Flask's client): sorting,
filtering, paging, the 400s that name what is wrong, the comparison, the downloads (their
content), cancel and retry (the retried trials are on the queue), and another owner's 404
on every one of them. The browser side is `test_browser_trials`."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.datastructures import MultiDict

from core.errors import InvalidQuery
from core.settings import Settings
from core.store import export
from core.store.store import Store
from dashboard import payloads, trials
from dashboard.blueprint import STATE_KEY
from dashboard.payloads import DashboardState
from dashboard.table import Tables
from scheduler.enqueue import sender_app
from tests.api import enqueued_trials, remove_queue
from tests.core import FakeClock
from tests.dashboard.conftest import (
    ALICE_TOKEN,
    BOB_TOKEN,
    csrf_of,
    dashboard_app,
    dashboard_settings,
    login,
    small_sweep_spec,
)
from tests.dashboard.seeding import Seeded, seed_sweep

# -- the query, without a server ----------------------------------------------------------

COLUMNS = (*trials.FIXED_COLUMNS, "model.hidden_units", "model.activation")


def refused(args: dict[str, Any]) -> InvalidQuery:
    with pytest.raises(InvalidQuery) as caught:
        trials.parse_query(MultiDict(args), COLUMNS)
    return caught.value


def test_a_wrong_query_is_refused_naming_the_parameter_and_the_rule() -> None:
    wrong = refused({"sort": "val_loss"})
    assert wrong.field == "sort" and "unknown column 'val_loss'" in str(wrong)
    assert "model.hidden_units" in str(wrong)  # says which columns there are
    wrong = refused({"filter": "model.hidden_units:like:64"})
    assert wrong.field == "filter" and "unknown operator 'like'" in str(wrong)
    assert refused({"filter": "model.depth:eq:2"}).field == "filter"
    assert "needs a number" in str(refused({"filter": "objective:ge:high"}))
    assert "column:op:value" in str(refused({"filter": "objective"}))
    assert refused({"state": "complete,done"}).field == "state"
    assert refused({"size": "501"}).field == "size"
    assert refused({"page": "0"}).field == "page"
    assert refused({"order": "up"}).field == "order"
    assert refused({"limit": "5"}).field == "limit"
    assert "at most 20" in str(refused(MultiDict([("filter", "index:ge:0")] * 21)))


def test_rows_sort_with_missing_values_last_and_ties_by_index() -> None:
    rows = [
        {"index": 0, "state": "failed", "objective": None, "params": {"a.b": "x"}},
        {"index": 1, "state": "complete", "objective": 0.5, "params": {"a.b": 2}},
        {"index": 2, "state": "complete", "objective": 0.9, "params": {}},
        {"index": 3, "state": "queued", "objective": 0.5, "params": {"a.b": 1}},
    ]
    order = lambda column, desc: [r["index"] for r in trials.sorted_rows(rows, column, desc)]  # noqa: E731
    assert order("objective", True) == [2, 1, 3, 0]
    assert order("objective", False) == [1, 3, 2, 0]
    assert order("a.b", False) == [3, 1, 0, 2]  # numbers before text, as MongoDB orders
    assert order("state", False) == [3, 1, 2, 0]  # queued, complete, failed
    query = trials.parse_query(
        MultiDict([("filter", "a.b:ge:1"), ("filter", "a.b:lt:2")]), ("index", "objective", "a.b")
    )
    assert [r["index"] for r in rows if query.matches(r)] == [3]
    assert trials.same(True, True) and not trials.same(1, True) and trials.same(64, 64.0)
    assert trials.same([64, 32], [64, 32]) and not trials.same("64", 64)


# -- the routes, on the real store and broker ---------------------------------------------


@pytest.fixture
def settings(secantus_url: str, db_name: str, broker_url: str) -> Iterator[Settings]:
    settings = dashboard_settings(
        secantus_url,
        db_name,
        broker_url=broker_url,
        queue=f"sweepstack.test.{uuid.uuid4().hex[:10]}",
        api_timeout_seconds=2.0,
    )
    yield settings
    remove_queue(settings)


@pytest.fixture
def seeded(store: Store, clock: FakeClock) -> Seeded:
    """16 trials of the small spec: 10 complete, 3 failed, 3 queued."""
    return seed_sweep(store, small_sweep_spec(), failed=3, queued=3, now=clock.now)


@pytest.fixture
def app(settings: Settings, store: Store, seeded: Seeded, monkeypatch: pytest.MonkeyPatch) -> Flask:
    monkeypatch.setattr(payloads, "PREPARED_SECONDS", 0)
    monkeypatch.setattr(trials, "SNAPSHOT_SECONDS", 0)
    app = dashboard_app(settings, store, sender_app(settings))
    app.extensions[STATE_KEY] = DashboardState(Tables(min_interval=0))
    return app


@pytest.fixture
def client(app: Flask) -> Iterator[FlaskClient]:
    with app.test_client() as client:
        yield login(client, ALICE_TOKEN)


def table(client: FlaskClient, sweep_id: str, query: str = "") -> dict[str, Any]:
    answer = client.get(f"/dashboard/data/sweeps/{sweep_id}/table?{query}")
    assert answer.status_code == 200, answer.get_data(as_text=True)[:300]
    return answer.json


def test_the_table_sorts_filters_and_pages_every_trial(client: FlaskClient, seeded: Seeded) -> None:
    sid = seeded.sweep_id
    first = table(client, sid)
    assert (first["total"], first["all"], first["pages"]) == (16, 16, 1)
    assert [r["index"] for r in first["rows"]] == list(range(16))
    assert "model.hidden_units" in first["params"] and first["failed"] == 3
    assert first["rows"][0]["param_count"] > 0  # kept in the rows, so it sorts
    best = table(client, sid, "sort=objective&order=desc")["rows"]
    ranked = sorted(seeded.objectives, key=lambda i: (-seeded.objectives[i], i))
    assert [r["index"] for r in best[:10]] == ranked
    assert [r["objective"] for r in best[10:]] == [None] * 6  # no objective: last
    by_params = table(client, sid, "sort=param_count&order=desc&size=5&page=2")
    assert (by_params["page"], by_params["pages"], len(by_params["rows"])) == (2, 4, 5)
    counts = [r["param_count"] for r in table(client, sid, "sort=param_count&order=desc")["rows"]]
    known = [n for n in counts if n is not None]
    assert counts == sorted(known, reverse=True) + [None] * 3  # queued: not built yet
    assert table(client, sid, "size=5&page=99")["page"] == 4  # past the last: the last
    failed = table(client, sid, "state=failed,queued")
    assert failed["total"] == 6 and {r["state"] for r in failed["rows"]} == {"failed", "queued"}
    relu = table(client, sid, "filter=model.activation:eq:relu&filter=model.hidden_units:eq:64")
    assert relu["total"] == 4 and all(
        r["params"]["model.activation"] == "relu" and r["params"]["model.hidden_units"] == 64
        for r in relu["rows"]
    )
    low, high = sorted(seeded.objectives.values())[2], sorted(seeded.objectives.values())[7]
    ranged = table(client, sid, f"filter=objective:ge:{low}&filter=objective:le:{high}")
    assert ranged["total"] == 6 and all(low <= r["objective"] <= high for r in ranged["rows"])
    for query, parameter in [
        ("sort=val_loss", "sort"),
        ("filter=objective:near:1", "filter"),
        ("size=1000", "size"),
        ("cursor=x", "cursor"),
        # Nested deeper than Python's JSON reader goes: a RecursionError, once a 500.
        ("filter=objective:eq:" + "[" * 3000 + "]" * 3000, "filter"),
    ]:
        answer = client.get(f"/dashboard/data/sweeps/{sid}/table?{query}")
        assert answer.status_code == 400 and answer.json["details"]["parameter"] == parameter


def test_two_to_five_trials_compare_and_more_are_refused(
    client: FlaskClient, seeded: Seeded
) -> None:
    sid = seeded.sweep_id
    pair = sorted(seeded.objectives)[:2]
    answer = client.get(f"/dashboard/data/sweeps/{sid}/compare?indexes={pair[0]},{pair[1]}")
    assert answer.status_code == 200, answer.get_data(as_text=True)[:300]
    data = answer.json
    assert [t["index"] for t in data["trials"]] == pair
    assert data["trials"][0]["objective"] == pytest.approx(seeded.objectives[pair[0]])
    assert data["metric"] == "val_accuracy" and data["metrics"][0] == "val_accuracy"
    curves = data["figures"]["val_accuracy"]["data"]
    assert [t["name"] for t in curves] == [f"#{i}" for i in pair] and len(curves[0]["x"]) == 3
    differs = {p["path"] for p in data["params"] if p["differs"]}
    assert differs and data["params"][0]["differs"]  # differing parameters first
    for indexes, message in [
        ("0,1,2,3,4,5", "2 to 5 trials, got 6"),
        ("3", "got 1"),
        ("a,b", "comma-separated"),
    ]:
        refused = client.get(f"/dashboard/data/sweeps/{sid}/compare?indexes={indexes}")
        assert refused.status_code == 400 and message in refused.json["message"], indexes
    assert client.get(f"/dashboard/data/sweeps/{sid}/compare?indexes=1,99").status_code == 404


def test_downloads_hold_the_filtered_trials(
    client: FlaskClient, seeded: Seeded, store: Store
) -> None:
    sid = seeded.sweep_id
    answer = client.get(
        f"/dashboard/data/sweeps/{sid}/download?format=csv&state=complete"
        "&filter=model.activation:eq:tanh&sort=objective&page=2"
    )
    assert answer.status_code == 200 and answer.mimetype == "text/csv"
    assert "filtered.csv" in answer.headers["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(answer.get_data(as_text=True))))
    expected = [
        p.index
        for p in seeded.points
        if seeded.states[p.index] == "complete" and p.params["model.activation"] == "tanh"
    ]
    assert [int(r["index"]) for r in rows] == expected and expected
    assert {r["state"] for r in rows} == {"complete"}
    assert float(rows[0]["objective"]) == pytest.approx(seeded.objectives[expected[0]])
    assert rows[0]["val_accuracy"] and rows[0]["param_count"] and rows[0]["model.hidden_units"]
    every = client.get(f"/dashboard/data/sweeps/{sid}/download?format=csv")
    assert every.headers["Content-Disposition"].endswith(f'"sweep-{sid}.csv"')
    # What the API's export holds:
    api = "".join(export.csv_text(store.reads, store.reads.get_sweep(sid)))
    assert every.get_data(as_text=True) == api and api.count("\n") == 17
    whole = client.get(f"/dashboard/data/sweeps/{sid}/download?format=jsonl")
    assert whole.mimetype == "application/x-ndjson"
    lines = [json.loads(line) for line in whole.get_data(as_text=True).splitlines()]
    assert [line["index"] for line in lines] == list(range(16))
    assert sum(1 for line in lines if line["state"] == "failed" and line["error"]) == 3
    bad = client.get(f"/dashboard/data/sweeps/{sid}/download?format=xlsx")
    assert bad.status_code == 400 and bad.json["details"]["parameter"] == "format"


def test_cancel_and_retry_act_and_the_retried_trials_are_enqueued(
    client: FlaskClient, seeded: Seeded, settings: Settings, store: Store, clock: FakeClock
) -> None:
    sid = seeded.sweep_id
    csrf = {"X-CSRF-Token": csrf_of(client.get(f"/sweeps/{sid}").get_data(as_text=True))}
    table(client, sid)  # the table is in memory before the actions
    clock.advance(1)
    retried = client.post(f"/dashboard/data/sweeps/{sid}/retry", headers=csrf)
    assert retried.status_code == 200, retried.get_data(as_text=True)[:300]
    assert retried.json["retried"] == 3 and retried.json["counts"]["failed"] == 0
    assert sorted(enqueued_trials(settings)) == sorted(seeded.ids("failed"))
    assert table(client, sid, "state=failed")["total"] == 0
    clock.advance(1)
    cancelled = client.post(f"/dashboard/data/sweeps/{sid}/cancel", headers=csrf)
    assert cancelled.json["cancelled"] == 6 and cancelled.json["counts"]["queued"] == 0
    assert table(client, sid, "state=cancelled")["total"] == 6
    assert store.reads.get_sweep(sid)["cancelled_at"] is not None
    again = client.post(f"/dashboard/data/sweeps/{sid}/retry", headers=csrf)
    assert again.status_code == 409 and "cancelled" in again.json["message"]


def test_another_owner_gets_404_on_every_table_route(
    app: Flask, seeded: Seeded, store: Store
) -> None:
    sid = seeded.sweep_id
    gets = [
        f"/dashboard/data/sweeps/{sid}/table",
        f"/dashboard/data/sweeps/{sid}/compare?indexes=0,1",
        f"/dashboard/data/sweeps/{sid}/download?format=csv",
    ]
    posts = [f"/dashboard/data/sweeps/{sid}/cancel", f"/dashboard/data/sweeps/{sid}/retry"]
    with app.test_client() as anonymous:
        assert all(anonymous.get(url).status_code == 401 for url in gets)
    with app.test_client() as client:
        login(client, BOB_TOKEN)
        csrf = {"X-CSRF-Token": csrf_of(client.get("/").get_data(as_text=True))}
        for url in gets:
            answer = client.get(url)
            assert answer.status_code == 404 and "alice" not in answer.get_data(as_text=True)
        for url in posts:
            assert client.post(url, headers=csrf).status_code == 404, url
    bearer = {"Authorization": f"Bearer {BOB_TOKEN}"}
    with app.test_client() as client:
        assert all(client.get(url, headers=bearer).status_code == 404 for url in gets)
        assert all(client.post(url, headers=bearer).status_code == 404 for url in posts)
    sweep = store.reads.get_sweep(sid)
    assert sweep.get("cancelled_at") is None and sweep["counts"]["failed"] == 3


def test_retry_without_a_broker_says_so(
    secantus_url: str, db_name: str, store: Store, seeded: Seeded
) -> None:
    settings = dataclasses.replace(dashboard_settings(secantus_url, db_name), broker_url=None)
    with dashboard_app(settings, store).test_client() as client:
        login(client, ALICE_TOKEN)
        csrf = {"X-CSRF-Token": csrf_of(client.get("/").get_data(as_text=True))}
        answer = client.post(f"/dashboard/data/sweeps/{seeded.sweep_id}/retry", headers=csrf)
    assert answer.status_code == 503 and "SWEEPSTACK_BROKER_URL" in answer.json["message"]
    assert store.reads.get_sweep(seeded.sweep_id)["counts"]["failed"] == 3


def test_pause_resume_and_a_change_show_on_the_sweep_page(
    client: FlaskClient,
    seeded: Seeded,
    store: Store,
) -> None:
    """Pause, resume and a change (``…/pause``, ``…/resume``, ``…/change``): the button's
    state in the table's data, the badge and the history on the page (every dashboard POST
    is held to the login, the page's token and the owner by test_auth.py)."""
    sid = seeded.sweep_id
    page = client.get(f"/sweeps/{sid}").get_data(as_text=True)
    assert 'id="pause-sweep"' in page and ">Pause sweep<" in page
    assert 'id="extend-form"' not in page  # a grid grows by its values, not its trials
    csrf = {"X-CSRF-Token": csrf_of(page)}
    assert table(client, sid)["paused"] is False
    paused = client.post(f"/dashboard/data/sweeps/{sid}/pause", headers=csrf)
    assert paused.status_code == 200 and paused.json["changed"] is True
    assert table(client, sid)["paused"] is True
    page = client.get(f"/sweeps/{sid}").get_data(as_text=True)
    assert 'class="badge paused"' in page and ">Resume sweep<" in page
    assert client.post(f"/dashboard/data/sweeps/{sid}/resume", headers=csrf).json["changed"]
    change = {"add": {"model.hidden_units": [128]}}
    changed = client.post(f"/dashboard/data/sweeps/{sid}/change", json=change, headers=csrf)
    assert changed.status_code == 200, changed.json
    assert changed.json["summary"] == "model.hidden_units + [128]"
    refused = client.post(f"/dashboard/data/sweeps/{sid}/change", json={"trials": 40},
                          headers=csrf)  # fmt: skip
    assert refused.status_code == 422 and "grid" in refused.json["message"]
    page = client.get(f"/sweeps/{sid}").get_data(as_text=True)
    assert "History: 3 changes" in page
    assert "<b>change</b>: model.hidden_units + [128] · by alice" in page
    assert [c["kind"] for c in store.reads.get_sweep(sid)["changes"]] == [
        "pause", "resume", "change"
    ]  # fmt: skip
    # Without the page's token, nothing changes.
    assert client.post(f"/dashboard/data/sweeps/{sid}/pause").json["code"] == "csrf_failed"
    assert store.reads.get_sweep(sid).get("paused_at") is None
