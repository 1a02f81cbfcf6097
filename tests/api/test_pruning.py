"""The search and pruning settings of a sweep resource and the ``pruned_epoch`` of trial
resources, on the real store and broker."""

from __future__ import annotations

import csv
import io

from flask.testing import FlaskClient

from core.states import TrialState
from core.store.store import Store
from tests.api import ALICE, small_spec, submit
from tests.core import WORKER, finish, report


def test_a_sweep_shows_its_search_settings_and_defaults_for_old_sweeps(
    client: FlaskClient, store: Store
) -> None:
    grid = submit(client)
    shown = client.get(f"/api/v1/sweeps/{grid}", headers=ALICE).json
    assert shown["search"] == {"algorithm": "grid", "trials": None, "parallelism": None,
                               "seed": 0, "options": {}}
    assert shown["pruning"] == {"algorithm": "none", "metric": "val_accuracy", "options": {}}
    random = submit(client, small_spec(search={"algorithm": "random", "trials": 3, "seed": 5}))
    listed = {s["id"]: s for s in client.get("/api/v1/sweeps", headers=ALICE).json["items"]}
    assert listed[random]["search"]["algorithm"] == "random"
    assert listed[random]["search"]["trials"] == 3 and listed[random]["search"]["seed"] == 5
    # What a spec accepted with a pruner stores (the spec's own rules are the scheduler's).
    store.db["sweeps"].update_one({"_id": grid}, {"$set": {
        "spec.pruning": {"algorithm": "asha", "metric": "val_loss", "reduction_factor": 3},
        "spec.search": {"algorithm": "tpe", "trials": 6, "parallelism": 2,
                        "n_startup_trials": 2}}})
    shown = client.get(f"/api/v1/sweeps/{grid}", headers=ALICE).json
    assert shown["pruning"] == {"algorithm": "asha", "metric": "val_loss",
                                "options": {"reduction_factor": 3}}
    assert shown["search"]["options"] == {"n_startup_trials": 2}
    assert shown["search"]["parallelism"] == 2


def test_trials_carry_the_epoch_a_pruned_one_stopped_at(client: FlaskClient, store: Store) -> None:
    sweep_id = submit(client)
    trials = store.reads.trials(sweep_id, limit=2)[0]
    attempt = store.lifecycle.claim(trials[0]["_id"], WORKER, stale_after=60)["attempt"]
    for epoch in (1, 2):
        report(store, trials[0]["_id"], attempt, epoch, {"val_accuracy": 0.2 * epoch})
    assert finish(store, trials[0]["_id"], attempt, TrialState.PRUNED, extra={"pruned_epoch": 2})
    one = client.get(f"/api/v1/trials/{trials[0]['_id']}", headers=ALICE).json
    assert one["state"] == "pruned" and one["pruned_epoch"] == 2
    assert [m["epoch"] for m in one["metrics"]] == [1, 2]
    page = client.get(f"/api/v1/sweeps/{sweep_id}/trials?state=pruned", headers=ALICE).json
    assert [(t["id"], t["pruned_epoch"]) for t in page["items"]] == [(trials[0]["_id"], 2)]
    other = client.get(f"/api/v1/trials/{trials[1]['_id']}", headers=ALICE).json
    assert other["pruned_epoch"] is None
    assert client.get(f"/api/v1/sweeps/{sweep_id}", headers=ALICE).json["counts"]["pruned"] == 1
    export = client.get(f"/api/v1/sweeps/{sweep_id}/export?format=csv", headers=ALICE)
    rows = {r["id"]: r for r in csv.DictReader(io.StringIO(export.get_data(as_text=True)))}
    assert rows[trials[0]["_id"]]["pruned_epoch"] == "2"
    assert rows[trials[1]["_id"]]["pruned_epoch"] == ""
