"""Contract of the store calls the REST API added: `delete_sweep` and `throughput`.

Against the real server of the `mongo_url` fixture, each test on a database of its own.
"""

from __future__ import annotations

import pytest

from core.errors import InvalidQuery, InvalidTransition, NotFound
from core.states import TrialState
from core.store import Store
from tests.core import WORKER, FakeClock, finish, make_sweep, report, trial_ids, width_spec


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
    assert store.admin.delete_sweep(sweep_id, owner="alice") == {"trials": 3, "metrics": 3}
    with pytest.raises(NotFound):
        store.reads.get_sweep(sweep_id)
    with pytest.raises(NotFound):
        store.reads.get_trial(trial_ids(sweep_id, points)[0])
    with pytest.raises(NotFound):
        store.admin.delete_sweep(sweep_id)
    kept = store.reads.get_trial(trial_ids(other_id, other_points)[0])
    assert len(kept["metrics"]) == 1 and store.reads.counts(other_id)["complete"] == 1


def test_throughput_counts_recent_finishes_and_estimates_the_rest(
    store: Store, clock: FakeClock
) -> None:
    sweep_id, points = make_sweep(store, width_spec(10))
    ids = trial_ids(sweep_id, points)
    fresh = store.reads.throughput(sweep_id)
    assert fresh["per_minute"] is None and fresh["eta_seconds"] is None
    assert fresh["remaining"] == 10
    clock.advance(30)
    end_trial(store, ids[0])
    end_trial(store, ids[1], TrialState.FAILED)
    clock.advance(30)  # two finished in the first minute of the sweep
    rate = store.reads.throughput(sweep_id)
    assert rate["window_seconds"] == pytest.approx(60)
    assert rate["per_minute"] == pytest.approx(2.0)
    assert rate["eta_seconds"] == pytest.approx(8 * 30.0)
    clock.advance(3600)  # nothing finished in the last ten minutes
    idle = store.reads.throughput(sweep_id, minutes=10)
    assert idle["window_seconds"] == pytest.approx(600) and idle["per_minute"] is None


def test_throughput_of_a_finished_or_cancelled_sweep(store: Store) -> None:
    sweep_id, points = make_sweep(store, width_spec(2))
    for trial_id in trial_ids(sweep_id, points):
        end_trial(store, trial_id)
    assert store.reads.throughput(sweep_id)["eta_seconds"] == 0.0
    cancelled, _ = make_sweep(store, width_spec(2, name="c"))
    store.admin.cancel_sweep(cancelled)
    assert store.reads.throughput(cancelled)["remaining"] == 0
    with pytest.raises(InvalidQuery, match="minutes"):
        store.reads.throughput(sweep_id, minutes=0)
    with pytest.raises(NotFound):
        store.reads.throughput("nope")
