"""What a sweep found, on every surface at once: the sweep page's Analysis panel in a real
headless Chromium, ``GET /api/v1/sweeps/{id}/analysis`` and ``sweepstack report`` agree on
one seeded McLeod sweep in the real store, and the HTML report opens with no network and
draws every figure (screenshot: ``test-output/report.png``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from playwright.sync_api import Browser

from cli.app import create_app
from cli.main import main
from core.analysis.figures import figures
from core.store.store import Store
from dashboard import analysis as analysis_data
from scheduler.enqueue import sender_app
from tests.core import finish
from tests.dashboard.browser import (
    VIEWPORT,
    browser_login,
    live_server,
    open_drawn,
)
from tests.dashboard.conftest import (
    ALICE_TOKEN,
    dashboard_app,
    dashboard_settings,
    login,
    small_sweep_spec,
)
from tests.dashboard.seeding import mcleod_spec, seed_sweep
from tests.integration.stack import ROOT

OUTPUT = ROOT / "test-output"
GROUPS = ("returns", "laws", "importance", "front")


def test_panel_cli_and_api_agree_and_the_report_opens_offline(
    browser: Browser,
    live_store: Store,
    secantus_url: str,
    db_name: str,
    broker_url: str,
    tmp_path: Path,
) -> None:
    seeded = seed_sweep(live_store, mcleod_spec(str(ROOT)), failed=8)
    sweep_id = seeded.sweep_id
    settings = dashboard_settings(secantus_url, db_name, broker_url=broker_url)
    app = create_app(settings, store=live_store, sender=sender_app(settings))

    bearer = {"Authorization": f"Bearer {ALICE_TOKEN}"}
    api = app.test_client().get(f"/api/v1/sweeps/{sweep_id}/analysis", headers=bearer).json
    env = {"SWEEPSTACK_MONGO_URL": secantus_url, "SWEEPSTACK_MONGO_DB": db_name}
    runner = CliRunner()
    as_json = runner.invoke(main, ["report", sweep_id, "--format", "json"], env=env)
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout) == api
    as_md = runner.invoke(main, ["report", sweep_id], env=env)
    assert as_md.exit_code == 0 and as_md.stdout.startswith("# What sweep mcleod-digits found")
    assert all(f"- {text}" in as_md.stdout for text in api["findings"])
    report = tmp_path / "report.html"
    as_html = runner.invoke(main, ["report", sweep_id, "-o", str(report)], env=env)
    assert as_html.exit_code == 0 and "wrote the html report" in as_html.stderr

    # The seed paper's findings, from results shaped like it (tests.dashboard.seeding).
    findings = api["findings"]
    assert any(
        re.match(r"val_accuracy plateaus at hidden_units ≥ (256|512): ", f) for f in findings
    )
    depth = next(f for f in findings if f.startswith("train time grows linearly with hidden_l"))
    assert re.fullmatch(r"train time grows linearly with hidden_layers: 1\.0\d s per layer, "
                        r"R² (0\.9\d|1\.00)", depth), depth  # fmt: skip
    assert any(f.startswith("the smallest network within 0.5 pp of the best") for f in findings)
    assert api["importance"]["available"]
    assert min(api["importance"]["fanova"], key=api["importance"]["fanova"].get) == "training.seed"

    with live_server(app) as base_url:
        context = browser.new_context(viewport=VIEWPORT)
        browser_login(context, base_url, ALICE_TOKEN).close()
        page, console = open_drawn(context, f"{base_url}/sweeps/{sweep_id}")
        page.locator("#analysis-panel").scroll_into_view_if_needed()
        page.wait_for_function("() => window.__analysis && window.__analysis.drawn", timeout=60_000)
        panel = page.evaluate("window.__analysis")
        assert panel["version"] == api["version"] and panel["findings"] == findings
        assert page.locator("#analysis-findings li").all_inner_texts() == findings
        assert panel["figures"] == [f["id"] for f in figures(api)]
        for group in GROUPS:
            traces = page.evaluate("(id) => document.getElementById(id).data.length",
                                   f"analysis-fig-{group}")  # fmt: skip
            assert traces >= 2, group
        page.select_option("#analysis-returns", "returns-model.hidden_layers")
        page.wait_for_function(
            "() => document.getElementById('analysis-fig-returns').layout.title.text"
            ".startsWith('val_accuracy against hidden_layers')"
        )
        (OUTPUT / "screenshots").mkdir(parents=True, exist_ok=True)
        page.locator("#analysis-panel").screenshot(
            path=str(OUTPUT / "screenshots" / "analysis.png")
        )
        assert console.errors() == []
        context.close()

    offline = browser.new_context(viewport=VIEWPORT, offline=True)
    page = offline.new_page()
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    page.goto(report.as_uri())
    page.wait_for_function("() => window.__report && window.__report.drawn", timeout=60_000)
    count = page.evaluate("window.__report.figures")
    assert count == len(figures(api)) == page.locator(".fig.js-plotly-plot").count()
    assert page.locator(".fig .main-svg").count() >= count
    assert page.locator(".findings li").all_inner_texts() == findings
    assert [url for url in asked if not url.startswith(("file:", "data:"))] == []
    page.screenshot(path=str(OUTPUT / "report.png"), full_page=True)
    offline.close()


def test_the_panel_data_follows_a_running_sweep(
    live_store: Store, secantus_url: str, db_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page that has a version gets ``unchanged`` until a trial finishes, then the new
    analysis (here without the panel's 10 s reuse of a live sweep's analysis)."""
    monkeypatch.setattr(analysis_data, "PANEL_MAX_AGE", 0.0)
    seeded = seed_sweep(live_store, small_sweep_spec(), owner="alice", running=2, queued=2)
    client = login(dashboard_app(dashboard_settings(secantus_url, db_name), live_store)
                   .test_client())  # fmt: skip
    url = f"/dashboard/data/sweeps/{seeded.sweep_id}/analysis"
    first = client.get(url).json
    assert first["analysis"]["sweep"]["live"] and first["analysis"]["sweep"]["analysed"] == 12
    # two values per parameter: no curve to judge (3 at least), importance and fronts
    assert {f["group"] for f in first["figures"]} == {"laws", "importance", "front"}
    assert client.get(f"{url}?version={first['version']}").json == {
        "version": first["version"], "unchanged": True,
    }  # fmt: skip
    running = seeded.ids("running")[0]
    assert finish(live_store, running, 1, "complete", result={"objective": 0.9},
                             extra={"train_seconds": 2.0})  # fmt: skip
    later = client.get(f"{url}?version={first['version']}").json
    assert later["version"] != first["version"]
    assert later["analysis"]["sweep"]["analysed"] == 13
