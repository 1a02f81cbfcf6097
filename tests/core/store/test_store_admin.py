"""Contract of the sweep administration role (`core.store.roles.SweepAdmin`): create a sweep,
cancel it, requeue stale trials, retry failed ones (deleting: `test_store_admin_delete`;
prune requests: `test_store_admin_prune`).

Runs against the real server of the `mongo_url` fixture (SecantusDB, and a real mongod
when SWEEPSTACK_TEST_MONGO_URL is set); each test uses a database of its own and drops it.
"""

from __future__ import annotations

import re

import pytest

from core.errors import (
    InvalidQuery,
    InvalidTransition,
    NotFound,
)
from core.states import ALL_STATES, Heartbeat, TrialState
from core.store.records import flatten_params
from core.store.store import Store
from scheduler.expand import TrialPoint, expand
from tests.core import (
    WORKER,
    FakeClock,
    complete,
    finish,
    heartbeat,
    make_sweep,
    run,
    small_spec,
    trial_ids,
)

# -- create ----------------------------------------------------------------------------


def test_create_sweep_stores_the_sweep_and_queued_trials(store: Store, clock: FakeClock) -> None:
    spec = small_spec()
    sweep_id, points = make_sweep(store, spec, owner="alice")
    assert re.fullmatch(r"[0-9a-f]{12}", sweep_id)
    sweep = store.reads.get_sweep(sweep_id)
    assert sweep["name"] == "store-test"
    assert sweep["owner"] == "alice"
    assert sweep["spec"] == spec.document
    assert sweep["objective"] == {"metric": "val_accuracy", "direction": "maximize"}
    assert sweep["trial_count"] == 36
    assert sweep["created_at"] == sweep["updated_at"] == clock.now
    assert sweep["counts"] == {s.value: (36 if s is TrialState.QUEUED else 0) for s in ALL_STATES}

    point = points[5]
    trial = store.reads.get_trial(f"{sweep_id}-{point.id}", with_metrics=False)
    assert trial["sweep_id"] == sweep_id and trial["key"] == point.id and trial["index"] == 5
    assert flatten_params(trial["params"]) == point.params
    assert trial["params"]["model"]["hidden_units"] == point.params["model.hidden_units"]
    assert trial["config"] == point.config and trial["seed"] == point.seed
    assert trial["state"] == "queued" and trial["attempt"] == 0 and trial["history"] == []
    assert trial["queued_at"] == trial["updated_at"] == clock.now
    for field in ("worker", "started_at", "finished_at", "result", "objective", "error"):
        assert trial[field] is None


def test_create_sweep_inserts_in_batches_and_fills_missing_configs(store: Store) -> None:
    spec = small_spec()
    bare = [
        TrialPoint(index=p.index, id=p.id, params=p.params, seed=p.seed)
        for p in expand(spec, with_config=False)
    ]
    small_batches = Store(store.client, store.db.name, insert_batch=5)
    sweep_id = small_batches.admin.create_sweep(spec, bare)
    trials, _ = store.reads.trials(sweep_id, limit=100)
    assert [t["index"] for t in trials] == list(range(36))
    full = expand(spec, with_config=True)
    assert [t["config"] for t in trials] == [p.config for p in full]


def test_create_sweep_refuses_duplicate_points(store: Store) -> None:
    spec = small_spec()
    points = expand(spec, with_config=True)
    with pytest.raises(InvalidQuery, match="unique"):
        store.admin.create_sweep(spec, [points[0], points[0]])
    assert store.reads.list_sweeps()[0] == []


# -- cancel, requeue, retry ------------------------------------------------------------


def test_cancel_sweep_cancels_queued_and_asks_running_to_stop(
    store: Store, clock: FakeClock
) -> None:
    sweep_id, points = make_sweep(store)
    ids = trial_ids(sweep_id, points)
    complete(store, ids[0], 0.5)
    run(store, ids[1])
    done = store.reads.get_trial(ids[0])
    clock.advance(1)
    assert store.admin.cancel_sweep(sweep_id) == {"cancelled": 34, "stopping": 1}
    assert store.reads.get_trial(ids[0]) == done
    assert store.reads.get_trial(ids[1])["stop_requested"] is True
    assert store.reads.get_trial(ids[2])["state"] == "cancelled"
    assert store.reads.get_sweep(sweep_id)["cancelled_at"] == clock.now
    assert store.reads.counts(sweep_id) == {
        "queued": 0,
        "running": 1,
        "complete": 1,
        "failed": 0,
        "pruned": 0,
        "cancelled": 34,
    }
    assert store.admin.cancel_sweep(sweep_id) == {"cancelled": 0, "stopping": 0}
    with pytest.raises(NotFound):
        store.admin.cancel_sweep("000000000000")


def test_a_stopping_trial_whose_worker_died_ends_cancelled(store: Store, clock: FakeClock) -> None:
    sweep_id, points = make_sweep(store)
    first, second = trial_ids(sweep_id, points)[:2]
    run(store, first)
    run(store, second)
    store.admin.cancel_sweep(sweep_id)
    clock.advance(600)
    assert store.lifecycle.claim(first, WORKER, stale_after=60) is None
    assert store.admin.requeue_stale(60) == []
    for tid in (first, second):
        trial = store.reads.get_trial(tid)
        assert trial["state"] == "cancelled"
        assert [h["state"] for h in trial["history"]] == ["lost"]
    assert store.reads.counts(sweep_id)["cancelled"] == 36
    assert store.reads.counts(sweep_id) == store.admin.recount(sweep_id)


def test_requeue_stale_puts_lost_attempts_back_in_the_queue(store: Store, clock: FakeClock) -> None:
    sweep_id, points = make_sweep(store)
    stale, fresh = trial_ids(sweep_id, points)[:2]
    other_sweep, other_points = make_sweep(store)
    other = trial_ids(other_sweep, other_points)[0]
    run(store, stale)
    run(store, other)
    clock.advance(100)
    run(store, fresh)
    assert store.admin.requeue_stale(60, sweep_id=sweep_id) == [stale]
    trial = store.reads.get_trial(stale)
    assert trial["state"] == "queued" and trial["attempt"] == 1 and trial["worker"] is None
    assert trial["history"][0]["state"] == "lost" and trial["history"][0]["attempt"] == 1
    assert store.reads.get_trial(fresh)["state"] == "running"
    assert store.reads.get_trial(other)["state"] == "running"
    assert heartbeat(store, stale, 1) is Heartbeat.LOST
    assert finish(store, stale, 1, "complete") is False
    assert run(store, stale)["attempt"] == 2
    assert store.admin.requeue_stale(60) == [other]
    assert store.reads.counts(sweep_id) == store.admin.recount(sweep_id)
    with pytest.raises(InvalidQuery, match="stale_after"):
        store.admin.requeue_stale(-1)


def test_requeue_stale_ends_a_trial_failed_at_max_attempts(store: Store, clock: FakeClock) -> None:
    sweep_id, points = make_sweep(store)
    tid, other = trial_ids(sweep_id, points)[:2]
    run(store, tid)
    run(store, other)
    clock.advance(100)
    assert sorted(store.admin.requeue_stale(60, max_attempts=2)) == sorted([tid, other])
    assert store.reads.get_trial(tid)["lost_attempts"] == 1
    run(store, tid)  # attempt 2 goes silent too
    clock.advance(100)
    assert store.admin.requeue_stale(60, max_attempts=2) == []
    trial = store.reads.get_trial(tid)
    assert trial["state"] == "failed" and trial["lost_attempts"] == 2
    assert trial["error"].startswith("its worker died 2 times: attempt 2 (host test-host")
    assert trial["finished_at"] == clock.now
    assert [h["state"] for h in trial["history"]] == ["lost", "lost"]
    assert store.reads.get_trial(other)["state"] == "queued"
    assert store.reads.counts(sweep_id) == store.admin.recount(sweep_id)
    assert store.reads.counts(sweep_id)["failed"] == 1
    # A retry starts the count afresh: max_attempts more lost attempts before it fails.
    assert store.admin.retry_failed(sweep_id) == [tid]
    assert store.reads.get_trial(tid)["lost_attempts"] == 0
    run(store, tid)
    clock.advance(100)
    assert store.admin.requeue_stale(60, max_attempts=2) == [tid]
    assert store.reads.get_trial(tid)["attempt"] == 3
    with pytest.raises(InvalidQuery, match="max_attempts"):
        store.admin.requeue_stale(60, max_attempts=0)


def test_concurrent_requeues_count_one_loss(store: Store, clock: FakeClock) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    run(store, tid)
    clock.advance(100)
    assert store.admin.requeue_stale(60) == [tid]
    assert store.admin.requeue_stale(60) == []
    assert store.reads.get_trial(tid)["lost_attempts"] == 1


def test_requeue_without_counting_never_fails_a_trial(store: Store, clock: FakeClock) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    for _ in range(3):  # a `sweepstack run` stopped and resumed three times
        run(store, tid)
        clock.advance(1)
        assert store.admin.requeue_stale(
            0, sweep_id=sweep_id, max_attempts=1, count_lost=False
        ) == [tid]
    trial = store.reads.get_trial(tid)
    assert trial["state"] == "queued" and trial["attempt"] == 3
    assert trial.get("lost_attempts", 0) == 0


def test_retry_failed_queues_failed_trials_and_keeps_their_errors(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    failed, completed = trial_ids(sweep_id, points)[:2]
    run(store, failed)
    finish(store, failed, 1, "failed", error="out of memory")
    complete(store, completed, 0.7)
    assert store.admin.retry_failed(sweep_id) == [failed]
    trial = store.reads.get_trial(failed)
    assert trial["state"] == "queued" and trial["error"] is None and trial["finished_at"] is None
    assert trial["history"][0]["state"] == "failed"
    assert trial["history"][0]["error"] == "out of memory"
    again = run(store, failed)
    assert again["attempt"] == 2
    assert store.reads.get_trial(completed)["state"] == "complete"
    assert store.admin.retry_failed(sweep_id) == []
    store.admin.cancel_sweep(sweep_id)
    with pytest.raises(InvalidTransition, match="cancelled"):
        store.admin.retry_failed(sweep_id)
