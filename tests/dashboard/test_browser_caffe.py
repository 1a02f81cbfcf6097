"""A Caffe sweep in a real headless Chromium: its net's and solver's fields as parallel axes,
and a trial page with the layer table and the prototxt texts. Trials are written through the
store's lifecycle, as a worker writes them (`tests.integration.test_caffe` trains real ones)."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import BrowserContext, expect

from core.spec.caffe.net import build_graph
from core.spec.sweep import load_spec
from core.states import TrialState
from core.store.store import Store
from tests.core import finish, make_sweep, report, trial_ids
from tests.dashboard.browser import WORKER, figure, open_drawn, shoot
from tests.integration.stack import ROOT

CONFIGS = Path(ROOT) / "configs"


def test_a_caffe_sweep_shows_its_fields_as_axes_and_its_layers(
    context: BrowserContext,
    base_url: str,
    live_store: Store,
) -> None:
    spec = load_spec(CONFIGS / "caffe-sweep.yaml")
    sweep_id, points = make_sweep(live_store, spec, owner="alice")
    ids = trial_ids(sweep_id, points)
    for index, (trial_id, point) in enumerate(zip(ids, points, strict=True)):
        net, _ = spec.messages(point.params)
        graph = build_graph(net, "TRAIN", (1, 28, 28), 10)
        assert live_store.lifecycle.claim(trial_id, WORKER, stale_after=60) is not None
        for epoch in (1, 2):
            metrics = {"iteration": 50 * epoch, "train_loss": 1 / epoch, "val_loss": 1 / epoch,
                       "val_accuracy": 0.9 + index / 100, "lr": 0.01}  # fmt: skip
            report(live_store, trial_id, 1, epoch, metrics)
        finish(
            live_store,
            trial_id, 1, TrialState.COMPLETE, result={"objective": 0.9 + index / 100},
            extra={"param_count": graph.param_count, "layer_table": graph.layer_table()},
        )  # fmt: skip
    page, console = open_drawn(context, f"{base_url}/sweeps/{sweep_id}")
    labels = [d["label"] for d in figure(page, "fig-parallel")["layout"]["meta"]["dims"]]
    assert labels == ["layers.ip1.num_output", "solver_params.base_lr", "val_accuracy"]
    # A Caffe net has no depth and width of the built-in network: no panels for them; its
    # rows are evaluations (every test_interval iterations), and the axes say so.
    expect(page.locator("#width-panel")).to_be_hidden()
    expect(page.locator("#depth-panel")).to_be_hidden()
    assert figure(page, "fig-curves")["layout"]["xaxis"]["title"]["text"] == "evaluation"
    history = figure(page, "fig-history-epochs")["layout"]
    assert history["xaxis"]["title"]["text"] == "evaluations trained"
    expect(page.locator("#fig-scatter")).to_be_visible()  # its own parameters, with the axes
    shoot(page, "sweep-caffe")
    assert console.errors() == []
    page.close()
    page, console = open_drawn(context, f"{base_url}/trials/{ids[0]}")
    expect(page.locator("#layers-panel")).to_be_visible()
    rows = page.locator("#layers tbody tr")
    expect(rows).to_have_count(9)  # LeNet's layers in the TRAIN phase
    header = page.locator("#layers thead").inner_text().split()
    assert header == ["name", "type", "bottoms", "tops", "output", "params"]
    conv = page.locator("#layers tbody tr").nth(1).locator("td").all_inner_texts()
    assert conv == ["conv1", "Convolution", "data", "conv1", "64x20x24x24", "520"]
    loss = page.locator("#layers tbody tr").nth(8).locator("td").all_inner_texts()
    assert loss[4] == "scalar"
    assert [t["name"] for t in figure(page, "fig-metrics")["data"]] == ["val_accuracy"]
    assert figure(page, "fig-metrics")["layout"]["title"]["text"] == "Metrics per evaluation"
    config = page.locator("#config")
    expect(config.locator("summary")).to_have_count(2)  # net_text, solver_text
    assert "resize" in config.inner_text()
    shoot(page, "trial-caffe")
    assert console.errors() == []
