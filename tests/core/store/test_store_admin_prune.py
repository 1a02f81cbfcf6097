"""Contract of the sweep administration role (`core.store.roles.SweepAdmin`), early stopping
(`request_prune`, `core.store.admin`): a prune request marks a running attempt, its
heartbeats answer ``prune``, and it ends ``pruned``.

Runs against the real server of the `mongo_url` fixture (SecantusDB, and a real mongod
when SWEEPSTACK_TEST_MONGO_URL is set); each test uses a database of its own and drops it.
"""

from __future__ import annotations

from typing import Any

import pytest

from core.errors import InvalidQuery
from core.states import Heartbeat, TrialState
from core.store.roles import Finish
from core.store.store import Store
from tests.core import WORKER, FakeClock, finish, heartbeat, make_sweep, report, run, trial_ids


def test_request_prune_marks_running_attempts_in_one_call(store: Store, clock: FakeClock) -> None:
    sweep_id, points = make_sweep(store)
    first, second, queued = trial_ids(sweep_id, points)[:3]
    run(store, first)
    run(store, second)
    clock.advance(3)
    assert store.admin.request_prune({first: (1, 4), second: (1, 7)}) == [first, second]
    doc = store.reads.get_trial(first, with_metrics=False)
    assert doc["prune_requested"] == {"attempt": 1, "epoch": 4, "at": clock.now}
    assert doc["state"] == "running"  # the worker ends it, not the request
    assert store.reads.get_trial(second, with_metrics=False)["prune_requested"]["epoch"] == 7
    assert "prune_requested" not in store.reads.get_trial(queued, with_metrics=False)


def test_request_prune_is_idempotent_and_keeps_the_first_request(
    store: Store, clock: FakeClock
) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    run(store, tid)
    assert store.admin.request_prune({tid: (1, 3)}) == [tid]
    first = store.reads.get_trial(tid, with_metrics=False)["prune_requested"]
    clock.advance(5)
    assert store.admin.request_prune({tid: (1, 5)}) == []
    assert store.reads.get_trial(tid, with_metrics=False)["prune_requested"] == first


def test_request_prune_leaves_other_states_and_attempts_alone(
    store: Store, clock: FakeClock
) -> None:
    sweep_id, points = make_sweep(store)
    held, queued, finished, taken_over, fresh = trial_ids(sweep_id, points)[:5]
    for tid in (held, finished, taken_over, fresh):
        run(store, tid)
    assert finish(store, finished, 1, TrialState.COMPLETE, result={"objective": 0.5})
    clock.advance(120)
    assert store.lifecycle.claim(taken_over, WORKER, stale_after=60) is not None  # now attempt 2
    missing = f"{sweep_id}-0000000000000000"
    requests = {
        held: (2, 1),  # wrong attempt
        queued: (1, 1),
        finished: (1, 1),
        taken_over: (1, 1),  # the lost attempt's
        missing: (1, 1),
        fresh: (1, 2),
    }
    assert store.admin.request_prune(requests) == [fresh]
    for tid in (held, queued, finished, taken_over):
        assert store.reads.get_trial(tid, with_metrics=False).get("prune_requested") is None
    assert store.reads.get_trial(finished, with_metrics=False)["state"] == "complete"
    assert heartbeat(store, taken_over, 2) is Heartbeat.OK


@pytest.mark.parametrize(
    ("requests", "field"),
    [
        ({"$where": (1, 1)}, "trial_id"),
        ({"x-1": (0, 1)}, "attempt"),
        ({"x-1": (True, 1)}, "attempt"),
        ({"x-1": (1, -1)}, "epoch"),
        ({"x-1": (1, 1.5)}, "epoch"),
        ({"x-1": 1}, "requests.x-1"),
        ({"x-1": (1, 2, 3)}, "requests.x-1"),
        ([("x-1", (1, 1))], "requests"),
    ],
)
def test_request_prune_refuses_bad_input_naming_the_field(
    store: Store, requests: Any, field: str
) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    run(store, tid)
    good = {tid: (1, 1)}
    with pytest.raises(InvalidQuery) as caught:
        store.admin.request_prune({**good, **requests} if isinstance(requests, dict) else requests)
    assert caught.value.field == field
    assert store.reads.get_trial(tid, with_metrics=False).get("prune_requested") is None  # nothing


def test_heartbeats_answer_prune_to_the_named_attempt_only(store: Store, clock: FakeClock) -> None:
    sweep_id, points = make_sweep(store)
    pruned, going_on, lost = trial_ids(sweep_id, points)[:3]
    for tid in (pruned, going_on, lost):
        run(store, tid)
    store.admin.request_prune({pruned: (1, 2)})
    clock.advance(10)
    beat = heartbeat(store, pruned, 1)
    assert beat is Heartbeat.PRUNE and beat == "prune" and not beat
    assert store.reads.get_trial(pruned, with_metrics=False)["heartbeat_at"] == clock.now
    clock.advance(10)
    answers = store.lifecycle.heartbeat_many({pruned: 1, going_on: 1, lost: 2})
    assert answers == {pruned: "prune", going_on: "ok", lost: "lost"}
    assert (
        store.reads.get_trial(pruned, with_metrics=False)["heartbeat_at"] == clock.now
    )  # beats on
    store.admin.cancel_sweep(sweep_id)
    assert heartbeat(store, pruned, 1) is Heartbeat.STOP  # a cancel wins over a prune
    assert store.lifecycle.heartbeat_many({pruned: 1}) == {pruned: "stop"}


def test_a_request_for_a_lost_attempt_does_not_reach_the_next(
    store: Store, clock: FakeClock
) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    run(store, tid)
    store.admin.request_prune({tid: (1, 2)})
    clock.advance(120)
    assert store.lifecycle.claim(tid, WORKER, stale_after=60)["attempt"] == 2
    assert heartbeat(store, tid, 2) is Heartbeat.OK
    assert store.lifecycle.heartbeat_many({tid: 2}) == {tid: "ok"}
    assert store.admin.request_prune({tid: (2, 1)}) == [tid]
    assert store.lifecycle.heartbeat_many({tid: 2}) == {tid: "prune"}


def test_a_pruned_finish_keeps_the_request_and_the_epoch_and_moves_the_counts(
    store: Store,
) -> None:
    sweep_id, points = make_sweep(store)
    one, many = trial_ids(sweep_id, points)[:2]
    run(store, one)
    run(store, many)
    store.admin.request_prune({one: (1, 3), many: (1, 4)})
    for epoch in (1, 2, 3, 4):
        report(store, one, 1, epoch, {"val_accuracy": epoch / 10})
    result = {"objective": 0.4, "final": {"val_accuracy": 0.4}}
    assert finish(store, one, 1, TrialState.PRUNED, result=result, extra={"pruned_epoch": 4})
    ended = Finish(many, 1, TrialState.PRUNED, {"objective": 0.3}, None, {"pruned_epoch": 5})
    assert store.lifecycle.finish_many([ended]) == {many: True}
    doc = store.reads.get_trial(one)
    assert doc["state"] == "pruned" and doc["pruned_epoch"] == 4 and doc["objective"] == 0.4
    assert doc["prune_requested"]["epoch"] == 3
    assert [row["epoch"] for row in doc["metrics"]] == [1, 2, 3, 4]
    assert store.reads.get_trial(many, with_metrics=False)["pruned_epoch"] == 5
    assert store.reads.counts(sweep_id)["pruned"] == 2
    assert store.reads.get_sweep(sweep_id)["counts"] == store.admin.recount(sweep_id)
    assert store.admin.request_prune({one: (1, 5)}) == []  # finished: a no-op
    with pytest.raises(InvalidQuery, match="prune_requested"):
        finish(store, many, 1, TrialState.PRUNED, extra={"prune_requested": None})
