"""Trial pages (filters, sorts, cursors), one trial's record, and query parameters that try
to be MongoDB operators."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient

from core.states import TrialState
from core.store.store import Store
from tests.api import ALICE, BOB, small_spec, submit
from tests.core import WORKER, finish, report

WIDE = small_spec(
    model={"hidden_units": [8, 16, 32, 64], "activation": ["relu", "tanh", "sigmoid"]}
)  # 12 trials


def end_trial(store: Store, trial_id: str, objective: float, state: str = "complete") -> None:
    attempt = store.lifecycle.claim(trial_id, WORKER, stale_after=60)["attempt"]
    report(store, trial_id, attempt, 1, {"val_accuracy": objective, "val_loss": 1 - objective})
    result = {"objective": objective, "final": {"val_accuracy": objective}, "epochs": 1}
    finish(store, trial_id, attempt, TrialState(state), result=result)


def pages(client: FlaskClient, path: str) -> list[dict[str, Any]]:
    """Every item of a paged list, following the next links."""
    items: list[dict[str, Any]] = []
    link: str | None = path
    while link:
        body = client.get(link, headers=ALICE).json
        items += body["items"]
        link = body["links"]["next"]
    return items


def test_pages_cover_the_sweep_once_in_index_order(client: FlaskClient) -> None:
    sweep_id = submit(client, WIDE)
    items = pages(client, f"/api/v1/sweeps/{sweep_id}/trials?limit=5")
    assert [t["index"] for t in items] == list(range(12))
    assert items[0]["params"] == {"model.hidden_units": 8, "model.activation": "relu"}
    assert items[0]["state"] == "queued" and items[0]["id"].startswith(f"{sweep_id}-")
    assert "config" not in items[0] and "_id" not in items[0]
    default = client.get(f"/api/v1/sweeps/{sweep_id}/trials", headers=ALICE).json
    assert len(default["items"]) == 5  # api_page_size


def test_filters_and_sorts(client: FlaskClient, store: Store) -> None:
    sweep_id = submit(client, WIDE)
    ids = [t["_id"] for t in store.reads.trials(sweep_id, limit=12)[0]]
    for n, trial_id in enumerate(ids[:6]):
        end_trial(store, trial_id, 0.1 * n, "failed" if n == 5 else "complete")
    base = f"/api/v1/sweeps/{sweep_id}/trials"
    relu = pages(client, f"{base}?param=model.activation:relu&limit=2")
    assert [t["params"]["model.hidden_units"] for t in relu] == [8, 16, 32, 64]
    both = pages(client, f"{base}?param=model.activation:tanh&param=model.hidden_units:16")
    assert [t["index"] for t in both] == [4]
    done = pages(client, f"{base}?state=complete,failed&sort=objective&order=desc&limit=2")
    assert [t["id"] for t in done] == ids[5::-1]
    assert pages(client, f"{base}?state=failed&state=complete&limit=50") == pages(
        client, f"{base}?state=complete,failed&limit=50"
    )
    widest = pages(client, f"{base}?sort=model.hidden_units&order=desc&state=queued")
    assert [t["params"]["model.hidden_units"] for t in widest][:3] == [64, 64, 64]
    by_metric = pages(client, f"{base}?sort=result.epochs&state=complete")
    assert len(by_metric) == 5


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("state[$ne]=queued", "state[$ne]"),
        ("$where=1", "$where"),
        ("params[model.hidden_units][$gt]=1", "params[model.hidden_units][$gt]"),
        ("state=$ne", "state"),
        ("sort=$natural", "sort"),
        ('param=model.hidden_units:{"$gt": 1}', "param"),
        ("param=model.hidden_units:[1,2]", "param"),
        ("param=model.hidden_units:$gt", "param"),
        ("param=model.nope:1", "params.model.nope"),
        ("param=nocolon", "param"),
        ("state=sleeping", "state"),
        ("sort=config.model", "sort"),
        ("order=sideways", "order"),
        ("limit=1000", "limit"),
        ("cursor=e30", "cursor"),
        ("colour=red", "colour"),
    ],
)
def test_operators_and_bad_parameters_are_400_naming_the_parameter(
    client: FlaskClient, query: str, parameter: str
) -> None:
    sweep_id = submit(client)
    response = client.get(f"/api/v1/sweeps/{sweep_id}/trials?{query}", headers=ALICE)
    assert response.status_code == 400, response.json
    body = response.json
    assert body["code"] == "invalid_parameter" and body["details"]["parameter"] == parameter


def test_a_metric_sorts_as_result_metric_and_a_bare_name_says_so(client: FlaskClient) -> None:
    """What the routes table of docs/api.md says: metrics sort as result.<metric>; a bare metric
    name is a 400 that names the way to write it."""
    sweep_id = submit(client)
    base = f"/api/v1/sweeps/{sweep_id}/trials"
    assert client.get(f"{base}?sort=result.val_loss", headers=ALICE).status_code == 200
    response = client.get(f"{base}?sort=val_loss", headers=ALICE)
    assert response.status_code == 400 and response.json["details"]["parameter"] == "sort"
    assert "a metric is written result.val_loss" in response.json["message"]


def test_a_cursor_only_works_for_its_own_query(client: FlaskClient) -> None:
    sweep_id = submit(client, WIDE)
    base = f"/api/v1/sweeps/{sweep_id}/trials"
    cursor = client.get(f"{base}?limit=2", headers=ALICE).json["next_cursor"]
    response = client.get(f"{base}?limit=2&state=queued&cursor={cursor}", headers=ALICE)
    assert response.status_code == 400 and "different query" in response.json["message"]


def test_a_trial_with_its_config_history_and_metrics(client: FlaskClient, store: Store) -> None:
    sweep_id = submit(client)
    trial_id = store.reads.trials(sweep_id, limit=1)[0][0]["_id"]
    end_trial(store, trial_id, 0.75)
    body = client.get(f"/api/v1/trials/{trial_id}", headers=ALICE).json
    assert body["id"] == trial_id and body["state"] == "complete" and body["objective"] == 0.75
    assert body["config"]["model"]["hidden_units"] == 8
    assert body["params"]["model.hidden_units"] == 8
    assert body["metrics"][0]["metrics"] == {"val_accuracy": 0.75, "val_loss": 0.25}
    assert body["metrics"][0]["reported_at"].endswith("Z")
    assert body["history"][0]["state"] == "complete"
    assert client.get(f"/api/v1/trials/{trial_id}", headers=BOB).status_code == 404
    assert client.get("/api/v1/trials/nope-0", headers=ALICE).status_code == 404
    assert client.get("/api/v1/trials/x?colour=red", headers=ALICE).status_code == 400
