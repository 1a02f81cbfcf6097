"""Contract of the store reads the dashboard added: `changed_rows` and `metrics_after`.

Against the real server of the `mongo_url` fixture, each test on a database of its own.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from core.errors import InvalidQuery, NotFound
from core.states import TrialState
from core.store import Store
from tests.core import WORKER, FakeClock, complete, make_sweep, run, trial_ids

FIELDS = ["state", "params", "objective", "worker.name", "config.model.hidden_units"]


def test_changed_rows_reads_only_the_fields_asked_for(store: Store, clock: FakeClock) -> None:
    sweep_id, points = make_sweep(store)
    rows, mark = store.changed_rows(sweep_id, None, FIELDS)
    assert len(rows) == 36 and mark == clock.now
    first = rows[0]
    assert set(first) == {"_id", "index", "updated_at", "state", "params", "objective", "config"}
    assert set(first["config"]) == {"model"} and set(first["config"]["model"]) == {"hidden_units"}
    assert first["config"]["model"]["hidden_units"] == points[0].config["model"]["hidden_units"]
    assert first["params"]["model"]["hidden_units"] == points[0].params["model.hidden_units"]
    assert [r["index"] for r in rows] == list(range(36))


def test_changed_rows_follows_changes_like_changed_since(store: Store, clock: FakeClock) -> None:
    sweep_id, points = make_sweep(store)
    ids = trial_ids(sweep_id, points)
    _, mark = store.changed_rows(sweep_id, None, FIELDS)
    clock.advance(1)
    claimed = store.claim(ids[5], WORKER, stale_after=60)
    assert claimed is not None
    clock.advance(1)
    store.finish(ids[5], 1, TrialState.COMPLETE, result={"objective": 0.75})
    store.claim(ids[2], WORKER, stale_after=60)
    rows, mark2 = store.changed_rows(sweep_id, mark, FIELDS)
    # In change order; changes at the same moment by index.
    assert [(r["index"], r["state"]) for r in rows] == [(2, "running"), (5, "complete")]
    assert rows[1]["objective"] == 0.75 and rows[1]["worker"] == {"name": WORKER["name"]}
    assert mark2 == clock.now
    assert store.changed_rows(sweep_id, mark2, FIELDS)[0] == []
    store.change_lag = timedelta(seconds=5)
    again, mark3 = store.changed_rows(sweep_id, mark2, FIELDS)
    assert [r["index"] for r in again] == [] and mark3 == mark2


def test_changed_rows_accepts_overlapping_paths(store: Store) -> None:
    sweep_id, _ = make_sweep(store)
    rows, _ = store.changed_rows(sweep_id, None, ["config.model", "config.model.hidden_units"])
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
        store.changed_rows(sweep_id, None, fields)  # type: ignore[arg-type]


def test_changed_rows_of_an_unknown_sweep_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound):
        store.changed_rows("abcdef012345", None, FIELDS)
    with pytest.raises(InvalidQuery, match="since"):
        store.changed_rows(make_sweep(store)[0], "yesterday", FIELDS)  # type: ignore[arg-type]


def test_metrics_after_gives_the_rows_after_a_position(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    trial_id = trial_ids(sweep_id, points)[0]
    assert store.claim(trial_id, WORKER, stale_after=60) is not None
    for epoch in (1, 2, 3):
        store.report(trial_id, 1, epoch, {"val_loss": 1 / epoch})
    assert [r["epoch"] for r in store.metrics_after(trial_id)] == [1, 2, 3]
    assert [r["epoch"] for r in store.metrics_after(trial_id, 1, 1)] == [2, 3]
    assert store.metrics_after(trial_id, 1, 3) == []
    row = store.metrics_after(trial_id, 1, 2)[0]
    assert set(row) == {"attempt", "epoch", "metrics", "reported_at"}
    assert row["metrics"] == {"val_loss": 1 / 3}
    with pytest.raises(InvalidQuery, match="epoch"):
        store.metrics_after(trial_id, 1, -2)
    with pytest.raises(InvalidQuery, match="attempt"):
        store.metrics_after(trial_id, True)  # type: ignore[arg-type]


def test_changed_since_returns_what_changed_and_a_watermark(store: Store, clock: FakeClock) -> None:
    sweep_id, points = make_sweep(store)
    ids = trial_ids(sweep_id, points)
    everything, mark = store.changed_since(sweep_id, None)
    assert len(everything) == 36 and "config" not in everything[0]
    assert mark == clock.now
    clock.advance(1)
    run(store, ids[3])
    clock.advance(1)
    store.heartbeat(ids[3], 1)
    run(store, ids[7])
    changed, mark2 = store.changed_since(sweep_id, mark)
    assert [t["index"] for t in changed] == [3, 7] and mark2 == clock.now
    assert store.changed_since(sweep_id, mark2)[0] == []

    store.change_lag = timedelta(seconds=5)
    again, mark3 = store.changed_since(sweep_id, mark2)
    assert again == [] and mark3 == mark2  # a watermark never moves back
    with pytest.raises(InvalidQuery, match="since"):
        store.changed_since(sweep_id, "yesterday")  # type: ignore[arg-type]


def test_objective_by_param_summarises_complete_trials(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    by_width: dict[int, list[float]] = {}
    for i, (tid, point) in enumerate(zip(trial_ids(sweep_id, points), points[:12], strict=False)):
        objective = i / 10
        complete(store, tid, objective)
        by_width.setdefault(point.params["model.hidden_units"], []).append(objective)
    run(store, trial_ids(sweep_id, points)[12])
    rows = store.objective_by_param(sweep_id, "model.hidden_units")
    assert [r["value"] for r in rows] == sorted(by_width)
    for row in rows:
        values = by_width[row["value"]]
        assert row["n"] == len(values)
        assert row["mean"] == pytest.approx(sum(values) / len(values))
        assert (row["min"], row["max"]) == (min(values), max(values))
    assert store.objective_by_param(sweep_id, "training.lr") == [
        {"value": None, "mean": pytest.approx(0.55), "min": 0.0, "max": 1.1, "n": 12}
    ]
    with pytest.raises(InvalidQuery, match="param"):
        store.objective_by_param(sweep_id, "$objective")


def test_finished_per_minute_counts_finishes_in_each_minute(store: Store, clock: FakeClock) -> None:
    sweep_id, points = make_sweep(store)
    ids = trial_ids(sweep_id, points)
    complete(store, ids[0], 0.1)
    clock.advance(60)
    complete(store, ids[1], 0.2)
    run(store, ids[2])
    store.finish(ids[2], 1, "failed", error="x")
    clock.advance(120)
    store.cancel_sweep(sweep_id)
    rows = store.finished_per_minute(sweep_id, minutes=5)
    assert [r["n"] for r in rows] == [0, 1, 2, 0, 0]
    assert rows[-1]["minute"] == clock.now.replace(second=0, microsecond=0)
    with pytest.raises(InvalidQuery, match="minutes"):
        store.finished_per_minute(sweep_id, minutes=0)
