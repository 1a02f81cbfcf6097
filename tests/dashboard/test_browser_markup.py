"""A parameter value that is HTML, in a real headless Chromium: every chart draws it as
text. Plotly reads a little HTML in what it draws (``<a href>`` becomes a live link), so the
server sends user values as entities (`core.analysis.layout.plotly_text`)."""

from __future__ import annotations

from playwright.sync_api import BrowserContext

from core.spec.sweep import load_spec
from core.states import TrialState
from core.store.store import Store
from tests.core import finish, make_sweep, report, trial_ids
from tests.dashboard.browser import WORKER, figure, open_drawn

LINK = '<a href="https://attacker.example/">click</a>'


def test_a_parameter_value_of_html_is_drawn_as_text_on_every_chart(
    context: BrowserContext, base_url: str, live_store: Store
) -> None:
    spec = load_spec({"name": "markup", "dataset": {"path": [f"{LINK}.npz", "plain.npz"]},
                      "model": {"hidden_units": [8, 16]},
                      "objective": {"metric": "val_accuracy", "direction": "max"}})  # fmt: skip
    sweep_id, points = make_sweep(live_store, spec, owner="alice")
    for n, trial_id in enumerate(trial_ids(sweep_id, points)):
        assert live_store.lifecycle.claim(trial_id, WORKER, stale_after=60) is not None
        report(live_store, trial_id, 1, 1, {"val_accuracy": 0.5 + n / 10})
        finish(live_store, trial_id, 1, TrialState.COMPLETE, result={"objective": 0.5 + n / 10})
    page, console = open_drawn(context, f"{base_url}/sweeps/{sweep_id}")
    page.select_option("#scatter-param", "dataset.path")
    page.wait_for_function(
        "() => document.getElementById('fig-scatter').layout.meta.param === 'dataset.path'"
    )
    for element_id in ("fig-parallel", "fig-scatter"):
        fig = page.locator(f"#{element_id}")
        assert fig.locator("svg a").count() == 0, element_id  # no live link anywhere
        assert "click</a>" in fig.inner_text() or LINK in fig.inner_text(), element_id
    labels = figure(page, "fig-scatter")["layout"]["xaxis"]["ticktext"]
    assert f"{LINK.replace('<', '&lt;').replace('>', '&gt;')}.npz" in labels
    assert console.errors() == []
