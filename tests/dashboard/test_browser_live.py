"""The dashboard updating live in a real browser: a finished trial appears without a
reload, an empty sweep's first result draws every figure, parallel coordinates keep their
cap as better trials arrive, a running trial's page extends its curves, and the sweeps
page lists a new sweep while open. Fixtures: `tests/dashboard/conftest.py`."""

from __future__ import annotations

import time
from typing import Any

import pytest
from playwright.sync_api import BrowserContext, Response

from core.states import TrialState
from core.store.store import Store
from dashboard import param_axes
from tests.core import finish, make_sweep, report, trial_ids
from tests.dashboard.browser import (
    WORKER,
    figure,
    open_drawn,
    shoot,
    trace_lengths,
    wait_until,
)
from tests.dashboard.conftest import (
    small_sweep_spec,
)
from tests.dashboard.seeding import Seeded


def test_a_trial_that_finishes_shows_up_without_a_reload(
    context: BrowserContext, base_url: str, live_store: Store
) -> None:
    sweep_id, points = make_sweep(live_store, small_sweep_spec(), owner="alice")
    ids = trial_ids(sweep_id, points)

    def run(
        index: int, state: TrialState, objective: float | None = None, error: str | None = None
    ) -> None:
        claimed = live_store.lifecycle.claim(ids[index], WORKER, stale_after=60)
        assert claimed is not None
        for epoch in (1, 2, 3):
            report(
                live_store,
                ids[index],
                1,
                epoch,
                {"val_accuracy": (objective or 0) * epoch / 3, "val_loss": 1 / epoch},
            )
        result = {"objective": objective} if objective is not None else None
        assert finish(
            live_store,
            ids[index],
            1,
            state,
            result=result,
            error=error,
            extra={"train_seconds": 1.5},
        )

    for index in range(4):
        run(index, TrialState.COMPLETE, objective=0.5 + index / 100)
    # Changes younger than the store's change lag are sent again, in case a late write
    # lands behind them: let these age, so the polls below carry only the new ones.
    time.sleep(live_store._state.change_lag.total_seconds() + 0.5)
    page, console = open_drawn(context, f"{base_url}/sweeps/{sweep_id}")
    changes: list[int] = []

    def record(response: Response) -> None:
        if "/changes?" in response.url:
            changes.append(len(response.json()["rows"]))

    page.on("response", record)
    page_id = page.evaluate("window.__dashboard.pageId")
    assert trace_lengths(page, "fig-scatter") == [4]

    run(9, TrialState.COMPLETE, objective=0.99)
    run(10, TrialState.FAILED, error="training diverged: the loss is NaN at epoch 2")
    wait_until(lambda: trace_lengths(page, "fig-scatter") == [5], 15, "the new point")
    wait_until(lambda: page.locator("#failed-table tbody tr").count() == 1, 10, "the failure")
    wait_until(
        lambda: page.locator("#top-table tbody tr").first.get_attribute("data-index") == "9",
        10,
        "the new best in the top table",
    )
    wait_until(
        lambda: any(t["meta"]["index"] == 9 for t in figure(page, "fig-curves")["data"]),
        10,
        "the new best's learning curve",
    )
    wait_until(
        lambda: figure(page, "fig-history-trials")["data"][0]["x"][-1] == 6,
        10,
        "the best-so-far line to reach the 6th finish (5 complete, 1 failed)",
    )
    best = figure(page, "fig-history-trials")["data"][1]
    assert best["y"][-1] == 0.99 and best["customdata"][-1] == 9
    parallel = figure(page, "fig-parallel")["layout"]["meta"]
    assert parallel is not None
    assert "0.99" in page.locator("#summary").inner_text()
    # The same page, never reloaded; polls carried only the few trials that changed.
    assert page.evaluate("window.__dashboard.pageId") == page_id
    assert page.evaluate("performance.getEntriesByType('navigation').length") == 1
    assert changes and max(changes) <= 2
    shoot(page, "sweep-live-update")
    assert console.errors() == []


def test_the_first_result_of_an_empty_sweep_draws_every_figure(
    context: BrowserContext, base_url: str, live_store: Store
) -> None:
    sweep_id, points = make_sweep(live_store, small_sweep_spec(), owner="alice")
    trial_id = trial_ids(sweep_id, points)[5]
    page, console = open_drawn(context, f"{base_url}/sweeps/{sweep_id}")
    assert trace_lengths(page, "fig-scatter") == [0]
    claimed = live_store.lifecycle.claim(trial_id, WORKER, stale_after=60)
    assert claimed is not None
    report(live_store, trial_id, 1, 1, {"val_accuracy": 0.7})
    finish(
        live_store,
        trial_id,
        1,
        TrialState.COMPLETE,
        result={"objective": 0.7},
        extra={"train_seconds": 2.0},
    )
    wait_until(lambda: trace_lengths(page, "fig-scatter") == [1], 15, "the first point")
    wait_until(lambda: len(figure(page, "fig-curves")["data"]) == 1, 10, "its curve")
    wait_until(lambda: sum(trace_lengths(page, "fig-width")) == 1, 10, "the width figure")
    wait_until(lambda: trace_lengths(page, "fig-history-trials") == [1, 1], 10, "best so far")

    def parallel_lines() -> tuple[set[int], dict[str, Any]]:
        parallel = figure(page, "fig-parallel")
        bands = parallel["layout"]["meta"]["bands"]
        return {
            i for t in parallel["data"][: bands["count"]] for i in t["customdata"] if i is not None
        }, bands

    # Off the empty figure's objective axis: the page asks for the figure again.
    wait_until(lambda: parallel_lines()[1]["high"] == 0.7, 15, "the redrawn parallel axes")
    lines, bands = parallel_lines()
    assert lines == {5} and bands["low"] == bands["high"] == 0.7
    assert page.locator("#top-table tbody tr").count() == 1
    shoot(page, "sweep-first-result")
    assert console.errors() == []


def test_parallel_coordinates_keep_the_cap_as_better_trials_arrive(
    context: BrowserContext, base_url: str, live_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(param_axes, "PARALLEL_CAP", 3)
    sweep_id, points = make_sweep(live_store, small_sweep_spec(), owner="alice")
    ids = trial_ids(sweep_id, points)

    def complete(index: int, objective: float) -> None:
        assert live_store.lifecycle.claim(ids[index], WORKER, stale_after=60) is not None
        assert finish(
            live_store, ids[index], 1, TrialState.COMPLETE, result={"objective": objective}
        )

    for index, objective in enumerate((0.6, 0.7, 0.8, 0.5)):
        complete(index, objective)
    page, console = open_drawn(context, f"{base_url}/sweeps/{sweep_id}")

    def shown() -> set[int]:
        parallel = figure(page, "fig-parallel")
        count = parallel["layout"]["meta"]["bands"]["count"]
        return {i for t in parallel["data"][:count] for i in t["customdata"] if i is not None}

    assert shown() == {0, 1, 2}
    assert "best 3 of 4 complete trials (capped at 3)" in page.inner_text("#parallel-cap")
    complete(5, 0.9)  # better than all: in, and the worst shown (0.6) out
    complete(6, 0.55)  # worse than all shown: stays out
    wait_until(lambda: shown() == {1, 2, 5}, 15, "the new best in, the worst out")
    wait_until(lambda: "best 3 of 6" in page.inner_text("#parallel-cap"), 10, "the caption")
    # The objective axis widens to take the new best once the page has asked for the figure
    # again (a new objective off the axis): that answer may come after the lines moved.
    wait_until(
        lambda: figure(page, "fig-parallel")["layout"]["meta"]["bands"]["high"] == 0.9,
        15,
        "the objective axis widened",
    )
    parallel = figure(page, "fig-parallel")
    bands = parallel["layout"]["meta"]["bands"]
    assert shown() == {1, 2, 5}
    for trace in parallel["data"][: bands["count"]]:
        assert None not in trace["x"]  # still one unbroken path per band
    assert console.errors() == []


def test_a_running_trial_page_extends_its_curves(
    context: BrowserContext, base_url: str, live_store: Store
) -> None:
    sweep_id, points = make_sweep(live_store, small_sweep_spec(), owner="alice")
    trial_id = trial_ids(sweep_id, points)[0]
    assert live_store.lifecycle.claim(trial_id, WORKER, stale_after=60) is not None
    report(
        live_store,
        trial_id,
        1,
        1,
        {"train_loss": 1.0, "val_loss": 1.1, "val_accuracy": 0.4, "epoch_seconds": 0.2},
    )
    page, console = open_drawn(context, f"{base_url}/trials/{trial_id}")
    assert trace_lengths(page, "fig-loss") == [1, 1]
    for epoch in (2, 3):
        report(
            live_store,
            trial_id,
            1,
            epoch,
            {
                "train_loss": 1 / epoch,
                "val_loss": 1.1 / epoch,
                "val_accuracy": 0.4 + epoch / 10,
                "epoch_seconds": 0.2,
            },
        )
    wait_until(lambda: trace_lengths(page, "fig-loss") == [3, 3], 15, "epochs 2 and 3")
    assert trace_lengths(page, "fig-metrics") == [3]
    assert trace_lengths(page, "fig-seconds") == [3]
    finish(
        live_store,
        trial_id,
        1,
        TrialState.COMPLETE,
        result={"objective": 0.7},
        extra={"train_seconds": 0.6, "device": "cpu"},
    )
    wait_until(lambda: page.locator("#state").inner_text() == "complete", 15, "the finish")
    assert page.evaluate("performance.getEntriesByType('navigation').length") == 1
    assert console.errors() == []


def test_sweeps_page_lists_a_new_sweep_while_open(
    context: BrowserContext, base_url: str, live_store: Store, mcleod: Seeded
) -> None:
    page, console = open_drawn(context, f"{base_url}/")
    row = page.locator(f"#sweep-{mcleod.sweep_id}")
    assert "mcleod-digits" in row.inner_text()
    for state in ("queued", "running", "complete", "failed"):
        assert row.locator(f".progress .seg-{state}").count() == 1
    best = max(mcleod.objectives.values())
    wait_until(lambda: f"{best:.5g}" in row.locator(".best").inner_text(), 15, "the best")
    sweep_id, _ = make_sweep(live_store, small_sweep_spec(name="arrived-later"), owner="alice")
    wait_until(lambda: page.locator(f"#sweep-{sweep_id}").count() == 1, 15, "the new sweep")
    assert "arrived-later" in page.locator(f"#sweep-{sweep_id}").inner_text()
    assert console.errors() == []
