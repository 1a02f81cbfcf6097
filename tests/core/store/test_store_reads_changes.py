"""Contract of the reads role (`core.store.roles.Reads`) for live pages: the change feed
(`changed_rows`), a running trial's curve (`metrics_after`), a sweep's pace (`throughput`).

Runs against the real server of the `mongo_url` fixture (SecantusDB, and a real mongod
when SWEEPSTACK_TEST_MONGO_URL is set); each test uses a database of its own and drops it.
"""

from __future__ import annotations

import pytest

from core.errors import InvalidQuery, NotFound
from core.states import TrialState
from core.store.store import Store
from tests.core import (
    WORKER,
    FakeClock,
    finish,
    heartbeat,
    make_sweep,
    report,
    run,
    trial_ids,
    width_spec,
)

FIELDS = ["state", "params", "objective", "worker.name", "config.model.hidden_units"]


def test_changed_rows_reads_only_the_fields_asked_for(store: Store, clock: FakeClock) -> None:
    sweep_id, points = make_sweep(store)
    rows, mark = store.reads.changed_rows(sweep_id, None, FIELDS)
    assert len(rows) == 36 and mark == clock.now
    first = rows[0]
    assert set(first) == {"_id", "index", "updated_at", "state", "params", "objective", "config"}
    assert set(first["config"]) == {"model"} and set(first["config"]["model"]) == {"hidden_units"}
    assert first["config"]["model"]["hidden_units"] == points[0].config["model"]["hidden_units"]
    assert first["params"]["model"]["hidden_units"] == points[0].params["model.hidden_units"]
    assert [r["index"] for r in rows] == list(range(36))


def test_changed_rows_follows_changes_in_change_order(store: Store, clock: FakeClock) -> None:
    sweep_id, points = make_sweep(store)
    ids = trial_ids(sweep_id, points)
    _, mark = store.reads.changed_rows(sweep_id, None, FIELDS)
    clock.advance(1)
    claimed = store.lifecycle.claim(ids[5], WORKER, stale_after=60)
    assert claimed is not None
    clock.advance(1)
    finish(store, ids[5], 1, TrialState.COMPLETE, result={"objective": 0.75})
    store.lifecycle.claim(ids[2], WORKER, stale_after=60)
    rows, mark2 = store.reads.changed_rows(sweep_id, mark, FIELDS)
    # In change order; changes at the same moment by index.
    assert [(r["index"], r["state"]) for r in rows] == [(2, "running"), (5, "complete")]
    assert rows[1]["objective"] == 0.75 and rows[1]["worker"] == {"name": WORKER["name"]}
    assert mark2 == clock.now
    assert store.reads.changed_rows(sweep_id, mark2, FIELDS)[0] == []
    again, mark3 = lagged(store, clock, 5).reads.changed_rows(sweep_id, mark2, FIELDS)
    assert [r["index"] for r in again] == [] and mark3 == mark2


def test_changed_rows_accepts_overlapping_paths(store: Store) -> None:
    sweep_id, _ = make_sweep(store)
    rows, _ = store.reads.changed_rows(
        sweep_id, None, ["config.model", "config.model.hidden_units"]
    )
    assert "activation" in rows[0]["config"]["model"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ("state", "must be a list of field paths"),
        (["$where"], "names must be identifiers"),
        (["params.$x"], "names must be identifiers"),
        ([3], "must be field paths"),
    ],
)
def test_changed_rows_refuses_what_is_not_a_field_path(
    store: Store, fields: object, message: str
) -> None:
    sweep_id, _ = make_sweep(store)
    with pytest.raises(InvalidQuery, match=message):
        store.reads.changed_rows(sweep_id, None, fields)  # type: ignore[arg-type]


def test_changed_rows_of_an_unknown_sweep_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound):
        store.reads.changed_rows("abcdef012345", None, FIELDS)
    with pytest.raises(InvalidQuery, match="since"):
        store.reads.changed_rows(make_sweep(store)[0], "yesterday", FIELDS)  # type: ignore[arg-type]


def test_metrics_after_gives_the_rows_after_a_position(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    trial_id = trial_ids(sweep_id, points)[0]
    assert store.lifecycle.claim(trial_id, WORKER, stale_after=60) is not None
    for epoch in (1, 2, 3):
        report(store, trial_id, 1, epoch, {"val_loss": 1 / epoch})
    assert [r["epoch"] for r in store.reads.metrics_after(trial_id)] == [1, 2, 3]
    assert [r["epoch"] for r in store.reads.metrics_after(trial_id, 1, 1)] == [2, 3]
    assert store.reads.metrics_after(trial_id, 1, 3) == []
    row = store.reads.metrics_after(trial_id, 1, 2)[0]
    assert set(row) == {"attempt", "epoch", "metrics", "reported_at"}
    assert row["metrics"] == {"val_loss": 1 / 3}
    with pytest.raises(InvalidQuery, match="epoch"):
        store.reads.metrics_after(trial_id, 1, -2)
    with pytest.raises(InvalidQuery, match="attempt"):
        store.reads.metrics_after(trial_id, True)  # type: ignore[arg-type]


def test_changed_rows_delivers_heartbeats_and_never_moves_the_watermark_back(
    store: Store, clock: FakeClock
) -> None:
    sweep_id, points = make_sweep(store)
    ids = trial_ids(sweep_id, points)
    everything, mark = store.reads.changed_rows(sweep_id, None, ["state"])
    assert len(everything) == 36 and "config" not in everything[0]
    assert mark == clock.now
    clock.advance(1)
    run(store, ids[3])
    clock.advance(1)
    heartbeat(store, ids[3], 1)
    run(store, ids[7])
    changed, mark2 = store.reads.changed_rows(sweep_id, mark, ["state"])
    assert [t["index"] for t in changed] == [3, 7] and mark2 == clock.now
    assert store.reads.changed_rows(sweep_id, mark2, ["state"])[0] == []

    again, mark3 = lagged(store, clock, 5).reads.changed_rows(sweep_id, mark2, ["state"])
    assert again == [] and mark3 == mark2  # a watermark never moves back
    with pytest.raises(InvalidQuery, match="since"):
        store.reads.changed_rows(sweep_id, "yesterday", ["state"])  # type: ignore[arg-type]


def lagged(store: Store, clock: FakeClock, seconds: float) -> Store:
    """Another store on the same database whose change feed repeats `seconds` of changes."""
    return Store(store.client, store.db.name, clock=clock, change_lag=seconds)


def end_trial(store: Store, trial_id: str, state: TrialState = TrialState.COMPLETE) -> None:
    claimed = store.lifecycle.claim(trial_id, WORKER, stale_after=60)
    assert claimed is not None
    report(store, trial_id, claimed["attempt"], 1, {"val_loss": 0.5})
    assert finish(store, trial_id, claimed["attempt"], state, result={"objective": 0.5})


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
