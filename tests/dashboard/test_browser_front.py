"""The live Pareto front in a real Chromium (#31): a sweep of three objectives with a
constraint, its trials finishing while the page is open. The page draws the front (feasible
and infeasible trials apart, the front's trials marked, the pair's front as a step line) and
the hypervolume against trials finished, follows them as trials finish without a reload,
redraws for other objectives, filters the trials table to the front, and draws the same once
the sweep has ended; all under the Content-Security-Policy with no violation and no console
error. Another user gets 404 for the page and its front. Fixtures: `conftest.py`."""

from __future__ import annotations

import time
from typing import Any

from playwright.sync_api import Browser, BrowserContext, Page

from core.spec.sweep import load_spec
from core.states import TrialState
from core.store.store import Store
from tests.core import finish, make_sweep, trial_ids
from tests.dashboard.browser import WORKER, browser_login, figure, open_drawn, shoot, wait_until
from tests.dashboard.conftest import BOB_TOKEN, SPEC
from tests.dashboard.test_browser_csp import UNDRAWN, VIOLATIONS

MULTI: dict[str, Any] = {
    **{k: v for k, v in SPEC.items() if k != "objective"},
    "name": "live-front",
    "objectives": [{"metric": "val_accuracy", "direction": "maximize"},
                   {"metric": "param_count", "direction": "minimize"},
                   {"metric": "train_seconds", "direction": "minimize"}],
    "constraints": ["param_count <= 5000"],
}  # fmt: skip
#: (accuracy, parameters, seconds) of the 16 trials, in the order they finish: the first
#: four before the page opens (#3 infeasible), then one at a time; #6 beats #0 on all three.
RESULTS = [
    (0.90, 3000, 2.0), (0.80, 1000, 1.5), (0.70, 2000, 3.0), (0.99, 9000, 4.0),
    (0.85, 1500, 2.5), (0.60, 800, 1.0), (0.93, 2500, 1.8), (0.75, 4000, 2.2),
    (0.50, 600, 0.9), (0.95, 6000, 3.5), (0.88, 2900, 1.7), (0.65, 700, 1.2),
    (0.91, 4500, 2.9), (0.55, 4900, 4.0), (0.82, 1200, 1.4), (0.97, 4800, 3.1),
]  # fmt: skip


def _finish(store: Store, trial_id: str, accuracy: float, params: int, seconds: float) -> None:
    claimed = store.lifecycle.claim(trial_id, WORKER, stale_after=60)
    assert claimed is not None
    result = {"objective": accuracy, "values": {"val_accuracy": accuracy}}
    assert finish(store, trial_id, claimed["attempt"], TrialState.COMPLETE, result=result,
                  extra={"param_count": params, "train_seconds": seconds})  # fmt: skip


def _front(page: Page) -> dict[str, Any]:
    """What the front figure shows: the trials of each kind of trace (``front``,
    ``feasible``, in colour bands, ``infeasible``), and the figure's meta."""
    drawn = figure(page, "fig-front")
    traces: dict[str, list[int]] = {}
    for trace in drawn["data"]:
        traces.setdefault(trace["meta"], []).extend(trace.get("customdata", []))
    return {"traces": {k: sorted(v) for k, v in traces.items()}, "meta": drawn["layout"]["meta"]}


def _hypervolume_end(page: Page) -> int | None:
    xs = figure(page, "fig-hypervolume")["data"][0]["x"]
    return xs[-1] if xs else None


def _clean(page: Page, errors: list[str]) -> None:
    page.wait_for_timeout(300)
    assert page.evaluate("window.__violations") == []
    assert errors == []
    # Every figure drawn; the Analysis panel's load once it is in view, on their own time
    # (`test_browser_csp` waits for them).
    undrawn = page.evaluate(UNDRAWN)
    assert [f for f in undrawn if not f.startswith("analysis-")] == [], undrawn


def test_the_front_draws_live_and_after_the_sweep_ends(
    browser: Browser, context: BrowserContext, base_url: str, live_store: Store
) -> None:
    sweep_id, points = make_sweep(live_store, load_spec(MULTI), owner="alice")
    ids = trial_ids(sweep_id, points)
    for index in range(4):
        _finish(live_store, ids[index], *RESULTS[index])
    time.sleep(live_store._state.change_lag.total_seconds() + 0.5)
    context.add_init_script(VIOLATIONS)
    page, console = open_drawn(context, f"{base_url}/sweeps/{sweep_id}")
    page_id = page.evaluate("window.__dashboard.pageId")

    shown = _front(page)
    assert shown["traces"]["front"] == [0, 1]
    assert shown["traces"]["feasible"] == [2]
    assert shown["traces"]["infeasible"] == [3]
    assert shown["meta"]["colour"] == 2  # the third objective colours the points
    types = page.evaluate("document.getElementById('fig-front')._fullData.map((t) => t.type)")
    assert set(types[:-2]) == {"scattergl"} and types[-2:] == ["scatter", "scatter"]  # WebGL
    assert _hypervolume_end(page) == 4

    # Trials finish one by one: each shows up, and #6 pushes #0 off the front.
    for index in range(4, 8):
        _finish(live_store, ids[index], *RESULTS[index])
        wait_until(lambda i=index: _hypervolume_end(page) == i + 1, 15, f"trial {index} on the HV")
    wait_until(lambda: 0 not in _front(page)["traces"]["front"], 10, "#0 off the front")
    shown = _front(page)
    assert shown["traces"]["front"] == [1, 4, 5, 6]
    assert 0 in shown["traces"]["feasible"]
    hv = figure(page, "fig-hypervolume")
    assert hv["data"][1]["customdata"][-1] == 6  # the last rise is #6's
    assert page.evaluate("window.__dashboard.pageId") == page_id
    assert page.evaluate("performance.getEntriesByType('navigation').length") == 1
    shoot(page, "front-live")

    # Other objectives on the axes: the server draws that pair's front.
    page.select_option("#front-x", "train_seconds")
    page.select_option("#front-colour", "none")
    wait_until(lambda: _front(page)["meta"]["x"] == 2 and _front(page)["meta"]["colour"] is None,
               10, "the front of train_seconds and param_count")  # fmt: skip
    drawn = figure(page, "fig-front")
    assert drawn["layout"]["xaxis"]["title"]["text"] == "train_seconds ↓"

    # The trials table, filtered to the front.
    page.check("#filter-front")
    wait_until(lambda: "front=true" in (page.evaluate("window.__dashboard.tableQuery") or ""),
               10, "the filtered table")  # fmt: skip
    wait_until(lambda: page.locator("#trials-table tbody tr").count() == 4, 10, "4 rows")
    rows = page.locator("#trials-table tbody tr a").all_inner_texts()
    assert sorted(rows) == ["#1", "#4", "#5", "#6"]

    # The rest finish: the sweep ends, and the page draws its final front.
    for index in range(8, 16):
        _finish(live_store, ids[index], *RESULTS[index])
        time.sleep(0.3)
    wait_until(lambda: _hypervolume_end(page) == 16, 20, "the last trial on the HV")
    wait_until(lambda: "16 / 16" in page.locator("#summary").inner_text(), 10, "16 of 16 done")
    final = _front(page)["traces"]["front"]
    shoot(page, "front-ended")
    _clean(page, console.errors())
    page.close()

    # Opened after the end: the same front, drawn the same way.
    page, console = open_drawn(context, f"{base_url}/sweeps/{sweep_id}")
    assert _front(page)["traces"]["front"] == final
    assert 8 in final and 15 in final  # the cheapest and a late accurate one
    assert _hypervolume_end(page) == 16
    _clean(page, console.errors())
    page.close()

    # Another user: the page and its front are 404, as for a missing sweep.
    bob = browser.new_context()
    try:
        browser_login(bob, base_url, BOB_TOKEN).close()
        other = bob.new_page()
        response = other.goto(f"{base_url}/sweeps/{sweep_id}")
        assert response is not None and response.status == 404
        assert "live-front" not in other.content()
        status = other.evaluate(
            "(url) => fetch(url).then((r) => r.status)",
            f"{base_url}/dashboard/data/sweeps/{sweep_id}/front",
        )
        assert status == 404
    finally:
        bob.close()
