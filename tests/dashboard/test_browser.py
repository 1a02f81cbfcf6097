"""Every dashboard page in a real headless Chromium, against a live server and a real store.

The server is the dashboard app served by werkzeug in a thread; the store is the real
SecantusDB of the `secantus_url` fixture; trials change through the store's lifecycle
while pages are open. Screenshots go to ``test-output/screenshots/`` (kept by CI).
Pages updating live are in `test_browser_live`; the fixtures in `conftest`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext

from core.spec.sweep import load_spec
from core.states import TrialState
from core.store.store import Store
from dashboard.data import FIELDS, objective_by_width, trial_row
from dashboard.history import best_history
from dashboard.timing import POINTS_CAP, timing_rows
from scheduler.enqueue import sender_app
from tests.core import finish, make_sweep, report, trial_ids
from tests.dashboard.browser import (
    FLOWER,
    WORKER,
    browser_login,
    figure,
    live_server,
    open_drawn,
    shoot,
    trace_lengths,
    wait_until,
)
from tests.dashboard.conftest import (
    ALICE_TOKEN,
    BOB_TOKEN,
    dashboard_app,
    dashboard_settings,
    small_sweep_spec,
)
from tests.dashboard.seeding import Seeded
from tests.integration.stack import ROOT, Stack

#: The sweep page as the README shows it (copied to ``docs/sweep-page.png`` by hand).
SWEEP_PAGE_PNG = ROOT / "test-output" / "sweep-page.png"


def test_every_page_draws_without_console_errors(
    context: BrowserContext, base_url: str, mcleod: Seeded
) -> None:
    pages = {
        "sweeps": "/",
        "sweep-mcleod": f"/sweeps/{mcleod.sweep_id}",
        "trial-complete": f"/trials/{mcleod.ids('complete')[0]}",
        "trial-running": f"/trials/{mcleod.ids('running')[0]}",
        "trial-failed": f"/trials/{mcleod.ids('failed')[0]}",
        "workers-without-broker": "/workers",
    }
    for name, path in pages.items():
        page, console = open_drawn(context, base_url + path)
        page.wait_for_timeout(300)  # one more frame, and any late error
        shoot(page, name)
        assert console.errors() == [], f"{name}: {console.errors()}"
        assert page.locator("#flower-link").get_attribute("href") == FLOWER
        page.close()


#: Per tick label of the parallel coordinates: the pixels between its right end and its
#: axis line (plotly's own scale, `c2p`, and the text's drawn box).
_TICK_GAPS = """(id) => {
  const gd = document.getElementById(id);
  const xa = gd._fullLayout.xaxis;
  const left = gd.getBoundingClientRect().left + gd._fullLayout._size.l;
  const layer = gd.querySelectorAll(".scatterlayer .trace")[
    gd.data.findIndex((t) => t.name === "ticks")];
  return Array.from(layer.querySelectorAll(".textpoint text")).map((t) =>
    left + xa.c2p(t.parentNode.__data__.x) - t.getBoundingClientRect().right);
}"""
#: The stroke colour and opacity each band of the parallel coordinates is drawn in.
_BAND_STROKES = """(id) => {
  const gd = document.getElementById(id);
  const count = gd.layout.meta.bands.count;
  return Array.from(gd.querySelectorAll(".scatterlayer .trace")).slice(0, count)
    .map((g) => { const line = g.querySelector("path.js-line").style;
      return line.stroke + " " + line.strokeOpacity; });
}"""


def test_sweep_figures_hold_every_point(
    context: BrowserContext, base_url: str, mcleod: Seeded, live_store: Store
) -> None:
    rows = [trial_row(d) for d in live_store.reads.changed_rows(mcleod.sweep_id, None, FIELDS)[0]]
    complete = mcleod.count("complete")
    page, console = open_drawn(context, f"{base_url}/sweeps/{mcleod.sweep_id}")
    assert trace_lengths(page, "fig-scatter") == [complete]
    cells = objective_by_width(rows, "maximize")
    width = trace_lengths(page, "fig-width")
    assert len(width) == len({c["layers"] for c in cells}) and sum(width) == len(cells)
    parallel = figure(page, "fig-parallel")
    meta = parallel["layout"]["meta"]
    assert len(meta["kept"]) == complete and meta["total"] == complete
    lines = sum(len(t["x"]) for t in parallel["data"][: meta["bands"]["count"]])
    assert lines == complete * len(meta["dims"])  # a vertex per axis
    assert [d["label"] for d in meta["dims"]] == [
        "hidden_layers",
        "hidden_units",
        "activation",
        "val_accuracy",
    ]
    # Issue 18's charts. Parallel coordinates: quantile bands, the best trial's band drawn
    # last in Viridis' darkest colour, and every tick label clear of its axis line.
    bands = meta["bands"]
    assert bands["count"] == 8 and len(bands["edges"]) == 9
    best = max(mcleod.objectives, key=mcleod.objectives.__getitem__)
    assert best in parallel["data"][bands["count"] - 1]["customdata"]
    strokes = page.evaluate(_BAND_STROKES, "fig-parallel")
    assert strokes[-1] == "rgb(68, 1, 84) 0.9" and len(set(strokes)) == bands["count"]
    gaps = page.evaluate(_TICK_GAPS, "fig-parallel")
    assert gaps and min(gaps) >= 3, gaps
    outline = page.evaluate(
        "(() => { const s = getComputedStyle(document.querySelector("
        "'#fig-parallel .textpoint text'));"
        " return [s.stroke, s.paintOrder]; })()"
    )
    assert outline[0] == "rgb(255, 255, 255)" and outline[1].startswith("stroke"), outline
    # Best so far against trials finished, carried on to the last finished trial.
    history = best_history(rows, "maximize")
    by_trials = figure(page, "fig-history-trials")
    assert by_trials["layout"]["xaxis"]["title"]["text"] == "trials finished"
    assert by_trials["data"][0]["x"][-1] == history["trials"] == complete + mcleod.count("failed")
    assert by_trials["data"][1]["x"] == [s["trials"] for s in history["steps"]]
    assert by_trials["data"][0]["y"][-1] == max(mcleod.objectives.values())
    # Training time against depth and size: a point per complete trial, the fit in the legend.
    timing = timing_rows(rows)
    for element, points, unit in (
        ("fig-depth", timing["depth"], "per layer"),
        ("fig-size", timing["params"], "parameters"),
    ):
        drawn = figure(page, element)
        assert len(drawn["data"][0]["x"]) == min(complete, POINTS_CAP)
        assert drawn["layout"]["meta"]["n"] == len(points["x"]) == complete
        fit = drawn["layout"]["meta"]["fit"]
        assert fit["slope"] == pytest.approx(points["fit"]["slope"]) and fit["n"] == complete
        legend = page.locator(f"#{element} .legendtext").all_text_contents()
        assert any(unit in t and "R²" in t for t in legend), legend
    # The summary: no PRUNED card (no pruner, nothing pruned); throughput over active time.
    cards = page.locator("#summary").inner_text().lower()
    assert "pruned" not in cards and "running" in cards
    assert page.locator("#pruned-panel").is_hidden()
    assert "so far" in page.locator("#summary .card", has_text="throughput").inner_text()
    assert len(figure(page, "fig-curves")["data"]) == 10
    assert page.locator("#top-table tbody tr").count() == 20
    assert page.locator("#failed-table tbody tr").count() == mcleod.count("failed")
    assert page.locator("#reasons li").count() >= 1
    cap = page.locator("#parallel-cap").inner_text()
    assert f"all {complete} complete trials" in cap
    assert console.errors() == []
    SWEEP_PAGE_PNG.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SWEEP_PAGE_PNG), full_page=True)
    page.select_option("#history-axis", "time")
    page.wait_for_function(
        "() => document.getElementById('fig-history-trials').layout.xaxis"
        ".title.text.startsWith('time since the first trial started')"
    )
    assert figure(page, "fig-history-trials")["data"][0]["x"][-1] == pytest.approx(
        history["seconds"] / 60 if history["seconds"] > 120 else history["seconds"], rel=1e-3
    )
    page.select_option("#parallel-mode", "recent")
    page.wait_for_function(
        "() => document.getElementById('fig-parallel').layout.meta.mode === 'recent'"
    )
    page.select_option("#scatter-param", "model.activation")
    page.wait_for_function(
        "() => document.getElementById('fig-scatter').layout.meta.param === 'model.activation'"
    )
    assert trace_lengths(page, "fig-scatter") == [complete]
    assert console.errors() == []


@pytest.mark.integration
def test_workers_page_shows_an_online_celery_worker(
    context: BrowserContext, broker_url: str, secantus_url: str, db_name: str, tmp_path: Path
) -> None:
    stack = Stack(broker_url, secantus_url, db_name, tmp_path)
    try:
        worker = stack.start_worker()
        name = wait_until(lambda: _worker_name(worker.log_path.read_text()), 10, "its name")
        settings = dashboard_settings(
            secantus_url, db_name, broker_url=broker_url, queue=stack.queue, flower_url=FLOWER
        )
        app = dashboard_app(settings, stack.store, sender_app(settings))
        with live_server(app) as url:
            browser_login(context, url, ALICE_TOKEN).close()
            page, console = open_drawn(context, f"{url}/workers")
            row = page.locator(f'#workers-table tr[data-name="{name}"]')
            wait_until(lambda: row.count() == 1, 15, "the worker's row")
            assert "online" in row.inner_text() and "idle" in row.inner_text()
            # Other workers may share the broker (the page lists every one it reaches).
            note = page.locator("#workers-note").inner_text()
            assert re.search(r"\b[1-9]\d* online", note), note
            shoot(page, "workers")
            assert console.errors() == []
    finally:
        stack.close()


def _worker_name(log: str) -> str | None:
    """The worker's node name, from its ready line (``celery@host ready.``)."""
    for line in log.splitlines():
        if line.rstrip().endswith(" ready."):
            return line.split()[-2]
    return None


def test_a_data_parallel_sweep_shows_tau_and_the_communication_split(
    context: BrowserContext, base_url: str, live_store: Store
) -> None:
    """`execution.parallel.tau` is a parameter like any other on the sweep page, and a
    parallel trial's page splits each epoch into compute, communication and the rest."""
    spec = load_spec(
        {
            "name": "browser-parallel",
            "dataset": {"name": "digits"},
            "execution": {
                "parallel": {"world_size": 2, "strategy": "local_sgd", "tau": [1, 5, 20, 50]}
            },
            "objective": {"metric": "val_accuracy", "direction": "maximize"},
        }
    )
    sweep_id, points = make_sweep(live_store, spec, owner="alice")
    ids = trial_ids(sweep_id, points)
    for index, trial_id in enumerate(ids):
        assert live_store.lifecycle.claim(trial_id, WORKER, stale_after=60) is not None
        for epoch in (1, 2, 3):
            report(
                live_store,
                trial_id,
                1,
                epoch,
                {
                    "val_accuracy": 0.8 + index / 100,
                    "val_loss": 1 / epoch,
                    "epoch_seconds": 0.5,
                    "compute_seconds": 0.3,
                    "comm_seconds": 0.1 / (index + 1),
                    "comm_bytes": 1e6 / (index + 1),
                },
            )
        finish(
            live_store,
            trial_id,
            1,
            TrialState.COMPLETE,
            result={"objective": 0.8 + index / 100},
            extra={"train_seconds": 1.5, "device_info": {"world_size": 2, "backend": "gloo"}},
        )
    page, console = open_drawn(context, f"{base_url}/sweeps/{sweep_id}")
    labels = [d["label"] for d in figure(page, "fig-parallel")["layout"]["meta"]["dims"]]
    assert labels == ["parallel.tau", "val_accuracy"]
    page.select_option("#scatter-param", "execution.parallel.tau")
    page.wait_for_function(
        "() => document.getElementById('fig-scatter').layout.meta.param"
        " === 'execution.parallel.tau'"
    )
    assert trace_lengths(page, "fig-scatter") == [4]
    shoot(page, "sweep-parallel-tau")
    assert console.errors() == []
    page.close()
    page, console = open_drawn(context, f"{base_url}/trials/{ids[0]}")
    seconds = figure(page, "fig-seconds")
    assert [t["name"] for t in seconds["data"]] == [
        "compute",
        "communication",
        "evaluation and other",
    ]
    assert [t["name"] for t in figure(page, "fig-metrics")["data"]] == ["val_accuracy"]
    assert "parallel.tau" in page.locator("#config").inner_text()
    shoot(page, "trial-parallel")
    assert console.errors() == []


def test_logging_in_shows_only_my_sweeps_and_logging_out_ends_it(
    context: BrowserContext, live_store: Store, secantus_url: str, db_name: str
) -> None:
    mine, _ = make_sweep(live_store, small_sweep_spec(name="alices-sweep"), owner="alice")
    theirs, _ = make_sweep(live_store, small_sweep_spec(name="bobs-sweep"), owner="bob")
    settings = dashboard_settings(secantus_url, db_name)
    with live_server(dashboard_app(settings, live_store)) as url:
        page = context.new_page()
        page.goto(f"{url}/sweeps/{mine}")
        assert page.url.startswith(f"{url}/login?next=")  # anonymous: to the login form
        page.fill("#token", "not-a-token-" + "x" * 30)
        page.click("#login-submit")
        assert page.locator("#login-error").is_visible()
        page.fill("#token", ALICE_TOKEN)
        page.click("#login-submit")
        page.wait_for_url(f"{url}/sweeps/{mine}")  # where the login form was sent from
        page.goto(f"{url}/")
        page.wait_for_function("() => window.__dashboard && window.__dashboard.drawn")
        table = page.locator("#sweeps-table").inner_text()
        assert "alices-sweep" in table and "bobs-sweep" not in table
        assert page.locator("#who").inner_text() == "alice"
        cookie = next(c for c in context.cookies() if c["name"] == "sweepstack_session")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert page.goto(f"{url}/sweeps/{theirs}").status == 404
        shoot(page, "login-foreign-sweep-404")
        page.goto(f"{url}/")
        page.click("#logout")
        page.wait_for_url(f"{url}/login")
        page.goto(f"{url}/")
        assert page.url.startswith(f"{url}/login")
        page.fill("#token", BOB_TOKEN)
        page.click("#login-submit")
        page.wait_for_url(f"{url}/")
        table = page.locator("#sweeps-table").inner_text()
        assert "bobs-sweep" in table and "alices-sweep" not in table
        page.close()
