"""Contract of the trial lifecycle role (`core.store.roles.TrialLifecycle`), many trials at
once (`core.store.lifecycle`): claim, heartbeat, report and finish keep, trial by trial,
every promise of one trial's transitions.

Runs against the real server of the `mongo_url` fixture (SecantusDB, and a real mongod
when SWEEPSTACK_TEST_MONGO_URL is set); each test uses a database of its own and drops it.
"""

from __future__ import annotations

import threading

import pytest

from core.errors import InvalidQuery, InvalidTransition, NotFound
from core.states import Heartbeat
from core.store.roles import EpochRow, Finish
from core.store.store import Store
from tests.core import WORKER, FakeClock, make_sweep, report, run, trial_ids

OTHER = {"host": "other", "pid": 7, "name": "worker-2"}


def test_claim_queued_claims_each_trial_once_and_moves_the_counts(
    store: Store, clock: FakeClock
) -> None:
    sweep_id, points = make_sweep(store)
    ids = trial_ids(sweep_id, points)[:4]
    clock.advance(5)
    assert store.lifecycle.claim_queued(dict.fromkeys(ids, 0), WORKER) == ids
    for trial_id in ids:
        doc = store.reads.get_trial(trial_id, with_metrics=False)
        assert doc["state"] == "running" and doc["attempt"] == 1 and doc["worker"] == WORKER
        assert doc["started_at"] == doc["heartbeat_at"] == clock.now
    assert store.lifecycle.claim_queued(dict.fromkeys(ids, 0), OTHER) == []
    counts = store.reads.counts(sweep_id)
    assert (counts["queued"], counts["running"]) == (32, 4)
    assert store.reads.get_sweep(sweep_id)["counts"] == store.admin.recount(sweep_id)


def test_claim_queued_leaves_trials_at_another_attempt_or_state_alone(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    held, fresh, wrong, _ = trial_ids(sweep_id, points)[:4]
    run(store, held)
    missing = f"{sweep_id}-0000000000000000"
    claimed = store.lifecycle.claim_queued({held: 0, fresh: 0, wrong: 3, missing: 0}, OTHER)
    assert claimed == [fresh]
    assert store.reads.get_trial(held)["worker"] == WORKER  # the live attempt keeps its claim
    assert store.reads.get_trial(wrong)["state"] == "queued"
    assert store.reads.counts(sweep_id)["running"] == 2
    assert store.reads.get_sweep(sweep_id)["counts"] == store.admin.recount(sweep_id)


def test_concurrent_claim_queued_gives_each_trial_to_one_caller(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    ids = trial_ids(sweep_id, points)
    won: list[list[str]] = [[] for _ in range(4)]

    def claim(k: int) -> None:
        worker = {**WORKER, "pid": k}
        won[k] = store.lifecycle.claim_queued(dict.fromkeys(ids, 0), worker)

    threads = [threading.Thread(target=claim, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    everyone = [t for ids_won in won for t in ids_won]
    assert sorted(everyone) == sorted(ids)  # each trial once, none twice
    for k, ids_won in enumerate(won):
        for trial_id in ids_won:
            assert store.reads.get_trial(trial_id, with_metrics=False)["worker"]["pid"] == k
    assert store.reads.get_sweep(sweep_id)["counts"] == store.admin.recount(sweep_id)


def test_claim_queued_of_a_cancelled_sweep_claims_nothing(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    ids = trial_ids(sweep_id, points)[:2]
    store.admin.cancel_sweep(sweep_id)
    assert store.lifecycle.claim_queued(dict.fromkeys(ids, 0), WORKER) == []
    with pytest.raises(InvalidQuery, match="attempt"):
        store.lifecycle.claim_queued({ids[0]: -1}, WORKER)


def test_heartbeat_many_says_ok_stop_or_lost_per_trial(store: Store, clock: FakeClock) -> None:
    sweep_id, points = make_sweep(store)
    first, second, third = trial_ids(sweep_id, points)[:3]
    for trial_id in (first, second, third):
        run(store, trial_id)
    clock.advance(10)
    missing = f"{sweep_id}-0000000000000000"
    assert store.lifecycle.heartbeat_many({first: 1, second: 1}) == {first: "ok", second: "ok"}
    assert store.reads.get_trial(first)["heartbeat_at"] == clock.now
    answers = store.lifecycle.heartbeat_many({first: 1, second: 2, missing: 1})
    assert answers == {first: Heartbeat.OK, second: Heartbeat.LOST, missing: Heartbeat.LOST}
    store.admin.cancel_sweep(sweep_id)
    clock.advance(10)
    assert store.lifecycle.heartbeat_many({first: 1, third: 1}) == {first: "stop", third: "stop"}
    assert (
        store.reads.get_trial(third)["heartbeat_at"] == clock.now
    )  # a stopping attempt still beats


def test_report_many_keeps_one_row_per_attempt_and_epoch(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    first, second = trial_ids(sweep_id, points)[:2]
    run(store, first)
    run(store, second)
    report(store, first, 1, 0, {"val_loss": 1.0})
    store.lifecycle.report_many(
        [
            EpochRow(first, 1, 0, {"val_loss": 99.0}),  # a repeat never overwrites
            EpochRow(first, 1, 1, {"val_loss": 0.9}),
            EpochRow(second, 1, 0, {"val_loss": 2.0}),
            EpochRow(first, 1, 2, {"val_loss": 0.8}),
        ]
    )
    store.lifecycle.report_many([EpochRow(first, 1, 2, {"val_loss": 7.0})])
    rows = store.reads.get_trial(first)["metrics"]
    assert [(r["attempt"], r["epoch"], r["metrics"]["val_loss"]) for r in rows] == [
        (1, 0, 1.0),
        (1, 1, 0.9),
        (1, 2, 0.8),
    ]
    assert {r["sweep_id"] for r in store.db["metrics"].find({"trial_id": first})} == {sweep_id}
    assert store.reads.get_trial(first)["progress"] == {"epoch": 2, "metrics": {"val_loss": 7.0}}
    assert store.reads.get_trial(second)["progress"]["epoch"] == 0
    assert store.db["metrics"].count_documents({}) == 4


def test_report_many_refuses_bad_rows_before_writing_any(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    run(store, tid)
    good = EpochRow(tid, 1, 0, {"val_loss": 1.0})
    with pytest.raises(InvalidQuery, match="epoch"):
        store.lifecycle.report_many([good, EpochRow(tid, 1, -1, {"val_loss": 1.0})])
    with pytest.raises(InvalidQuery, match="attempt"):
        store.lifecycle.report_many([good, EpochRow(tid, 3, 0, {"val_loss": 1.0})])
    with pytest.raises(NotFound):
        store.lifecycle.report_many(
            [good, EpochRow(f"{sweep_id}-0000000000000000", 1, 0, {"a": 1})]
        )
    assert store.db["metrics"].count_documents({}) == 0


def test_finish_many_ends_each_holder_once(store: Store, clock: FakeClock) -> None:
    sweep_id, points = make_sweep(store)
    first, second, third = trial_ids(sweep_id, points)[:3]
    started = run(store, first)
    run(store, second)
    clock.advance(42)
    finishes = [
        Finish(first, 1, "complete", {"val_accuracy": 0.9}, None, {"param_count": 10}),
        Finish(second, 1, "failed", None, "loss became NaN"),
        Finish(third, 1, "complete"),  # never claimed: a no-op
    ]
    assert store.lifecycle.finish_many(finishes) == {first: True, second: True, third: False}
    done = store.reads.get_trial(first, with_metrics=False)
    assert done["state"] == "complete" and done["objective"] == 0.9
    assert done["param_count"] == 10 and done["finished_at"] == clock.now
    assert done["history"] == [
        {
            "attempt": 1,
            "state": "complete",
            "worker": WORKER,
            "started_at": started["started_at"],
            "finished_at": clock.now,
            "error": None,
        }
    ]
    assert store.reads.get_trial(second)["error"] == "loss became NaN"
    assert store.lifecycle.finish_many(finishes[:2]) == {first: False, second: False}
    counts = store.reads.counts(sweep_id)
    assert (counts["complete"], counts["failed"], counts["running"]) == (1, 1, 0)
    assert store.reads.get_sweep(sweep_id)["counts"] == store.admin.recount(sweep_id)


def test_finish_many_checks_its_input_before_writing(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    first, second = trial_ids(sweep_id, points)[:2]
    run(store, first)
    run(store, second)
    before = store.reads.get_trial(first)
    bad = Finish(second, 1, "complete", extra={"state": "queued"})
    with pytest.raises(InvalidQuery, match=r"extra\.state"):
        store.lifecycle.finish_many([Finish(first, 1, "complete"), bad])
    with pytest.raises(InvalidQuery, match="at most once"):
        store.lifecycle.finish_many([Finish(first, 1, "complete"), Finish(first, 1, "failed")])
    with pytest.raises(InvalidTransition, match="not a finish"):
        store.lifecycle.finish_many([Finish(first, 1, "complete"), Finish(second, 1, "queued")])
    assert store.reads.get_trial(first) == before


def test_finish_many_raises_for_what_only_the_store_knows_after_the_others(
    store: Store,
) -> None:
    sweep_id, points = make_sweep(store)
    first, second, third = trial_ids(sweep_id, points)[:3]
    for trial_id in (first, second, third):
        run(store, trial_id)
    with pytest.raises(InvalidTransition, match="running -> cancelled"):
        store.lifecycle.finish_many([Finish(first, 1, "complete"), Finish(second, 1, "cancelled")])
    assert store.reads.get_trial(first)["state"] == "complete"
    assert store.reads.get_trial(second)["state"] == "running"
    with pytest.raises(NotFound):
        store.lifecycle.finish_many(
            [Finish(second, 1, "failed"), Finish(f"{sweep_id}-00", 1, "failed")]
        )
    assert store.reads.get_trial(second)["state"] == "failed"
    store.admin.cancel_sweep(sweep_id)
    assert store.lifecycle.finish_many([Finish(third, 1, "cancelled")]) == {third: True}
    assert store.reads.get_sweep(sweep_id)["counts"] == store.admin.recount(sweep_id)


def test_finish_many_keeps_strings_that_look_like_field_paths(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    run(store, tid)
    finish = Finish(tid, 1, "failed", {"note": "$attempt"}, "$worker", {"tag": "$state"})
    assert store.lifecycle.finish_many([finish]) == {tid: True}
    doc = store.reads.get_trial(tid, with_metrics=False)
    assert doc["result"] == {"note": "$attempt"} and doc["error"] == "$worker"
    assert doc["tag"] == "$state" and doc["history"][-1]["error"] == "$worker"


def test_claim_queued_cancels_a_queued_trial_a_requeue_left_in_a_cancelled_sweep(
    store: Store, clock: FakeClock
) -> None:
    sweep_id, points = make_sweep(store)
    ids = trial_ids(sweep_id, points)[:2]
    # What a retry racing a cancel leaves: the flag set, two trials still queued.
    store.db["sweeps"].update_one({"_id": sweep_id}, {"$set": {"cancelled_at": clock.now}})
    assert store.lifecycle.claim_queued(dict.fromkeys(ids, 0), WORKER) == []
    for trial_id in ids:
        assert store.reads.get_trial(trial_id, with_metrics=False)["state"] == "cancelled"
    assert store.reads.get_sweep(sweep_id)["counts"] == store.admin.recount(sweep_id)
