"""The trials table in a real headless Chromium, against a live server, the real store and
the real broker: paging, sorting, filtering, downloads of what the filters select, a
comparison (and the sixth trial refused), and the owner's retry and cancel through their
confirmations, the retried trials on the queue. One page does it all (one start)."""

from __future__ import annotations

import csv
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from core.settings import Settings
from core.store.store import Store
from scheduler.enqueue import sender_app
from tests.api import enqueued_trials, remove_queue
from tests.dashboard.browser import browser_login, figure, live_server, open_drawn, shoot
from tests.dashboard.conftest import ALICE_TOKEN, dashboard_app, dashboard_settings
from tests.dashboard.seeding import Seeded, mcleod_spec, seed_sweep
from tests.integration.stack import ROOT


@pytest.fixture
def settings(secantus_url: str, db_name: str, broker_url: str) -> Iterator[Settings]:
    settings = dashboard_settings(
        secantus_url,
        db_name,
        broker_url=broker_url,
        queue=f"sweepstack.test.{uuid.uuid4().hex[:10]}",
    )
    yield settings
    remove_queue(settings)


def indexes(page: Page) -> list[int]:
    return [
        int(i)
        for i in page.eval_on_selector_all(
            "#trials-table tbody tr[data-index]", "rows => rows.map((r) => r.dataset.index)"
        )
    ]


def column(page: Page, n: int) -> list[str]:
    """The text of the `n`-th cell (from 1: the checkbox) of every row shown."""
    return page.eval_on_selector_all(
        f"#trials-table tbody tr[data-index] td:nth-child({n})",
        "cells => cells.map((c) => c.textContent)",
    )


def redraws(page: Page, act: Callable[[], Any]) -> None:
    """Do `act`, which changes the table's query, and wait until the table is drawn for it
    (not merely drawn again: the page also reloads it every few seconds)."""
    before = page.evaluate("[window.__dashboard.table || 0, window.__dashboard.tableQuery]")
    act()
    page.wait_for_function(
        "([n, asked]) => (window.__dashboard.table || 0) > n"
        " && window.__dashboard.tableQuery !== asked",
        arg=before,
        timeout=20_000,
    )


def downloaded(page: Page, link: str) -> str:
    with page.expect_download() as info:
        page.click(link)
    return Path(info.value.path()).read_text()


def test_sort_filter_page_download_compare_retry_and_cancel_in_the_browser(
    context: BrowserContext,
    live_store: Store,
    settings: Settings,
) -> None:
    seeded: Seeded = seed_sweep(live_store, mcleod_spec(str(ROOT)), failed=8, queued=40)
    objectives = seeded.objectives
    activation = {p.index: p.params["model.activation"] for p in seeded.points}
    with live_server(dashboard_app(settings, live_store, sender_app(settings))) as url:
        browser_login(context, url, ALICE_TOKEN).close()
        page, console = open_drawn(context, f"{url}/sweeps/{seeded.sweep_id}")
        page.wait_for_function("() => window.__dashboard.table >= 1")
        assert indexes(page) == list(range(50))
        assert page.locator("#trials-count").inner_text() == "(360)"
        assert page.locator("#page-label").inner_text() == "page 1 of 8"
        link = page.locator("#trials-table tbody tr[data-index='3'] a").get_attribute("href")
        assert link == f"/trials/{seeded.sweep_id}-{seeded.points[3].id}"

        # paging
        redraws(page, lambda: page.select_option("#page-size", "25"))
        redraws(page, lambda: page.click("#page-next"))
        assert indexes(page) == list(range(25, 50))
        redraws(page, lambda: page.click("#page-last"))
        assert page.locator("#page-label").inner_text() == "page 15 of 15"
        assert indexes(page) == list(range(350, 360))

        # sorting: by the objective (best first, as it is maximised), then the other way
        redraws(page, lambda: page.click("#trials-table th[data-column=objective]"))
        assert page.locator("#page-label").inner_text() == "page 1 of 15"
        ranked = sorted(objectives, key=lambda i: (-objectives[i], i))
        assert indexes(page) == ranked[:25]
        redraws(page, lambda: page.click("#trials-table th[data-column=objective]"))
        assert indexes(page) == sorted(objectives, key=lambda i: (objectives[i], i))[:25]

        # filtering: a state, then a parameter and an objective range
        redraws(page, lambda: page.check("#trials-filters input[value=failed]"))
        assert sorted(indexes(page)) == sorted(i for i, s in seeded.states.items() if s == "failed")
        assert set(column(page, 3)) == {"failed"}
        redraws(page, lambda: page.uncheck("#trials-filters input[value=failed]"))
        page.select_option("#filter-param", "model.activation")
        page.select_option("#filter-op", "eq")
        page.fill("#filter-value", "relu")
        redraws(page, lambda: page.click("#filter-add"))
        assert page.locator("#trials-count").inner_text() == "(120 of 360 match)"
        page.fill("#objective-min", "0.9")
        redraws(page, lambda: page.dispatch_event("#objective-min", "change"))
        chosen = sorted(i for i, v in objectives.items() if v >= 0.9 and activation[i] == "relu")
        assert page.locator("#trials-count").inner_text() == f"({len(chosen)} of 360 match)"
        assert all(activation[i] == "relu" and objectives[i] >= 0.9 for i in indexes(page))

        # downloads: what the filters select, whole
        rows = list(csv.DictReader(downloaded(page, "#download-csv").splitlines()))
        assert [int(r["index"]) for r in rows] == chosen
        assert {r["model.activation"] for r in rows} == {"relu"}
        lines = [json.loads(x) for x in downloaded(page, "#download-jsonl").splitlines()]
        assert [x["index"] for x in lines] == chosen and lines[0]["params"]

        # comparison: the two best; a sixth trial is refused
        redraws(page, lambda: page.click("#filters-clear"))
        redraws(page, lambda: page.click("#trials-table th[data-column=objective]"))
        boxes = page.locator("#trials-table tbody .pick-box")
        boxes.nth(0).check()
        boxes.nth(1).check()
        page.click("#compare-open")
        page.wait_for_function("() => window.__dashboard.compared === 1")
        assert page.locator("#compare-dialog").is_visible()
        curves = figure(page, "fig-compare")["data"]
        assert [t["name"] for t in curves] == [f"#{ranked[0]}", f"#{ranked[1]}"]
        assert page.locator("#compare-params tbody tr.differs").count() >= 1
        assert "val_accuracy" in page.locator("#compare-results").inner_text()
        shoot(page, "trials-compare")
        page.click("#compare-close")
        for n in range(2, 5):
            boxes.nth(n).check()
        boxes.nth(5).click()  # a sixth: unticked again, with a message
        assert "at most 5" in page.locator("#compare-note").inner_text()
        assert not boxes.nth(5).is_checked()
        assert page.locator("#compare-count").inner_text().startswith("5 selected")

        # the owner's actions, each after its confirmation
        page.click("#retry-failed")
        assert "8 failed trials" in page.locator("#confirm-text").inner_text()
        page.click("#confirm-yes")
        expect(page.locator("#trials-note")).to_have_text("Queued again: 8 failed trials.")
        assert sorted(enqueued_trials(settings)) == sorted(seeded.ids("failed"))
        assert live_store.reads.get_sweep(seeded.sweep_id)["counts"]["failed"] == 0
        page.click("#cancel-sweep")
        page.click("#confirm-no")
        assert live_store.reads.get_sweep(seeded.sweep_id).get("cancelled_at") is None
        page.click("#cancel-sweep")
        page.click("#confirm-yes")
        expect(page.locator("#trials-note")).to_contain_text(
            "Sweep cancelled: 48 queued trials cancelled"
        )
        assert live_store.reads.get_sweep(seeded.sweep_id)["cancelled_at"] is not None
        expect(page.locator("#cancel-sweep")).to_be_disabled()
        shoot(page, "trials-table")
        assert console.errors() == []
        page.close()
