"""A trial's kept model from the dashboard (#30 item 4): in a real headless Chromium, the
top-trials table of the sweep page links the models its sweep kept (and only those), the
trial page has the download, and both download the stored file, whole, for its owner.
Another owner gets the 404 of a trial that does not exist; a trial of the owner's with no
model a 404 that says why."""

from __future__ import annotations

from pathlib import Path

from flask import Flask
from playwright.sync_api import BrowserContext, Page

from core.store.store import Store
from tests.core import FakeClock, make_sweep, trial_ids
from tests.dashboard.browser import open_drawn, shoot
from tests.dashboard.conftest import (
    BOB_TOKEN,
    Sweep,
    dashboard_app,
    dashboard_settings,
    login,
    small_sweep_spec,
)
from tests.kept_models import keep_model


def _sweep(store: Store) -> tuple[Sweep, dict[int, bytes]]:
    """Alice's sweep: trials 0-2 complete, the models of 0 and 1 kept; the rest queued."""
    sweep_id, points = make_sweep(store, small_sweep_spec(), owner="alice")
    sweep = Sweep(store, FakeClock(), sweep_id, points, trial_ids(sweep_id, points))
    kept = {}
    for index, objective in ((0, 0.9), (1, 0.8), (2, 0.7)):
        sweep.finish(index, objective=objective, epochs=2)
        if index < 2:
            kept[index] = keep_model(store, store.reads.get_trial(sweep.ids[index]), objective)
    return sweep, kept


def _download(page: Page, selector: str) -> bytes:
    with page.expect_download() as info:
        page.click(selector)
    return Path(info.value.path()).read_bytes()


def test_the_owner_downloads_kept_models_from_the_pages(
    context: BrowserContext, live_store: Store, base_url: str
) -> None:
    sweep, kept = _sweep(live_store)
    page, console = open_drawn(context, f"{base_url}/sweeps/{sweep.sweep_id}")
    rows = "#top-table tbody tr"
    assert page.locator(rows).count() == 3
    links = {
        int(row.get_attribute("data-index") or -1): row.locator("a.download").count()
        for row in page.locator(rows).all()
    }
    assert links == {0: 1, 1: 1, 2: 0}
    shoot(page, "top-trials-models")
    first = f"{rows}[data-index='0'] a.download"
    assert page.get_attribute(first, "href") == f"/trials/{sweep.ids[0]}/model"
    assert _download(page, first) == kept[0]

    trial, _ = open_drawn(context, f"{base_url}/trials/{sweep.ids[1]}")
    link = trial.locator("#model-download")
    assert link.is_visible() and link.inner_text().startswith("download model (")
    shoot(trial, "trial-model-download")
    assert _download(trial, "#model-download") == kept[1]
    without, _ = open_drawn(context, f"{base_url}/trials/{sweep.ids[2]}")
    assert without.locator("#model-download").is_hidden()
    assert console.errors() == []


def test_another_owner_gets_404_and_a_trial_without_a_model_says_why(
    live_store: Store, secantus_url: str, db_name: str
) -> None:
    sweep, kept = _sweep(live_store)
    app: Flask = dashboard_app(dashboard_settings(secantus_url, db_name), live_store)
    bob = login(app.test_client(), BOB_TOKEN)
    theirs = bob.get(f"/trials/{sweep.ids[0]}/model")
    missing = bob.get(f"/trials/{sweep.ids[0]}x/model")
    assert theirs.status_code == missing.status_code == 404
    assert kept[0] not in theirs.get_data()
    assert theirs.get_data(as_text=True) == missing.get_data(as_text=True).replace(
        f"{sweep.ids[0]}x", sweep.ids[0]
    )
    anonymous = app.test_client().get(f"/trials/{sweep.ids[0]}/model")
    assert anonymous.status_code == 302 and anonymous.headers["Location"].startswith("/login")

    alice = login(app.test_client())
    assert alice.get(f"/trials/{sweep.ids[0]}/model").get_data() == kept[0]
    none = alice.get(f"/trials/{sweep.ids[2]}/model")
    assert none.status_code == 404
    assert "has no kept model: its worker stored none, though its sweep would keep it" in (
        none.get_data(as_text=True)
    )
    queued = alice.get(f"/trials/{sweep.ids[5]}/model")
    assert queued.status_code == 404 and "is queued" in queued.get_data(as_text=True)
