"""A sweep whose trials all failed, in a real headless Chromium against a live server and
the real store (the fixtures of `test_browser`): the first screen says so and why, above
the empty charts, and stops saying it once a trial completes."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import BrowserContext

from core.states import TrialState
from core.store.store import Store
from scheduler.expand import expand
from tests.core import finish, run
from tests.dashboard.browser import open_drawn, wait_until
from tests.dashboard.conftest import small_sweep_spec
from tests.dashboard.seeding import seed_sweep


def test_the_first_screen_shows_why_every_trial_failed_until_one_completes(
    context: BrowserContext, base_url: str, live_store: Store, tmp_path: Path
) -> None:
    spec = small_sweep_spec()
    total = len(expand(spec))
    seeded = seed_sweep(live_store, spec, failed=total - 2, queued=2, seed=3)
    page, console = open_drawn(context, f"{base_url}/sweeps/{seeded.sweep_id}")
    banner = page.locator("#failures-first")
    assert banner.is_visible()
    text = banner.inner_text()
    assert f"No trial has completed; {total - 2} failed" in text
    items = page.locator("#failures-first-reasons li")
    assert 1 <= items.count() <= 8
    # The same grouping as the failed-trials card further down, most frequent first.
    assert items.all_inner_texts() == page.locator("#reasons li").all_inner_texts()
    box = banner.bounding_box()
    chart = page.locator("#fig-history-trials").bounding_box()
    assert box is not None and chart is not None and box["y"] < chart["y"]
    assert box["y"] < 900, "the failures are on the first screen"
    page.screenshot(path=str(tmp_path / "all-failed.png"), full_page=False)
    assert console.errors() == []

    queued = seeded.ids("queued")[0]
    attempt = run(live_store, queued)["attempt"]
    assert finish(live_store, queued, attempt, TrialState.COMPLETE, result={"objective": 0.5})
    wait_until(lambda: banner.is_hidden(), 20, "the banner to go once a trial completed")
    assert console.errors() == []
