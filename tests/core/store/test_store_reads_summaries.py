"""Contract of the sweep summaries (`core.store.summaries`) behind the reads role: after any
sequence of lifecycle writes, what `Reads.best` and `Reads.sweep_rows` answer from them
equals a recomputation from every trial; a sweep without them gets them from its first read.

Runs against the real server of the `mongo_url` fixture (SecantusDB, and a real mongod
when SWEEPSTACK_TEST_MONGO_URL is set); each test uses a database of its own and drops it.
"""

from __future__ import annotations

import contextlib
import logging
import random
from typing import Any

import pytest

from core.errors import InvalidTransition, NotFound
from core.states import TrialState
from core.store import summaries
from core.store.records import finite_number
from core.store.store import Store
from tests.core import WORKER, FakeClock, finish, make_sweep, small_spec, trial_ids

FIELDS = list(summaries.ROW_FIELDS)


def recomputed_best(store: Store, sweep_id: str, k: int) -> list[tuple[int, float]]:
    """(index, objective) of the `k` best complete trials, from every trial."""
    docs, _ = store.reads.changed_rows(sweep_id, None, ["state", "objective"])
    direction = store.reads.get_sweep(sweep_id)["objective"]["direction"]
    sign = -1 if direction == "maximize" else 1
    done = [
        (d["index"], d["objective"])
        for d in docs
        if d["state"] == "complete" and finite_number(d.get("objective")) is not None
    ]
    done.sort(key=lambda item: (sign * item[1], item[0]))
    return done[:k]


def by_index(docs: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {d["index"]: d for d in docs}


def assert_summaries_match(store: Store, sweep_id: str) -> None:
    """`best` and `sweep_rows` agree with a read of every trial."""
    for k in (1, 3, 40):
        got = [(t["index"], t["objective"]) for t in store.reads.best(sweep_id, k)]
        assert got == recomputed_best(store, sweep_id, k), k
    fast, mark = store.reads.sweep_rows(sweep_id, FIELDS)
    full, full_mark = store.reads.changed_rows(sweep_id, None, FIELDS)
    assert by_index(fast) == by_index(full)
    assert len(fast) == len(full) and mark == full_mark


def random_step(store: Store, rng: random.Random, ids: list[str], clock: FakeClock) -> None:
    """One random lifecycle write on the sweep of `ids`."""
    clock.advance(rng.choice((0, 0.001, 1)))
    tid = rng.choice(ids)
    action = rng.choice(("claim", "claim", "finish", "finish", "finish", "retry", "stale"))
    if action == "claim":
        store.lifecycle.claim(tid, WORKER, stale_after=60)
    elif action == "finish":
        doc = store.reads.get_trial(tid, with_metrics=False)
        if doc["state"] != "running":
            return
        state = rng.choice(("complete", "complete", "complete", "failed", "pruned"))
        if doc.get("stop_requested"):
            state = "cancelled"
        objective = rng.choice((None, 0.5, 0.75, 0.9, round(rng.random(), 3)))
        finish(
            store,
            tid,
            doc["attempt"],
            state,
            result={"objective": objective} if state != "failed" else None,
            error="diverged\nat epoch 3" if state == "failed" else None,
            extra={"train_seconds": rng.random(), "device": "cpu"},
        )
    elif action == "retry":
        with contextlib.suppress(InvalidTransition):  # a cancelled sweep
            store.admin.retry_failed(ids[0].partition("-")[0])
    else:
        clock.advance(120)
        store.admin.requeue_stale(60)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_summaries_equal_a_recomputation_after_random_writes(
    store: Store, clock: FakeClock, seed: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="core")
    rng = random.Random(seed)
    sweep_id, points = make_sweep(store)
    loss_spec = small_spec(
        name="by-loss", objective={"metric": "val_loss", "direction": "minimize"}
    )
    other_id, other_points = make_sweep(store, loss_spec)
    ids, other = trial_ids(sweep_id, points), trial_ids(other_id, other_points)
    for step in range(240):
        random_step(store, rng, ids if step % 3 else other, clock)
        if step == 150:
            store.admin.cancel_sweep(other_id)
        if step % 60 == 59:
            assert_summaries_match(store, sweep_id)
            assert_summaries_match(store, other_id)
    assert_summaries_match(store, sweep_id)
    assert_summaries_match(store, other_id)
    # Every read came from the summaries: none was built again or fell back to the trials.
    assert not [
        r.message for r in caplog.records if "summaries" in r.message or "finish log" in r.message
    ]


def test_a_sweep_without_summaries_gets_them_on_first_read(store: Store, clock: FakeClock) -> None:
    rng = random.Random(7)
    sweep_id, points = make_sweep(store)
    ids = trial_ids(sweep_id, points)
    for _ in range(150):
        random_step(store, rng, ids, clock)
    summaries.clear(store.db, sweep_id)  # as a sweep made before summaries existed
    assert summaries.top_document(store.db, sweep_id) is None
    assert_summaries_match(store, sweep_id)
    assert summaries.top_document(store.db, sweep_id) is not None
    summaries.clear(store.db, sweep_id)
    fast, _ = store.reads.sweep_rows(sweep_id, FIELDS)  # the dashboard's read builds them too
    assert len(fast) == len(ids)
    assert summaries.top_document(store.db, sweep_id) is not None
    assert_summaries_match(store, sweep_id)


def test_a_lost_log_write_is_noticed_and_repaired(
    store: Store, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    sweep_id, points = make_sweep(store)
    ids = trial_ids(sweep_id, points)
    for i, tid in enumerate(ids):
        clock.advance(1)
        assert store.lifecycle.claim(tid, WORKER, stale_after=60) is not None
        finish(store, tid, 1, TrialState.COMPLETE, result={"objective": i / 100})
    # As if the process that finished the first trials died between trial and log write.
    store.db[summaries.COLLECTION].delete_one({"_id": f"{sweep_id}:log:{0:08d}"})
    clock.advance(60)
    assert_summaries_match(store, sweep_id)
    assert any("finish log accounts for 0 of 36 trials" in r.message for r in caplog.records)
    store.db[summaries.COLLECTION].update_one({"_id": sweep_id}, {"$set": {"top": []}})
    assert store.reads.best(sweep_id, 1) == []  # a summary left short answers short...
    summaries.clear(store.db, sweep_id)  # ...until it is cleared: the next read builds it
    assert_summaries_match(store, sweep_id)


def test_summaries_go_with_their_sweep(store: Store, clock: FakeClock) -> None:
    sweep_id, points = make_sweep(store)
    kept_id, kept_points = make_sweep(store)
    for tid in (trial_ids(sweep_id, points)[0], trial_ids(kept_id, kept_points)[0]):
        assert store.lifecycle.claim(tid, WORKER, stale_after=60) is not None
        finish(store, tid, 1, TrialState.COMPLETE, result={"objective": 0.5})
    store.admin.cancel_sweep(sweep_id)
    store.admin.delete_sweep(sweep_id)
    left = list(store.db[summaries.COLLECTION].find({}, {"sweep_id": 1}))
    assert {d["sweep_id"] for d in left} == {kept_id}
    with pytest.raises(NotFound):
        store.reads.best(sweep_id, 1)
    assert_summaries_match(store, kept_id)


def test_best_past_the_summary_reads_the_trials(store: Store, clock: FakeClock) -> None:
    spec = small_spec()
    sweep_id, points = make_sweep(store, spec)
    for i, tid in enumerate(trial_ids(sweep_id, points)):
        assert store.lifecycle.claim(tid, WORKER, stale_after=60) is not None
        finish(store, tid, 1, TrialState.COMPLETE, result={"objective": (i * 7) % 11})
    original = summaries.TOP_K
    summaries.TOP_K = 5
    try:
        summaries.clear(store.db, sweep_id)
        store.reads.best(sweep_id, 1)  # the first read of a sweep without summaries builds them
        assert len(summaries.top_document(store.db, sweep_id)["top"]) == 5
        assert_summaries_match(store, sweep_id)  # k = 40 > 5 reads every trial
    finally:
        summaries.TOP_K = original
