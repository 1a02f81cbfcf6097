"""Contract of the sweep administration role (`core.store.roles.SweepAdmin`), deleting a sweep:
refused while trials are live, then the sweep, its trials, metrics and summaries go.

Runs against the real server of the `mongo_url` fixture (SecantusDB, and a real mongod
when SWEEPSTACK_TEST_MONGO_URL is set); each test uses a database of its own and drops it.
"""

from __future__ import annotations

import pytest

from core.errors import InvalidTransition, NotFound
from core.states import TrialState
from core.store.store import Store
from tests.core import WORKER, finish, make_sweep, report, trial_ids, width_spec


def end_trial(store: Store, trial_id: str, state: TrialState = TrialState.COMPLETE) -> None:
    claimed = store.lifecycle.claim(trial_id, WORKER, stale_after=60)
    assert claimed is not None
    report(store, trial_id, claimed["attempt"], 1, {"val_loss": 0.5})
    assert finish(store, trial_id, claimed["attempt"], state, result={"objective": 0.5})


def test_delete_sweep_refuses_while_trials_are_queued_or_running(store: Store) -> None:
    sweep_id, points = make_sweep(store, width_spec(3), owner="alice")
    ids = trial_ids(sweep_id, points)
    with pytest.raises(InvalidTransition, match="3 queued and 0 running"):
        store.admin.delete_sweep(sweep_id)
    end_trial(store, ids[0])
    store.lifecycle.claim(ids[1], WORKER, stale_after=60)
    store.admin.cancel_sweep(sweep_id)
    with pytest.raises(InvalidTransition, match="0 queued and 1 running"):
        store.admin.delete_sweep(sweep_id)
    assert store.reads.counts(sweep_id)["running"] == 1


def test_delete_sweep_removes_the_sweep_its_trials_and_metrics(store: Store) -> None:
    sweep_id, points = make_sweep(store, width_spec(3), owner="alice")
    other_id, other_points = make_sweep(store, width_spec(2, name="other"), owner="alice")
    for trial_id in trial_ids(sweep_id, points):
        end_trial(store, trial_id)
    end_trial(store, trial_ids(other_id, other_points)[0])
    with pytest.raises(NotFound):
        store.admin.delete_sweep(sweep_id, owner="bob")
    removed = store.admin.delete_sweep(sweep_id, owner="alice")
    assert removed == {"trials": 3, "metrics": 3, "texts": 0, "artifacts": 0}
    with pytest.raises(NotFound):
        store.reads.get_sweep(sweep_id)
    with pytest.raises(NotFound):
        store.reads.get_trial(trial_ids(sweep_id, points)[0])
    with pytest.raises(NotFound):
        store.admin.delete_sweep(sweep_id)
    kept = store.reads.get_trial(trial_ids(other_id, other_points)[0])
    assert len(kept["metrics"]) == 1 and store.reads.counts(other_id)["complete"] == 1
