"""The pruned state, the best-so-far charts and the search settings on the dashboard's
pages and JSON, with Flask's test client on the real store: trials pruned through the
lifecycle (the finish log included), and seeded sweeps with search and pruning sections."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from core.states import TrialState
from core.store.store import Store
from dashboard import payloads
from tests.core import finish, report
from tests.dashboard.conftest import (
    Sweep,
    fresh_app,
    login,
    small_sweep_spec,
)
from tests.dashboard.seeding import seed_sweep

SECTIONS = {
    "search": {"algorithm": "tpe", "trials": 40, "parallelism": 4, "seed": 7,
               "multivariate": True},
    "pruning": {"algorithm": "asha", "min_resource": 1, "reduction_factor": 3},
}


@pytest.fixture
def app(sweep: Sweep, secantus_url: str, db_name: str, monkeypatch: pytest.MonkeyPatch) -> Flask:
    """The dashboard alone on the test's store; tables sync and recompute on every request."""
    monkeypatch.setattr(payloads, "PREPARED_SECONDS", 0)
    return fresh_app(sweep.store, secantus_url, db_name)


@pytest.fixture
def client(app: Flask) -> Iterator[FlaskClient]:
    with app.test_client() as client:
        yield login(client)


def get_json(client: FlaskClient, url: str) -> Any:
    response = client.get(url)
    assert response.status_code == 200, response.get_data(as_text=True)[:500]
    return response.get_json()


def prune(sweep: Sweep, index: int, epochs: int) -> None:
    """Run trial `index` for `epochs` epochs and finish it pruned, as the workers will."""
    trial_id = sweep.ids[index]
    claimed = sweep.store.lifecycle.claim(trial_id, {"host": "h", "pid": 7, "name": "celery@w1"},
                                stale_after=60)
    assert claimed is not None
    for epoch in range(1, epochs + 1):
        report(sweep.store, trial_id, claimed["attempt"], epoch,
                           {"val_accuracy": 0.1 * epoch, "val_loss": 1.0 / epoch})
    sweep.clock.advance(1)
    assert finish(sweep.store, trial_id, claimed["attempt"], TrialState.PRUNED,
                              extra={"pruned_epoch": epochs})


def test_pruned_trials_in_the_sweep_data_and_its_changes(
    client: FlaskClient, sweep: Sweep, secantus_url: str, db_name: str
) -> None:
    sweep.finish(0, objective=0.6, epochs=3)
    prune(sweep, 1, 1)
    sweep.finish(2, objective=0.8, epochs=3)
    base = f"/dashboard/data/sweeps/{sweep.sweep_id}"
    first = get_json(client, base)
    assert first["summary"]["counts"]["pruned"] == 1
    [pruned] = first["pruned"]
    assert (pruned["index"], pruned["pruned_epoch"], pruned["epochs"]) == (1, 1, 1)
    history = first["figures"]["history"]
    assert history["trials"]["data"][0]["x"] == [1, 3]
    assert history["epochs"]["data"][0]["x"] == [3, 7]  # 3 + the pruned trial's 1 + 3
    assert history["epochs"]["layout"]["meta"] == {"trials": 3, "epochs": 7, "planned_epochs": 9,
                                                   "pruned": 1, "planned": 9}
    curves = first["figures"]["curves"]["data"]
    assert [(t["meta"]["index"], t["meta"]["group"]) for t in curves] == [
        (2, "top"), (0, "top"), (1, "pruned")]
    assert curves[2]["line"]["dash"] == "dash" and curves[2]["meta"]["stop"] == 1
    assert first["sweep"]["settings_text"] == "Grid · 16 trials · no pruning"
    query = "&".join(f"{k}={v}" for k, v in first["versions"].items())

    sweep.clock.advance(5)
    prune(sweep, 3, 2)
    sweep.finish(4, TrialState.FAILED, error="NaN loss")
    changed = get_json(client, f"{base}/changes?since={first['since']}&{query}")
    assert [(r["index"], r["state"], r["pruned_epoch"]) for r in changed["rows"]] == [
        (3, "pruned", 2), (4, "failed", None)]
    assert [r["index"] for r in changed["pruned"]] == [3, 1]
    line = changed["history"]["trials"]["data"][0]
    assert line["x"] == [1, 3, 5] and line["y"] == [0.6, 0.8, 0.8]  # on to the last finish
    assert changed["history"]["epochs"]["data"][0]["x"][-1] == 9  # the failed one reported 0
    assert "top" not in changed  # no new complete trial
    curves = get_json(client, f"{base}/curves?indexes=3")["traces"]
    assert curves[0]["meta"] == {"index": 3, "group": "pruned", "stop": 2}

    # A process that starts now reads the sweep from its finish log: the same rows.
    with fresh_app(sweep.store, secantus_url, db_name).test_client() as other:
        again = get_json(login(other), base)
    assert again["figures"]["history"] == changed["history"]
    assert [(r["index"], r["epochs"]) for r in again["pruned"]] == [(3, 2), (1, 1)]


def test_a_pruned_trial_page_shows_where_it_stopped(client: FlaskClient, sweep: Sweep) -> None:
    prune(sweep, 5, 2)
    data = get_json(client, f"/dashboard/data/trials/{sweep.ids[5]}")
    assert data["trial"]["state"] == "pruned" and data["trial"]["pruned_epoch"] == 2
    assert data["trial"]["planned_epochs"] == 3 and data["series"]["epochs"] == [1, 2]
    assert data["figures"]["metrics"]["layout"]["shapes"][0]["x0"] == 2
    page = client.get(f"/trials/{sweep.ids[5]}").get_data(as_text=True)
    assert '"pruned_epoch": 2' in page or '"pruned_epoch":2' in page


def test_search_and_pruning_settings_in_the_header_and_the_spec_view(
    client: FlaskClient, store: Store
) -> None:
    seeded = seed_sweep(store, small_sweep_spec(), pruned=5, failed=1, sections=SECTIONS)
    page = client.get(f"/sweeps/{seeded.sweep_id}")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assert "TPE · 40 trials · parallelism 4 · pruner ASHA" in html
    for text in ("search.multivariate", "pruning.min_resource", "pruning.reduction_factor",
                 "pruned on</th><td>val_accuracy", 'id="spec"', 'id="fig-history-epochs"',
                 'id="pruned-table"'):
        assert text in html, text
    data = get_json(client, f"/dashboard/data/sweeps/{seeded.sweep_id}")
    assert data["sweep"]["search"]["options"] == {"multivariate": True}
    assert data["sweep"]["pruning"]["algorithm"] == "asha"
    assert len(data["pruned"]) == 5 == data["summary"]["counts"]["pruned"]
    assert all(1 <= r["pruned_epoch"] < 3 for r in data["pruned"])
    meta = data["figures"]["history"]["epochs"]["layout"]["meta"]
    assert meta["trials"] == 16 and meta["pruned"] == 5
    assert meta["epochs"] == 10 * 3 + sum(r["pruned_epoch"] for r in data["pruned"])
    listing = {s["id"]: s for s in get_json(client, "/dashboard/data/sweeps")["sweeps"]}
    assert listing[seeded.sweep_id]["settings_text"].startswith("TPE · 40 trials")
