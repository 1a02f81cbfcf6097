"""The store contract, actions on a whole sweep (`core.sweep_actions`): cancel, requeue
stale, retry failed.

Runs against the real server of the `mongo_url` fixture (SecantusDB, and a real mongod
when SWEEPSTACK_TEST_MONGO_URL is set); each test uses a database of its own and drops it.
"""

from __future__ import annotations

import pytest

from core.errors import (
    InvalidQuery,
    InvalidTransition,
    NotFound,
)
from core.states import Heartbeat
from core.store import Store
from tests.core import WORKER, FakeClock, complete, finish, heartbeat, make_sweep, run, trial_ids

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
        assert store.admin.requeue_stale(0, sweep_id=sweep_id, max_attempts=1, count_lost=False) == [tid]
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
