"""Contract of the feeding role (`core.store.roles.Feeding`): a sweep stored with its first
window and fed the rest, planned trials counted as queued, the window being sent, the
feeding lease, and what a feeder reads back.

Runs against the real server of the `mongo_url` fixture (SecantusDB, and a real mongod
when SWEEPSTACK_TEST_MONGO_URL is set); each test uses a database of its own and drops it.
"""

from __future__ import annotations

from core.states import TrialState
from core.store.store import Store
from scheduler.expand import TrialPoint, expand
from tests.core import FakeClock, finish, report, run, small_spec


def fed_sweep(store: Store, first: int = 4) -> tuple[str, list[TrialPoint]]:
    """A sweep of `small_spec` (36 trials) stored with its first `first` trials only."""
    spec = small_spec()
    points = expand(spec, with_config=True)
    sweep_id = store.admin.create_sweep(spec, points[:first], total=len(points))
    return sweep_id, points


def test_planned_trials_count_as_queued_until_added(store: Store) -> None:
    sweep_id, points = fed_sweep(store)
    sweep = store.reads.get_sweep(sweep_id)
    assert sweep["planned"] == 32 and sweep["trial_count"] == 36
    assert sweep["counts"]["queued"] == 36
    assert sweep["sending"] == [f"{sweep_id}-{p.id}" for p in points[:4]]
    store.feeding.end_sending(sweep_id)
    assert store.reads.get_sweep(sweep_id)["sending"] == []

    window = points[4:10]
    ids = [f"{sweep_id}-{p.id}" for p in window]
    store.feeding.begin_sending(sweep_id, ids)
    assert store.feeding.add_trials(sweep_id, small_spec(), window) == ids
    assert store.feeding.add_trials(sweep_id, small_spec(), window) == []  # idempotent
    sweep = store.reads.get_sweep(sweep_id)
    assert sweep["sending"] == ids and sweep["planned"] == 26
    assert sweep["counts"]["queued"] == 36 and sweep["max_index"] == 35
    assert store.admin.recount(sweep_id) == sweep["counts"]


def test_shrink_and_repair_the_plan(store: Store) -> None:
    sweep_id, points = fed_sweep(store)
    assert store.feeding.shrink_plan(sweep_id, 2) == 2
    sweep = store.reads.get_sweep(sweep_id)
    assert sweep["planned"] == 30 and sweep["trial_count"] == 34
    assert sweep["counts"]["queued"] == 34
    # A feeder killed between creating trials and moving the count leaves it high.
    store.db["trials"].insert_many(
        [
            {**doc, "_id": f"{sweep_id}-{p.id}"}
            for p in points[4:6]
            for doc in [{"sweep_id": sweep_id, "index": p.index, "state": "queued"}]
        ]
    )
    store.feeding.repair_plan(sweep_id, total=34, created=6)
    sweep = store.reads.get_sweep(sweep_id)
    assert sweep["planned"] == 28 and sweep["counts"]["queued"] == 34
    assert store.feeding.shrink_plan(sweep_id) == 28  # all of it
    assert store.feeding.shrink_plan(sweep_id) == 0
    assert store.reads.get_sweep(sweep_id)["trial_count"] == 6


def test_a_cancelled_sweep_drops_its_plan_and_cancels_what_is_added(store: Store) -> None:
    sweep_id, points = fed_sweep(store)
    store.admin.cancel_sweep(sweep_id)
    sweep = store.reads.get_sweep(sweep_id)
    assert sweep["planned"] == 0 and sweep["trial_count"] == 4
    assert store.feeding.unfinished_sweeps() == []
    added = store.feeding.add_trials(sweep_id, small_spec(), points[4:6])
    assert len(added) == 2
    assert {store.reads.get_trial(t)["state"] for t in added} == {"cancelled"}
    assert store.reads.counts(sweep_id)["cancelled"] == 6
    assert store.admin.recount(sweep_id) == store.reads.counts(sweep_id)


def test_one_scheduler_holds_the_lease_until_it_expires_or_is_released(
    store: Store, clock: FakeClock
) -> None:
    sweep_id, _ = fed_sweep(store)
    assert store.feeding.take_lease(sweep_id, "a", 10)
    assert not store.feeding.take_lease(sweep_id, "b", 10)
    assert store.feeding.take_lease(sweep_id, "a", 10)  # renewed
    assert store.reads.get_sweep(sweep_id)["lease"] == store.feeding.lease_for("a", 10)
    clock.advance(11)
    assert store.feeding.take_lease(sweep_id, "b", 10)  # expired: taken over
    store.feeding.release_lease(sweep_id, "a")  # not a's: nothing happens
    assert not store.feeding.take_lease(sweep_id, "a", 10)
    store.feeding.release_lease(sweep_id, "b")
    assert store.feeding.take_lease(sweep_id, "a", 10)


def test_what_a_feeder_reads_back(store: Store) -> None:
    sweep_id, points = fed_sweep(store)
    ids = [f"{sweep_id}-{p.id}" for p in points[:4]]
    assert [d["_id"] for d in store.feeding.unfinished_sweeps()] == [sweep_id]
    docs = store.feeding.feed_trials(sweep_id)
    assert sorted(d["_id"] for d in docs) == sorted(ids) and "config" in docs[0]
    some = store.feeding.feed_trials(sweep_id, ids[:2])
    assert sorted(d["_id"] for d in some) == sorted(ids[:2]) and "config" not in some[0]
    store.feeding.set_study_attrs(sweep_id, {"qmc": 3})
    assert store.reads.get_sweep(sweep_id)["study_attrs"] == {"qmc": 3}

    run(store, ids[0])
    for epoch in (0, 1, 2):
        report(store, ids[0], 1, epoch, {"val_accuracy": epoch / 10})
    rows = store.feeding.epoch_rows({ids[0]: 1, ids[1]: 1}, {ids[0]: 0})
    assert rows == {ids[0]: {1: {"val_accuracy": 0.1}, 2: {"val_accuracy": 0.2}}, ids[1]: {}}
    assert store.feeding.epoch_rows({ids[0]: 2}, {}) == {ids[0]: {}}  # another attempt's
    finish(store, ids[0], 1, TrialState.COMPLETE, result={"objective": 0.2})
    assert store.feeding.epoch_rows({}, {}) == {}
