"""Contract of the trial lifecycle role (`core.store.roles.TrialLifecycle`), one trial at a
time: claim (the careful way), heartbeat, report, finish (the batched writes given one
trial each: `tests.core.heartbeat`, `report`, `finish`).

Runs against the real server of the `mongo_url` fixture (SecantusDB, and a real mongod
when SWEEPSTACK_TEST_MONGO_URL is set); each test uses a database of its own and drops it.
"""

from __future__ import annotations

from typing import Any

import pytest

from core.errors import (
    InvalidQuery,
    InvalidTransition,
    NotFound,
)
from core.states import Heartbeat, TrialState
from core.store.store import Store
from tests.core import (
    WORKER,
    FakeClock,
    complete,
    finish,
    heartbeat,
    make_sweep,
    report,
    run,
    trial_ids,
)

# -- claim -----------------------------------------------------------------------------


def test_claim_moves_a_queued_trial_to_running_once(store: Store, clock: FakeClock) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    clock.advance(5)
    claimed = store.lifecycle.claim(tid, WORKER, stale_after=60)
    assert claimed is not None
    assert claimed["state"] == "running" and claimed["attempt"] == 1
    assert claimed["worker"] == WORKER
    assert claimed["started_at"] == claimed["heartbeat_at"] == claimed["updated_at"] == clock.now
    assert store.lifecycle.claim(tid, WORKER, stale_after=60) is None
    assert store.reads.counts(sweep_id)["running"] == 1
    assert store.reads.counts(sweep_id)["queued"] == 35


def test_claim_of_an_unknown_trial_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound, match="trial"):
        store.lifecycle.claim("000000000000-0000000000000000", WORKER, stale_after=60)


def test_claim_takes_over_an_attempt_whose_heartbeat_is_stale(
    store: Store, clock: FakeClock
) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    first = run(store, tid)
    clock.advance(30)
    assert store.lifecycle.claim(tid, WORKER, stale_after=60) is None  # still fresh
    clock.advance(31)
    other = {"host": "other", "pid": 7, "name": "worker-2"}
    second = store.lifecycle.claim(tid, other, stale_after=60)
    assert second is not None and second["attempt"] == 2 and second["worker"] == other
    [lost] = second["history"]
    assert lost["attempt"] == 1 and lost["state"] == "lost" and lost["worker"] == WORKER
    assert lost["started_at"] == first["started_at"] and lost["finished_at"] == clock.now
    assert "heartbeat" in lost["error"]
    assert store.reads.counts(sweep_id)["running"] == 1


def test_claim_takes_over_an_attempt_known_to_be_dead(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    run(store, tid)
    assert store.lifecycle.claim(tid, WORKER, stale_after=60, takeover_attempt=5) is None
    taken = store.lifecycle.claim(tid, WORKER, stale_after=60, takeover_attempt=1)
    assert taken is not None and taken["attempt"] == 2
    assert [h["state"] for h in taken["history"]] == ["lost"]
    assert finish(store, tid, 1, "complete") is False  # the dead attempt cannot finish
    assert heartbeat(store, tid, 1) is Heartbeat.LOST


def _epochs(store: Store, tid: str) -> list[tuple[int, int]]:
    found = store.db["metrics"].find({"trial_id": tid}, {"attempt": 1, "epoch": 1})
    return sorted((row["attempt"], row["epoch"]) for row in found)


def test_two_resumes_from_one_checkpoint_each_take_its_rows(store: Store) -> None:
    # Attempt 1 checkpoints after epoch 4 and dies in epoch 6; attempt 2 resumes from that
    # checkpoint (taking rows 1-4) and dies before one of its own; attempt 3 resumes from
    # the same checkpoint: rows 1-4 are now attempt 2's, and they are what it takes (#29).
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    run(store, tid)
    for epoch in range(1, 6):
        report(store, tid, 1, epoch, {"loss": 1.0 / epoch})
    for attempt in (2, 3):
        taken = store.lifecycle.claim(tid, WORKER, stale_after=60, takeover_attempt=attempt - 1)
        assert taken is not None and taken["attempt"] == attempt
        assert store.lifecycle.resume(tid, attempt, 1, 4)
        report(store, tid, attempt, 5, {"loss": 0.2})
    assert _epochs(store, tid) == [(1, 5), (2, 5), (3, 1), (3, 2), (3, 3), (3, 4), (3, 5)]
    assert [r["attempt"] for r in store.lifecycle.trial(tid)["resumed"]] == [2, 3]
    # A resume begun again (the same attempt, after a restart within it) changes nothing.
    assert store.lifecycle.resume(tid, 3, 1, 4)
    assert [e for a, e in _epochs(store, tid) if a == 3] == [1, 2, 3, 4, 5]


def test_hand_back_queues_the_attempt_again_without_counting_a_loss(
    store: Store, clock: FakeClock
) -> None:
    # A worker shutting down (SIGTERM) hands its trial back after a checkpoint of epoch 3:
    # the trial is queued at attempt 1, the next claim is attempt 2 and resumes from it.
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    run(store, tid)
    for epoch in (1, 2, 3):
        report(store, tid, 1, epoch, {"loss": 1.0 / epoch})
    clock.advance(5)
    assert store.lifecycle.hand_back(tid, 1, "its worker shut down")
    doc = store.lifecycle.trial(tid)
    assert (doc["state"], doc["attempt"], doc.get("lost_attempts", 0)) == ("queued", 1, 0)
    assert doc["worker"] is None and doc["heartbeat_at"] is None
    (entry,) = doc["history"]
    assert (entry["state"], entry["attempt"], entry["error"]) == (
        "handed_back",
        1,
        "its worker shut down",
    )
    assert entry["worker"] == WORKER and entry["finished_at"] == clock.now
    counts = store.reads.counts(sweep_id)
    assert (counts["running"], counts["queued"]) == (0, 36)
    # Twice, or by an attempt that no longer holds the trial: nothing changes.
    assert not store.lifecycle.hand_back(tid, 1, "again")
    assert store.reads.counts(sweep_id)["queued"] == 36
    taken = store.lifecycle.claim(tid, WORKER, stale_after=60)
    assert taken is not None and taken["attempt"] == 2
    assert not store.lifecycle.hand_back(tid, 1, "a stale attempt")
    assert store.lifecycle.resume(tid, 2, 1, 3)
    assert _epochs(store, tid) == [(2, 1), (2, 2), (2, 3)]
    assert store.lifecycle.heartbeat_many({tid: 2})[tid] == Heartbeat.OK


@pytest.mark.parametrize(
    ("field", "args"), [("trial_id", ({"$ne": ""}, 1, "x")), ("attempt", (None, 0, "x")),
                        ("reason", (None, 1, 5))],
)  # fmt: skip
def test_hand_back_refuses_bad_input(store: Store, field: str, args: tuple[Any, ...]) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    run(store, tid)
    with pytest.raises(InvalidQuery, match=field):
        store.lifecycle.hand_back(args[0] or tid, *args[1:])
    assert store.lifecycle.trial(tid)["state"] == "running"


def test_a_trial_whose_worker_dies_max_attempts_times_ends_failed(
    store: Store, clock: FakeClock
) -> None:
    sweep_id, points = make_sweep(store)
    tid, behind = trial_ids(sweep_id, points)[:2]
    run(store, tid)
    for attempt in (1, 2):  # takeovers by a worker that saw the holder die, then by staleness
        clock.advance(1)
        kwargs: dict[str, Any] = {"takeover_attempt": attempt} if attempt == 1 else {}
        if attempt == 2:
            clock.advance(61)
        taken = store.lifecycle.claim(tid, WORKER, stale_after=60, max_attempts=3, **kwargs)
        assert taken is not None and taken["attempt"] == attempt + 1
        assert taken["lost_attempts"] == attempt
    clock.advance(1)
    assert (
        store.lifecycle.claim(tid, WORKER, stale_after=60, takeover_attempt=3, max_attempts=3)
        is None
    )
    trial = store.reads.get_trial(tid)
    assert trial["state"] == "failed" and trial["attempt"] == 3 and trial["lost_attempts"] == 3
    assert trial["error"].startswith("its worker died 3 times: attempt 3 (host test-host, pid 4242")
    assert "last sent a heartbeat at" in trial["error"]
    assert [h["state"] for h in trial["history"]] == ["lost", "lost", "lost"]
    assert heartbeat(store, tid, 3) is Heartbeat.LOST
    assert finish(store, tid, 3, "complete") is False
    # A redelivered message for it does nothing; the queue flows on.
    assert store.lifecycle.claim(tid, WORKER, stale_after=0, takeover_attempt=3) is None
    assert store.reads.get_trial(tid) == trial
    assert run(store, behind)["attempt"] == 1
    assert store.reads.counts(sweep_id)["failed"] == 1
    assert store.reads.counts(sweep_id) == store.admin.recount(sweep_id)


def test_max_attempts_1_fails_at_the_first_loss_and_fewer_losses_finish(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    run(store, tid)
    assert (
        store.lifecycle.claim(tid, WORKER, stale_after=60, takeover_attempt=1, max_attempts=1)
        is None
    )
    assert store.reads.get_trial(tid)["state"] == "failed"
    other = trial_ids(sweep_id, points)[1]
    run(store, other)
    taken = store.lifecycle.claim(other, WORKER, stale_after=60, takeover_attempt=1, max_attempts=5)
    assert taken is not None and taken["lost_attempts"] == 1
    assert finish(store, other, 2, "complete", result={"objective": 0.5})
    assert store.reads.get_trial(other)["state"] == "complete"


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3"])
def test_claim_refuses_a_bad_max_attempts(store: Store, bad: Any) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    with pytest.raises(InvalidQuery, match="max_attempts"):
        store.lifecycle.claim(tid, WORKER, stale_after=60, max_attempts=bad)
    assert store.reads.get_trial(tid)["state"] == "queued"


def test_claim_of_a_terminal_trial_is_none(store: Store, clock: FakeClock) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    complete(store, tid, 0.5)
    before = store.reads.get_trial(tid)
    clock.advance(3600)
    assert store.lifecycle.claim(tid, WORKER, stale_after=0, takeover_attempt=1) is None
    assert store.reads.get_trial(tid) == before


# -- heartbeat -------------------------------------------------------------------------


def test_heartbeat_says_ok_stop_or_lost(store: Store, clock: FakeClock) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    run(store, tid)
    clock.advance(10)
    beat = heartbeat(store, tid, 1)
    assert beat is Heartbeat.OK and beat == "ok" and bool(beat)
    assert store.reads.get_trial(tid)["heartbeat_at"] == clock.now
    assert heartbeat(store, tid, 2) is Heartbeat.LOST
    assert not heartbeat(store, tid, 2)
    store.admin.cancel_sweep(sweep_id)
    stop = heartbeat(store, tid, 1)
    assert stop is Heartbeat.STOP and stop == "stop" and not stop
    # A trial the store does not have: its claim is gone, as for any lost one.
    assert heartbeat(store, "000000000000-0000000000000000", 1) is Heartbeat.LOST
    with pytest.raises(InvalidQuery, match="attempt"):
        heartbeat(store, tid, 0)


# -- report ----------------------------------------------------------------------------


def test_report_keeps_one_row_per_attempt_and_epoch(store: Store, clock: FakeClock) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    run(store, tid)
    report(store, tid, 1, 1, {"val_loss": 0.9})
    report(store, tid, 1, 0, {"val_loss": 1.0})
    report(store, tid, 1, 0, {"val_loss": 1.0})
    report(store, tid, 1, 0, {"val_loss": 123.0})  # a late duplicate never overwrites
    assert store.reads.get_trial(tid)["progress"] == {"epoch": 0, "metrics": {"val_loss": 123.0}}
    clock.advance(120)
    assert store.lifecycle.claim(tid, WORKER, stale_after=60) is not None  # attempt 2
    report(store, tid, 2, 0, {"val_loss": 0.8})
    report(store, tid, 1, 2, {"val_loss": 0.7})  # the lost attempt reports late: refused
    rows = store.reads.get_trial(tid)["metrics"]
    assert [(r["attempt"], r["epoch"], r["metrics"]["val_loss"]) for r in rows] == [
        (1, 0, 1.0),
        (1, 1, 0.9),
        (2, 0, 0.8),
    ]
    assert store.db["metrics"].count_documents({"trial_id": tid}) == 3


def test_a_requeued_attempts_late_rows_are_refused_and_a_cancelled_ones_kept(
    store: Store, clock: FakeClock
) -> None:
    """A worker cut off beyond the stale limit sends its rows once its link is back: the
    scan requeued its attempt, so they are refused by attempt, as its finish is (#33). An
    attempt that is still the trial's keeps its rows, the trial ended (cancelled) or not."""
    sweep_id, points = make_sweep(store)
    tid, other = trial_ids(sweep_id, points)[:2]
    run(store, tid)
    report(store, tid, 1, 1, {"val_loss": 0.9})
    clock.advance(120)
    assert store.admin.requeue_stale(60, sweep_id) == [tid]
    report(store, tid, 1, 2, {"val_loss": 0.7})
    assert [r["epoch"] for r in store.reads.get_trial(tid)["metrics"]] == [1]
    run(store, other)
    store.admin.cancel_sweep(sweep_id)
    report(store, other, 1, 1, {"val_loss": 0.5})
    assert [r["epoch"] for r in store.reads.get_trial(other)["metrics"]] == [1]


@pytest.mark.parametrize(
    ("attempt", "epoch", "metrics", "field"),
    [
        (1, 0, {"$gt": 1}, "metrics"),
        (1, 0, {"a.b": 1}, "metrics"),
        (1, 0, ["val_loss", 1], "metrics"),
        (3, 0, {"val_loss": 1}, "attempt"),
        (0, 0, {"val_loss": 1}, "attempt"),
        (1, -1, {"val_loss": 1}, "epoch"),
        (1, True, {"val_loss": 1}, "epoch"),
    ],
)
def test_report_refuses_bad_input(
    store: Store, attempt: Any, epoch: Any, metrics: Any, field: str
) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    run(store, tid)
    with pytest.raises(InvalidQuery) as caught:
        report(store, tid, attempt, epoch, metrics)
    assert caught.value.field == field
    assert store.db["metrics"].count_documents({}) == 0


def test_report_for_an_unknown_trial_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound):
        report(store, "000000000000-0000000000000000", 1, 0, {"val_loss": 1.0})


# -- finish ----------------------------------------------------------------------------


def test_finish_is_done_once_by_the_holder(store: Store, clock: FakeClock) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    started = run(store, tid)
    clock.advance(42)
    extra = {
        "param_count": 1234,
        "train_seconds": 41.5,
        "device": "cpu",
        "dtype": "float32",
        "versions": {"torch": "2.13.0", "sweepstack": "0.1.0"},
    }
    assert finish(
        store, tid, 1, "complete", result={"val_accuracy": 0.93, "objective": 0.93}, extra=extra
    )
    done = store.reads.get_trial(tid, with_metrics=False)
    assert done["state"] == "complete" and done["objective"] == 0.93
    assert done["result"] == {"val_accuracy": 0.93, "objective": 0.93}
    assert done["finished_at"] == done["updated_at"] == clock.now
    assert {k: done[k] for k in extra} == extra
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
    clock.advance(5)
    assert finish(store, tid, 1, "failed", error="again?") is False
    assert store.reads.get_trial(tid, with_metrics=False) == done
    assert (
        store.reads.counts(sweep_id)["complete"] == 1
        and store.reads.counts(sweep_id)["running"] == 0
    )


def test_finish_by_a_queued_trial_or_a_stale_attempt_is_a_no_op(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    first, second = trial_ids(sweep_id, points)[:2]
    assert finish(store, first, 1, "complete") is False
    run(store, second)
    assert finish(store, second, 2, "complete") is False
    assert store.reads.get_trial(second)["state"] == "running"


def test_finish_failed_keeps_the_error(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    run(store, tid)
    assert finish(store, tid, 1, TrialState.FAILED, error="loss became NaN at epoch 3")
    trial = store.reads.get_trial(tid)
    assert trial["state"] == "failed" and trial["error"] == "loss became NaN at epoch 3"
    assert trial["history"][0]["error"] == "loss became NaN at epoch 3"


def test_finish_takes_the_objective_from_the_sweep_metric(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    first, second, third = trial_ids(sweep_id, points)[:3]
    run(store, first)
    finish(store, first, 1, "complete", result={"val_accuracy": 0.8, "val_loss": 0.4})
    assert store.reads.get_trial(first)["objective"] == 0.8
    run(store, second)
    finish(store, second, 1, "complete", result={"objective": float("nan")})
    assert store.reads.get_trial(second)["objective"] is None
    run(store, third)
    finish(store, third, 1, "pruned")
    assert store.reads.get_trial(third)["objective"] is None


@pytest.mark.parametrize("state", ["queued", "running", TrialState.QUEUED, "bogus", "COMPLETE"])
def test_finish_refuses_states_that_are_not_a_finish(store: Store, state: Any) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    run(store, tid)
    before = store.reads.get_trial(tid)
    with pytest.raises(InvalidTransition) as caught:
        finish(store, tid, 1, state)
    assert caught.value.from_state == "running"
    assert caught.value.to_state == str(state)
    assert f"running -> {state}" in str(caught.value)
    assert "complete, failed, pruned" in str(caught.value)
    assert store.reads.get_trial(tid) == before


def test_finish_cancelled_needs_a_stop_request(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    run(store, tid)
    with pytest.raises(InvalidTransition, match="running -> cancelled"):
        finish(store, tid, 1, "cancelled")
    store.admin.cancel_sweep(sweep_id)
    assert finish(store, tid, 1, "cancelled") is True
    assert store.reads.get_trial(tid)["state"] == "cancelled"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"extra": {"state": "complete"}}, "extra.state"),
        ({"extra": {"history": []}}, "extra.history"),
        ({"extra": {"$set": {"state": "queued"}}}, "extra"),
        ({"result": {"$inc": 1}}, "result"),
        ({"error": {"$ne": None}}, "error"),
    ],
)
def test_finish_refuses_fields_it_must_not_write(
    store: Store, kwargs: dict[str, Any], field: str
) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    run(store, tid)
    before = store.reads.get_trial(tid)
    with pytest.raises(InvalidQuery) as caught:
        finish(store, tid, 1, "complete", **kwargs)
    assert caught.value.field == field
    assert store.reads.get_trial(tid) == before


def test_finish_of_an_unknown_trial_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound):
        finish(store, "000000000000-0000000000000000", 1, "complete")


def test_fail_undelivered_ends_only_queued_trials_once(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    queued, running, done = trial_ids(sweep_id, points)[:3]
    run(store, running)
    run(store, done)
    assert finish(store, done, 1, "complete") is True
    ids = [queued, running, done, f"{sweep_id}-unknown"]
    assert store.admin.fail_undelivered(ids, "dropped by the broker") == [queued]
    assert store.admin.fail_undelivered(ids, "dropped by the broker") == []
    trial = store.reads.get_trial(queued)
    assert trial["state"] == "failed" and trial["error"] == "dropped by the broker"
    assert store.reads.get_trial(running)["state"] == "running"
    assert store.reads.get_trial(done)["state"] == "complete"
    counts = store.reads.counts(sweep_id)
    assert counts["failed"] == 1 and counts["running"] == 1 and counts["complete"] == 1
