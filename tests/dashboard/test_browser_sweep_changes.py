"""Pausing, resuming and extending a sweep from its page, in a real headless Chromium
against a live server and the real store: each through its confirmation, the page loaded
again with the sweep's history, and no console error or CSP violation."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from playwright.sync_api import BrowserContext, expect

from core.settings import Settings
from core.store.store import Store
from scheduler.enqueue import sender_app
from tests.api import remove_queue
from tests.dashboard.browser import browser_login, live_server, open_drawn
from tests.dashboard.conftest import (
    ALICE_TOKEN,
    dashboard_app,
    dashboard_settings,
    small_sweep_spec,
)
from tests.dashboard.seeding import seed_sweep


@pytest.fixture
def settings(secantus_url: str, db_name: str, broker_url: str) -> Iterator[Settings]:
    settings = dashboard_settings(
        secantus_url, db_name, broker_url=broker_url,
        queue=f"sweepstack.test.{uuid.uuid4().hex[:10]}",
    )  # fmt: skip
    yield settings
    remove_queue(settings)


def test_pause_resume_and_extend_from_the_sweep_page(
    context: BrowserContext, live_store: Store, settings: Settings
) -> None:
    spec = small_sweep_spec(search={"algorithm": "random", "trials": 8, "seed": 1})
    sweep_id = seed_sweep(live_store, spec, queued=4).sweep_id
    with live_server(dashboard_app(settings, live_store, sender_app(settings))) as url:
        browser_login(context, url, ALICE_TOKEN).close()
        page, console = open_drawn(context, f"{url}/sweeps/{sweep_id}")
        page.wait_for_function("() => window.__dashboard.table >= 1")
        expect(page.locator("#pause-sweep")).to_have_text("Pause sweep")
        page.click("#pause-sweep")
        assert "No new trial starts" in page.locator("#confirm-text").inner_text()
        page.click("#confirm-no")
        assert live_store.reads.get_sweep(sweep_id).get("paused_at") is None
        page.click("#pause-sweep")
        with page.expect_navigation():
            page.click("#confirm-yes")
        expect(page.locator("#paused-badge")).to_have_text("paused")
        expect(page.locator("#sweep-changes")).to_contain_text("pause · by alice")
        assert live_store.reads.get_sweep(sweep_id)["paused_at"] is not None
        page.wait_for_function("() => window.__dashboard.table >= 1")
        expect(page.locator("#pause-sweep")).to_have_text("Resume sweep")
        page.click("#pause-sweep")
        with page.expect_navigation():
            page.click("#confirm-yes")
        expect(page.locator("#paused-badge")).to_have_count(0)
        page.fill("#extend-trials", "12")
        page.click("#extend-sweep")
        assert "from 8 to 12" in page.locator("#confirm-text").inner_text()
        with page.expect_navigation():
            page.click("#confirm-yes")
        expect(page.locator("#sweep-changes")).to_contain_text("change: search.trials 8 -> 12")
        assert live_store.reads.get_sweep(sweep_id)["spec"]["search"]["trials"] == 12
        assert console.errors() == []
        page.close()
