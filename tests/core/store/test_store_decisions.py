"""Contract of the pruning decisions at a pruner's epoch (`Feeding.awaiting`,
`Feeding.mark_judged`, `TrialLifecycle.judged`, `core.store.feeding`): a trial that reported
an epoch not judged yet is awaiting; one write records the verdicts to go on and the prune
requests; the worker's one read says, per attempt, how far it may go or how it is to end.

Runs against the real server of the `mongo_url` fixture (SecantusDB, and a real mongod
when SWEEPSTACK_TEST_MONGO_URL is set); each test uses a database of its own and drops it.
"""

from __future__ import annotations

import pytest

from core.errors import InvalidQuery
from core.states import Heartbeat, TrialState
from core.store.records import JUDGED_ALL, Verdict
from core.store.roles import Awaiting
from core.store.store import Store
from tests.core import FakeClock, finish, make_sweep, report, run, trial_ids


def test_awaiting_names_the_reported_epochs_not_judged_and_the_ended(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    reported, silent, ended, queued = trial_ids(sweep_id, points)[:4]
    for tid in (reported, silent, ended):
        run(store, tid)
    report(store, reported, 1, 2, {"val_accuracy": 0.5})
    assert finish(store, ended, 1, TrialState.COMPLETE, result={"objective": 0.5})
    ids = [reported, silent, ended, queued]
    assert store.feeding.awaiting(ids) == {
        reported: Awaiting(1, 2, {"val_accuracy": 0.5}),
        ended: None,
    }
    assert store.feeding.mark_judged({reported: (1, 2)}) == []
    assert store.feeding.awaiting(ids) == {ended: None}  # judged: no longer awaiting
    report(store, reported, 1, 3, {"val_accuracy": 0.6})
    assert store.feeding.awaiting(ids) == {
        reported: Awaiting(1, 3, {"val_accuracy": 0.6}),
        ended: None,
    }


def test_one_write_records_go_on_and_prune_and_judged_tells_each_worker(
    store: Store, clock: FakeClock
) -> None:
    sweep_id, points = make_sweep(store)
    going_on, pruned, cancelled_at, waiting = trial_ids(sweep_id, points)[:4]
    for tid in (going_on, pruned, waiting):
        run(store, tid)
        report(store, tid, 1, 2, {"val_accuracy": 0.5})
    marked = store.feeding.mark_judged({going_on: (1, 2)}, {pruned: (1, 2)})
    assert marked == [pruned]
    request = store.reads.get_trial(pruned, with_metrics=False)["prune_requested"]
    assert request == {"attempt": 1, "epoch": 2, "at": clock.now}
    assert store.lifecycle.judged({going_on: 1, pruned: 1, waiting: 1, cancelled_at: 1}) == {
        going_on: Verdict(2, Heartbeat.OK),
        pruned: Verdict(JUDGED_ALL, Heartbeat.PRUNE),
        waiting: Verdict(-1, Heartbeat.OK),
        cancelled_at: Verdict(JUDGED_ALL, Heartbeat.LOST),  # queued: not this attempt's
    }
    # A second request for the same attempt keeps the first; the go-on marks still land.
    clock.advance(5)
    assert store.feeding.mark_judged({waiting: (1, 2)}, {pruned: (1, 6)}) == []
    assert store.reads.get_trial(pruned, with_metrics=False)["prune_requested"] == request
    assert store.lifecycle.judged({waiting: 1})[waiting] == Verdict(2, Heartbeat.OK)
    # Another attempt's verdict is not this one's.
    assert store.lifecycle.judged({going_on: 2})[going_on] == Verdict(JUDGED_ALL, Heartbeat.LOST)


def test_a_cancelled_sweep_wins_over_a_prune_request(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    run(store, tid)
    assert store.feeding.mark_judged({}, {tid: (1, 2)}) == [tid]
    store.admin.cancel_sweep(sweep_id)
    assert store.lifecycle.judged({tid: 1})[tid] == Verdict(JUDGED_ALL, Heartbeat.STOP)
    assert store.lifecycle.heartbeat_many({tid: 1}) == {tid: Heartbeat.STOP}


@pytest.mark.parametrize(
    ("verdicts", "prune", "field"),
    [
        ({"$x": (1, 2)}, None, "trial_id"),
        ({}, [("a", (1, 2))], "prune"),
        ({}, "a negative epoch for the trial", "epoch"),
    ],
)
def test_bad_decisions_name_the_field_and_write_nothing(
    store: Store, verdicts: dict, prune: object, field: str
) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    run(store, tid)
    if prune == "a negative epoch for the trial":
        prune = {tid: (1, -1)}
    good = {tid: (1, 2)}
    with pytest.raises(InvalidQuery) as caught:
        store.feeding.mark_judged({**good, **verdicts}, prune)  # type: ignore[arg-type]
    assert field in str(caught.value)
    assert store.lifecycle.judged({tid: 1})[tid] == Verdict(-1, Heartbeat.OK)
