"""The fair share on the dashboard (#32): the Sweeps page's data gives each active sweep
its share of the workers now, its place in line and its priority (the owner's sweeps only,
an admin's all); the Workers page's rows say which sweep each worker runs."""

from __future__ import annotations

from flask.testing import FlaskClient
from playwright.sync_api import BrowserContext

from core.store.store import Store
from dashboard.workers import worker_rows
from tests.core import make_sweep
from tests.dashboard.browser import browser_login, live_server, open_drawn, shoot, wait_until
from tests.dashboard.conftest import (
    ROOT_TOKEN,
    Sweep,
    dashboard_app,
    dashboard_settings,
    login,
    small_sweep_spec,
)


def client_of(store: Store, secantus_url: str, db_name: str, token: str | None = None
              ) -> FlaskClient:  # fmt: skip
    client = dashboard_app(dashboard_settings(secantus_url, db_name), store).test_client()
    return login(client, token) if token else login(client)


def test_sweeps_data_shows_each_active_sweep_its_share_place_and_priority(
    sweep: Sweep, secantus_url: str, db_name: str
) -> None:
    store = sweep.store
    alice = client_of(store, secantus_url, db_name)
    before = alice.get("/dashboard/data/sweeps").json
    assert before["workers"] is None
    assert before["shares"][sweep.sweep_id]["share"] is None  # no scheduler counted them yet
    bobs, _ = make_sweep(store, small_sweep_spec(name="bobs"), owner="bob")
    store.shares.note_workers(4)
    mine = alice.get("/dashboard/data/sweeps").json
    assert mine["workers"] == 4 and set(mine["shares"]) == {sweep.sweep_id}
    row = mine["shares"][sweep.sweep_id]
    assert row["share"] == 2.0 and row["priority"] == "normal" and row["position"] in (1, 2)
    root = client_of(store, secantus_url, db_name, ROOT_TOKEN)
    everyone = root.get("/dashboard/data/sweeps").json["shares"]
    assert set(everyone) == {sweep.sweep_id, bobs}
    assert sorted(r["position"] for r in everyone.values()) == [1, 2]
    assert sum(r["share"] for r in everyone.values()) == 4.0
    # The page itself says so, and carries the shares for its script.
    page = alice.get("/").get_data(as_text=True)
    assert "Share now" in page and "In line" in page and '"shares"' in page


def test_each_worker_row_names_the_sweeps_it_runs() -> None:
    inspected = {
        "w1@h": {"trials": ["0123456789ab-p1", "0123456789ab-p2"], "pid": 1, "concurrency": 2},
        "w2@h": {"trials": [], "pid": 2, "concurrency": 1},
    }
    rows = {r["name"]: r for r in worker_rows(inspected, [], 1_000_000)}
    assert rows["w1@h"]["sweeps"] == ["0123456789ab"]
    assert rows["w2@h"]["sweeps"] == []


def test_chromium_draws_the_share_columns_and_follows_them(
    context: BrowserContext, sweep: Sweep, secantus_url: str, db_name: str
) -> None:
    store = sweep.store
    bobs, _ = make_sweep(store, small_sweep_spec(name="bobs"), owner="bob")
    store.shares.note_workers(4)
    app = dashboard_app(dashboard_settings(secantus_url, db_name), store)
    with live_server(app) as url:
        browser_login(context, url, ROOT_TOKEN).close()
        page, console = open_drawn(context, url + "/")
        mine = page.locator(f"#sweep-{sweep.sweep_id}")
        assert mine.locator("td.share").inner_text() == "2 of 4"
        assert mine.locator("td.position").inner_text() in ("#1", "#2")
        assert mine.locator(".priority-normal").inner_text() == "normal"
        assert page.locator("#workers-online").inner_text() == "Workers online: 4."
        # The share moves without the sweep's record moving: the next poll shows it.
        store.shares.set_user("alice", {"weight": 3})
        wait_until(lambda: mine.locator("td.share").inner_text() == "3 of 4", 10, "3 of 4")
        assert page.locator(f"#sweep-{bobs} td.share").inner_text() == "1 of 4"
        shoot(page, "sweeps-shares")
        assert console.errors() == []
