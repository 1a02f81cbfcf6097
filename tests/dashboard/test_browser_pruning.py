"""The pruned state and the best-so-far charts in a real headless Chromium, against a live
server and the real store (the fixtures of `test_browser`): a seeded pruning sweep drawn,
a trial pruned while the page is open, and a pruned trial's page. Screenshots go to the
test's tmp dir."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import BrowserContext, Page

from core.states import TrialState
from core.store.store import Store
from tests.core import finish
from tests.dashboard.browser import figure, open_drawn, wait_until
from tests.dashboard.seeding import Seeded, mcleod_spec, seed_sweep
from tests.integration.stack import ROOT

SECTIONS = {
    "search": {"algorithm": "tpe", "trials": 40, "parallelism": 4, "seed": 7},
    "pruning": {"algorithm": "asha", "min_resource": 1, "reduction_factor": 3},
}


def shoot(page: Page, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def history_end(page: Page, element_id: str) -> float:
    return figure(page, element_id)["data"][0]["x"][-1]


def test_pruned_curves_and_the_history_charts_draw_and_follow_a_prune(
    context: BrowserContext, base_url: str, live_store: Store, tmp_path: Path
) -> None:
    seeded: Seeded = seed_sweep(
        live_store,
        mcleod_spec(str(ROOT)),
        failed=4,
        pruned=60,
        running=3,
        queued=20,
        sections=SECTIONS,
    )
    finished = 360 - 23
    page, console = open_drawn(context, f"{base_url}/sweeps/{seeded.sweep_id}")
    assert (
        "TPE · 40 trials · parallelism 4 · pruner ASHA" in page.locator("#search-line").inner_text()
    )
    by_trials = figure(page, "fig-history-trials")
    by_epochs = figure(page, "fig-history-epochs")
    assert by_trials["data"][0]["x"][-1] == finished
    meta = by_epochs["layout"]["meta"]
    assert by_epochs["data"][0]["x"][-1] == meta["epochs"] < meta["planned"]
    assert by_trials["data"][0]["y"][-1] == max(seeded.objectives.values())
    curves = figure(page, "fig-curves")["data"]
    pruned = [t for t in curves if t["meta"]["group"] == "pruned"]
    assert len(pruned) == 10 and all(t["line"]["dash"] == "dash" for t in pruned)
    assert all(t["x"][-1] == t["meta"]["stop"] for t in pruned)
    assert page.locator("#pruned-table tbody tr").count() == 50
    summary = page.locator("#summary").inner_text()
    assert "60" in summary and "epochs saved" in summary
    assert console.errors() == []
    shot = shoot(page, tmp_path, "sweep-pruning")
    assert shot.stat().st_size > 50_000

    running = seeded.ids("running")[0]  # it reported 3 epochs (`seeding.build_sweep`)
    assert finish(live_store, running, 1, TrialState.PRUNED, extra={"pruned_epoch": 3})
    wait_until(
        lambda: history_end(page, "fig-history-trials") == finished + 1,
        20,
        "the history line to reach the new finish",
    )
    assert history_end(page, "fig-history-epochs") == meta["epochs"] + 3
    wait_until(
        lambda: (
            page.locator("#pruned-table tbody tr").first.get_attribute("data-index")
            == str(seeded.points[337].index)
        ),
        10,
        "the new pruned trial first",
    )
    wait_until(
        lambda: any(
            t["meta"]["group"] == "pruned" and t["meta"]["stop"] == 3 and t["x"] == [1, 2, 3]
            for t in figure(page, "fig-curves")["data"]
        ),
        10,
        "its dashed curve",
    )
    assert "61" in page.locator("#summary").inner_text()
    shoot(page, tmp_path, "sweep-pruning-live")
    assert console.errors() == []

    trial, console = open_drawn(context, f"{base_url}/trials/{running}")
    assert trial.locator("#state").inner_text() == "pruned"
    assert "stopped at epoch" in trial.locator("#cards").inner_text().lower()
    assert figure(trial, "fig-metrics")["layout"]["shapes"][0]["x0"] == 3
    shoot(trial, tmp_path, "trial-pruned")
    assert console.errors() == []
