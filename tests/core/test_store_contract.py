"""The store contract: every call of `core.store.Store`, its results and its refusals.

Runs against the real server of the `mongo_url` fixture (SecantusDB, and a real mongod
when SWEEPSTACK_TEST_MONGO_URL is set); each test uses a database of its own and drops it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from core.errors import (
    ConfigError,
    InvalidQuery,
    InvalidTransition,
    NotFound,
    StoreUnavailable,
    SweepstackError,
)
from core.records import flatten_params
from core.states import ALL_STATES, Heartbeat, TrialState
from core.store import Store
from scheduler.expand import TrialPoint, expand
from tests.core import WORKER, FakeClock, make_sweep, open_store, small_spec, trial_ids
from tests.services import free_port


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(mongo_url: str, db_name: str, clock: FakeClock) -> Iterator[Store]:
    yield from open_store(mongo_url, db_name, clock)


def run(store: Store, trial_id: str, *, stale_after: float = 60) -> dict[str, Any]:
    claimed = store.claim(trial_id, WORKER, stale_after=stale_after)
    assert claimed is not None
    return claimed


def complete(store: Store, trial_id: str, objective: float | None, **result: Any) -> None:
    attempt = run(store, trial_id)["attempt"]
    outcome = {"objective": objective, **result}
    assert store.finish(trial_id, attempt, TrialState.COMPLETE, result=outcome)


# -- connection ------------------------------------------------------------------------


def test_ping_and_idempotent_indexes(store: Store) -> None:
    assert 0 < store.ping() < 5
    store.ensure_indexes()
    store.ensure_indexes()
    names = set(store.db["trials"].index_information())
    assert {"sweep_index", "state_sweep_index", "sweep_updated"} <= names
    assert "trial_attempt_epoch" in store.db["metrics"].index_information()


def test_unreachable_server_raises_store_unavailable() -> None:
    url = f"mongodb://127.0.0.1:{free_port()}/?retryWrites=false"
    store = Store.connect(url, "nothing", timeout_ms=200)
    try:
        with pytest.raises(StoreUnavailable):
            store.ping()
        with pytest.raises(StoreUnavailable):
            store.get_sweep("abcdef012345")
        with pytest.raises(StoreUnavailable):
            store.claim("abc-def", WORKER, stale_after=60)
    finally:
        store.close()


def test_malformed_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="store URL"):
        Store.connect("http://not-mongo:27017")


# -- create ----------------------------------------------------------------------------


def test_create_sweep_stores_the_sweep_and_queued_trials(store: Store, clock: FakeClock) -> None:
    spec = small_spec()
    sweep_id, points = make_sweep(store, spec, owner="alice")
    assert re.fullmatch(r"[0-9a-f]{12}", sweep_id)
    sweep = store.get_sweep(sweep_id)
    assert sweep["name"] == "store-test"
    assert sweep["owner"] == "alice"
    assert sweep["spec"] == spec.document
    assert sweep["objective"] == {"metric": "val_accuracy", "direction": "maximize"}
    assert sweep["trial_count"] == 36
    assert sweep["created_at"] == sweep["updated_at"] == clock.now
    assert sweep["counts"] == {s.value: (36 if s is TrialState.QUEUED else 0) for s in ALL_STATES}

    point = points[5]
    trial = store.get_trial(f"{sweep_id}-{point.id}", with_metrics=False)
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
    store.insert_batch = 5
    sweep_id = store.create_sweep(spec, bare)
    trials, _ = store.trials(sweep_id, limit=100)
    assert [t["index"] for t in trials] == list(range(36))
    full = expand(spec, with_config=True)
    assert [t["config"] for t in trials] == [p.config for p in full]


def test_create_sweep_refuses_duplicate_points(store: Store) -> None:
    spec = small_spec()
    points = expand(spec, with_config=True)
    with pytest.raises(InvalidQuery, match="unique"):
        store.create_sweep(spec, [points[0], points[0]])
    assert store.list_sweeps()[0] == []


# -- claim -----------------------------------------------------------------------------


def test_claim_moves_a_queued_trial_to_running_once(store: Store, clock: FakeClock) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    clock.advance(5)
    claimed = store.claim(tid, WORKER, stale_after=60)
    assert claimed is not None
    assert claimed["state"] == "running" and claimed["attempt"] == 1
    assert claimed["worker"] == WORKER
    assert claimed["started_at"] == claimed["heartbeat_at"] == claimed["updated_at"] == clock.now
    assert store.claim(tid, WORKER, stale_after=60) is None
    assert store.counts(sweep_id)["running"] == 1
    assert store.counts(sweep_id)["queued"] == 35


def test_claim_of_an_unknown_trial_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound, match="trial"):
        store.claim("000000000000-0000000000000000", WORKER, stale_after=60)


def test_claim_takes_over_an_attempt_whose_heartbeat_is_stale(
    store: Store, clock: FakeClock
) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    first = run(store, tid)
    clock.advance(30)
    assert store.claim(tid, WORKER, stale_after=60) is None  # still fresh
    clock.advance(31)
    other = {"host": "other", "pid": 7, "name": "worker-2"}
    second = store.claim(tid, other, stale_after=60)
    assert second is not None and second["attempt"] == 2 and second["worker"] == other
    [lost] = second["history"]
    assert lost["attempt"] == 1 and lost["state"] == "lost" and lost["worker"] == WORKER
    assert lost["started_at"] == first["started_at"] and lost["finished_at"] == clock.now
    assert "heartbeat" in lost["error"]
    assert store.counts(sweep_id)["running"] == 1


def test_claim_takes_over_an_attempt_known_to_be_dead(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    run(store, tid)
    assert store.claim(tid, WORKER, stale_after=60, takeover_attempt=5) is None
    taken = store.claim(tid, WORKER, stale_after=60, takeover_attempt=1)
    assert taken is not None and taken["attempt"] == 2
    assert [h["state"] for h in taken["history"]] == ["lost"]
    assert store.finish(tid, 1, "complete") is False  # the dead attempt cannot finish
    assert store.heartbeat(tid, 1) is Heartbeat.LOST


def test_claim_of_a_terminal_trial_is_none(store: Store, clock: FakeClock) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    complete(store, tid, 0.5)
    before = store.get_trial(tid)
    clock.advance(3600)
    assert store.claim(tid, WORKER, stale_after=0, takeover_attempt=1) is None
    assert store.get_trial(tid) == before


# -- heartbeat -------------------------------------------------------------------------


def test_heartbeat_says_ok_stop_or_lost(store: Store, clock: FakeClock) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    run(store, tid)
    clock.advance(10)
    beat = store.heartbeat(tid, 1)
    assert beat is Heartbeat.OK and beat == "ok" and bool(beat)
    assert store.get_trial(tid)["heartbeat_at"] == clock.now
    assert store.heartbeat(tid, 2) is Heartbeat.LOST
    assert not store.heartbeat(tid, 2)
    store.cancel_sweep(sweep_id)
    stop = store.heartbeat(tid, 1)
    assert stop is Heartbeat.STOP and stop == "stop" and not stop
    with pytest.raises(NotFound):
        store.heartbeat("000000000000-0000000000000000", 1)
    with pytest.raises(InvalidQuery, match="attempt"):
        store.heartbeat(tid, 0)


# -- report ----------------------------------------------------------------------------


def test_report_keeps_one_row_per_attempt_and_epoch(store: Store, clock: FakeClock) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    run(store, tid)
    store.report(tid, 1, 1, {"val_loss": 0.9})
    store.report(tid, 1, 0, {"val_loss": 1.0})
    store.report(tid, 1, 0, {"val_loss": 1.0})
    store.report(tid, 1, 0, {"val_loss": 123.0})  # a late duplicate never overwrites
    assert store.get_trial(tid)["progress"] == {"epoch": 0, "metrics": {"val_loss": 123.0}}
    clock.advance(120)
    assert store.claim(tid, WORKER, stale_after=60) is not None  # attempt 2
    store.report(tid, 2, 0, {"val_loss": 0.8})
    store.report(tid, 1, 2, {"val_loss": 0.7})  # the lost attempt still reports; kept apart
    rows = store.get_trial(tid)["metrics"]
    assert [(r["attempt"], r["epoch"], r["metrics"]["val_loss"]) for r in rows] == [
        (1, 0, 1.0),
        (1, 1, 0.9),
        (1, 2, 0.7),
        (2, 0, 0.8),
    ]
    assert store.db["metrics"].count_documents({"trial_id": tid}) == 4


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
        store.report(tid, attempt, epoch, metrics)
    assert caught.value.field == field
    assert store.db["metrics"].count_documents({}) == 0


def test_report_for_an_unknown_trial_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound):
        store.report("000000000000-0000000000000000", 1, 0, {"val_loss": 1.0})


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
    assert store.finish(
        tid, 1, "complete", result={"val_accuracy": 0.93, "objective": 0.93}, extra=extra
    )
    done = store.get_trial(tid, with_metrics=False)
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
    assert store.finish(tid, 1, "failed", error="again?") is False
    assert store.get_trial(tid, with_metrics=False) == done
    assert store.counts(sweep_id)["complete"] == 1 and store.counts(sweep_id)["running"] == 0


def test_finish_by_a_queued_trial_or_a_stale_attempt_is_a_no_op(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    first, second = trial_ids(sweep_id, points)[:2]
    assert store.finish(first, 1, "complete") is False
    run(store, second)
    assert store.finish(second, 2, "complete") is False
    assert store.get_trial(second)["state"] == "running"


def test_finish_failed_keeps_the_error(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    run(store, tid)
    assert store.finish(tid, 1, TrialState.FAILED, error="loss became NaN at epoch 3")
    trial = store.get_trial(tid)
    assert trial["state"] == "failed" and trial["error"] == "loss became NaN at epoch 3"
    assert trial["history"][0]["error"] == "loss became NaN at epoch 3"


def test_finish_takes_the_objective_from_the_sweep_metric(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    first, second, third = trial_ids(sweep_id, points)[:3]
    run(store, first)
    store.finish(first, 1, "complete", result={"val_accuracy": 0.8, "val_loss": 0.4})
    assert store.get_trial(first)["objective"] == 0.8
    run(store, second)
    store.finish(second, 1, "complete", result={"objective": float("nan")})
    assert store.get_trial(second)["objective"] is None
    run(store, third)
    store.finish(third, 1, "pruned")
    assert store.get_trial(third)["objective"] is None


@pytest.mark.parametrize("state", ["queued", "running", TrialState.QUEUED, "bogus", "COMPLETE"])
def test_finish_refuses_states_that_are_not_a_finish(store: Store, state: Any) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    run(store, tid)
    before = store.get_trial(tid)
    with pytest.raises(InvalidTransition) as caught:
        store.finish(tid, 1, state)
    assert caught.value.from_state == "running"
    assert caught.value.to_state == str(state)
    assert f"running -> {state}" in str(caught.value)
    assert "complete, failed, pruned" in str(caught.value)
    assert store.get_trial(tid) == before


def test_finish_cancelled_needs_a_stop_request(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    run(store, tid)
    with pytest.raises(InvalidTransition, match="running -> cancelled"):
        store.finish(tid, 1, "cancelled")
    store.cancel_sweep(sweep_id)
    assert store.finish(tid, 1, "cancelled") is True
    assert store.get_trial(tid)["state"] == "cancelled"


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
    before = store.get_trial(tid)
    with pytest.raises(InvalidQuery) as caught:
        store.finish(tid, 1, "complete", **kwargs)
    assert caught.value.field == field
    assert store.get_trial(tid) == before


def test_finish_of_an_unknown_trial_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound):
        store.finish("000000000000-0000000000000000", 1, "complete")


# -- cancel, requeue, retry ------------------------------------------------------------


def test_cancel_sweep_cancels_queued_and_asks_running_to_stop(
    store: Store, clock: FakeClock
) -> None:
    sweep_id, points = make_sweep(store)
    ids = trial_ids(sweep_id, points)
    complete(store, ids[0], 0.5)
    run(store, ids[1])
    done = store.get_trial(ids[0])
    clock.advance(1)
    assert store.cancel_sweep(sweep_id) == {"cancelled": 34, "stopping": 1}
    assert store.get_trial(ids[0]) == done
    assert store.get_trial(ids[1])["stop_requested"] is True
    assert store.get_trial(ids[2])["state"] == "cancelled"
    assert store.get_sweep(sweep_id)["cancelled_at"] == clock.now
    assert store.counts(sweep_id) == {
        "queued": 0,
        "running": 1,
        "complete": 1,
        "failed": 0,
        "pruned": 0,
        "cancelled": 34,
    }
    assert store.cancel_sweep(sweep_id) == {"cancelled": 0, "stopping": 0}
    with pytest.raises(NotFound):
        store.cancel_sweep("000000000000")


def test_a_stopping_trial_whose_worker_died_ends_cancelled(store: Store, clock: FakeClock) -> None:
    sweep_id, points = make_sweep(store)
    first, second = trial_ids(sweep_id, points)[:2]
    run(store, first)
    run(store, second)
    store.cancel_sweep(sweep_id)
    clock.advance(600)
    assert store.claim(first, WORKER, stale_after=60) is None
    assert store.requeue_stale(60) == []
    for tid in (first, second):
        trial = store.get_trial(tid)
        assert trial["state"] == "cancelled"
        assert [h["state"] for h in trial["history"]] == ["lost"]
    assert store.counts(sweep_id)["cancelled"] == 36
    assert store.counts(sweep_id) == store.recount(sweep_id)


def test_requeue_stale_puts_lost_attempts_back_in_the_queue(store: Store, clock: FakeClock) -> None:
    sweep_id, points = make_sweep(store)
    stale, fresh = trial_ids(sweep_id, points)[:2]
    other_sweep, other_points = make_sweep(store)
    other = trial_ids(other_sweep, other_points)[0]
    run(store, stale)
    run(store, other)
    clock.advance(100)
    run(store, fresh)
    assert store.requeue_stale(60, sweep_id=sweep_id) == [stale]
    trial = store.get_trial(stale)
    assert trial["state"] == "queued" and trial["attempt"] == 1 and trial["worker"] is None
    assert trial["history"][0]["state"] == "lost" and trial["history"][0]["attempt"] == 1
    assert store.get_trial(fresh)["state"] == "running"
    assert store.get_trial(other)["state"] == "running"
    assert store.heartbeat(stale, 1) is Heartbeat.LOST
    assert store.finish(stale, 1, "complete") is False
    assert run(store, stale)["attempt"] == 2
    assert store.requeue_stale(60) == [other]
    assert store.counts(sweep_id) == store.recount(sweep_id)
    with pytest.raises(InvalidQuery, match="stale_after"):
        store.requeue_stale(-1)


def test_retry_failed_queues_failed_trials_and_keeps_their_errors(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    failed, completed = trial_ids(sweep_id, points)[:2]
    run(store, failed)
    store.finish(failed, 1, "failed", error="out of memory")
    complete(store, completed, 0.7)
    assert store.retry_failed(sweep_id) == [failed]
    trial = store.get_trial(failed)
    assert trial["state"] == "queued" and trial["error"] is None and trial["finished_at"] is None
    assert trial["history"][0]["state"] == "failed"
    assert trial["history"][0]["error"] == "out of memory"
    again = run(store, failed)
    assert again["attempt"] == 2
    assert store.get_trial(completed)["state"] == "complete"
    assert store.retry_failed(sweep_id) == []
    store.cancel_sweep(sweep_id)
    with pytest.raises(InvalidTransition, match="cancelled"):
        store.retry_failed(sweep_id)


# -- sweeps ----------------------------------------------------------------------------


def test_list_sweeps_newest_first_by_owner_with_a_cursor(store: Store, clock: FakeClock) -> None:
    made = []
    for owner in ("alice", "bob", "alice", "alice"):
        made.append(make_sweep(store, owner=owner)[0])
        clock.advance(1)
    page, cursor = store.list_sweeps(limit=3)
    assert [s["_id"] for s in page] == made[::-1][:3]
    assert all(s["counts"]["queued"] == 36 for s in page)
    rest, end = store.list_sweeps(limit=3, cursor=cursor)
    assert [s["_id"] for s in rest] == [made[0]] and end is None
    mine, cursor = store.list_sweeps(owner="alice", limit=2)
    more, end = store.list_sweeps(owner="alice", limit=2, cursor=cursor)
    assert [s["_id"] for s in mine + more] == [made[3], made[2], made[0]] and end is None
    with pytest.raises(InvalidQuery, match="cursor"):
        store.list_sweeps(owner="bob", cursor=cursor)


def test_get_sweep_is_not_found_when_missing_or_not_the_owners(store: Store) -> None:
    sweep_id, _ = make_sweep(store, owner="alice")
    assert store.get_sweep(sweep_id, owner="alice")["_id"] == sweep_id
    with pytest.raises(NotFound, match="sweep"):
        store.get_sweep(sweep_id, owner="mallory")
    with pytest.raises(NotFound):
        store.get_sweep("000000000000")
    with pytest.raises(InvalidQuery, match="sweep_id"):
        store.get_sweep({"$ne": None})  # type: ignore[arg-type]


def test_counts_name_every_state_and_recount_repairs_them(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    ids = trial_ids(sweep_id, points)
    complete(store, ids[0], 0.1)
    run(store, ids[1])
    store.finish(ids[1], 1, "pruned")
    run(store, ids[2])
    expected = {"queued": 33, "running": 1, "complete": 1, "failed": 0, "pruned": 1, "cancelled": 0}
    assert store.counts(sweep_id) == expected
    store.db["sweeps"].update_one({"_id": sweep_id}, {"$inc": {"counts.queued": 7}})
    assert store.counts(sweep_id)["queued"] == 40
    assert store.recount(sweep_id) == expected
    assert store.counts(sweep_id) == expected


# -- trial pages -----------------------------------------------------------------------


def _all_pages(store: Store, sweep_id: str, limit: int = 7, **query: Any) -> list[dict]:
    out: list[dict] = []
    cursor = None
    while True:
        page, cursor = store.trials(sweep_id, limit=limit, cursor=cursor, **query)
        assert len(page) <= limit
        out.extend(page)
        if cursor is None:
            return out
        assert len(page) == limit


def _expected(trials: list[dict], value: Any, descending: bool) -> list[int]:
    """Indexes in MongoDB's order for values that are None, numbers or strings."""

    def key(t: dict) -> tuple:
        v = value(t)
        bracket = 0 if v is None else 1 if isinstance(v, int | float) else 2
        return (bracket, v if v is not None else 0, t["index"])

    return [t["index"] for t in sorted(trials, key=key, reverse=descending)]


@pytest.fixture
def finished_sweep(store: Store) -> tuple[str, list[dict]]:
    """A sweep with complete (objectives with ties), failed, running and queued trials."""
    sweep_id, points = make_sweep(store)
    ids = trial_ids(sweep_id, points)
    for i, tid in enumerate(ids[:20]):
        if i % 5 == 4:
            run(store, tid)
            store.finish(tid, 1, "failed", error="boom", extra={"train_seconds": float(i)})
        else:
            attempt = run(store, tid)["attempt"]
            result = {"objective": round((i * 7 % 10) / 10, 1), "val_loss": 1.0 - i / 100}
            store.finish(
                tid, attempt, "complete", result=result, extra={"train_seconds": float(i % 3)}
            )
    for tid in ids[20:24]:
        run(store, tid)
    trials, _ = store.trials(sweep_id, limit=1000)
    return sweep_id, trials


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize(
    ("sort", "value"),
    [
        ("index", lambda t: t["index"]),
        ("objective", lambda t: t["objective"]),
        ("train_seconds", lambda t: t["train_seconds"]),
        ("result.val_loss", lambda t: (t["result"] or {}).get("val_loss")),
        ("training.momentum", lambda t: t["params"]["training"].get("momentum")),
        ("model.activation", lambda t: t["params"]["model"]["activation"]),
    ],
)
def test_trial_pages_cover_the_sweep_once_in_order(
    store: Store, finished_sweep: tuple[str, list[dict]], sort: str, value: Any, descending: bool
) -> None:
    sweep_id, trials = finished_sweep
    paged = _all_pages(store, sweep_id, sort=sort, descending=descending)
    assert [t["index"] for t in paged] == _expected(trials, value, descending)


@pytest.mark.parametrize(
    "query",
    [
        {"state": "complete"},
        {"state": ["failed", "running"]},
        {"state": "queued", "descending": True},
        {"params": {"model.activation": "relu"}},
        {"params": {"training.momentum": None}},
        {"params": {"training.momentum": 0.9, "model.hidden_units": 64}},
        {"state": "complete", "params": {"model.hidden_layers": 2}, "sort": "objective"},
        {"params": {"model.activation": "gelu"}},
    ],
)
def test_trial_pages_filter_by_state_and_params(
    store: Store, finished_sweep: tuple[str, list[dict]], query: dict[str, Any]
) -> None:
    sweep_id, trials = finished_sweep
    states = query.get("state")
    states = [states] if isinstance(states, str) else states
    params = query.get("params", {})

    def wanted(t: dict) -> bool:
        flat = flatten_params(t["params"])
        return (states is None or t["state"] in states) and all(
            flat.get(path) == v and type(flat.get(path)) is type(v)
            if v is not None
            else path not in flat
            for path, v in params.items()
        )

    kept = [t for t in trials if wanted(t)]
    sort = query.get("sort", "index")
    value = (lambda t: t["objective"]) if sort == "objective" else (lambda t: t["index"])
    paged = _all_pages(store, sweep_id, limit=4, **query)
    assert [t["index"] for t in paged] == _expected(kept, value, query.get("descending", False))


def test_trial_pages_order_mixed_types_as_mongodb_does(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    ids = trial_ids(sweep_id, points)
    notes: list[Any] = ["b", 2, None, True, "a", 1.5, False, [3, 0.5], {"k": 1}]
    for tid, note in zip(ids, notes, strict=False):
        run(store, tid)
        store.finish(tid, 1, "complete", result={"note": note})
    asc = _all_pages(store, sweep_id, limit=2, sort="result.note", state="complete")
    # null < numbers (an array by its smallest element) < strings < objects < booleans
    assert [t["result"]["note"] for t in asc] == [
        None,
        [3, 0.5],
        1.5,
        2,
        "a",
        "b",
        {"k": 1},
        False,
        True,
    ]
    desc = _all_pages(
        store, sweep_id, limit=2, sort="result.note", state="complete", descending=True
    )
    assert [t["result"]["note"] for t in desc] == [
        True,
        False,
        {"k": 1},
        "b",
        "a",
        [3, 0.5],
        2,
        1.5,
        None,
    ]


def test_a_cursor_keeps_its_place_while_trials_change(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    ids = trial_ids(sweep_id, points)
    _, cursor = store.trials(sweep_id, state="queued", limit=10)
    for tid in ids[:5]:
        run(store, tid)  # trials already seen leave the queued state
    second, _ = store.trials(sweep_id, state="queued", limit=10, cursor=cursor)
    assert [t["index"] for t in second] == list(range(10, 20))


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"params": {"model.hidden_units": {"$gt": 0}}}, "params.model.hidden_units"),
        ({"params": {"model.hidden_units": [64]}}, "params.model.hidden_units"),
        ({"params": {"model.activation": "$where"}}, "params.model.activation"),
        ({"params": {"$where": "1"}}, "params.$where"),
        ({"params": {"model.$gt": 1}}, "params.model.$gt"),
        ({"params": {"model": {"hidden_units": 64}}}, "params.model"),
        ({"params": {"model.hidden_unitz": 64}}, "params.model.hidden_unitz"),
        ({"params": {"config.model.hidden_units": 64}}, "params.config.model.hidden_units"),
        ({"params": "model.hidden_units=64"}, "params"),
        ({"state": {"$ne": "queued"}}, "state"),
        ({"state": ["queued", {"$gt": ""}]}, "state"),
        ({"state": "done"}, "state"),
        ({"sort": "$natural"}, "sort"),
        ({"sort": "result.$gt"}, "sort"),
        ({"sort": "result.a.b"}, "sort"),
        ({"sort": "config.model.hidden_units"}, "sort"),
        ({"sort": {"index": 1}}, "sort"),
        ({"limit": 0}, "limit"),
        ({"limit": 100_000}, "limit"),
        ({"cursor": "not a cursor"}, "cursor"),
        ({"cursor": "eyJxIjogMX0"}, "cursor"),
    ],
)
def test_trial_pages_refuse_operators_and_unknown_fields(
    store: Store, query: dict[str, Any], field: str
) -> None:
    sweep_id, _ = make_sweep(store)
    with pytest.raises(InvalidQuery) as caught:
        store.trials(sweep_id, **query)
    assert caught.value.field == field
    assert isinstance(caught.value, SweepstackError)
    assert caught.value.problems[0].path == field
    assert field in str(caught.value)


def test_a_cursor_is_only_good_for_its_own_query(store: Store) -> None:
    sweep_id, _ = make_sweep(store)
    _, cursor = store.trials(sweep_id, sort="objective", limit=5)
    with pytest.raises(InvalidQuery, match="different query"):
        store.trials(sweep_id, sort="index", limit=5, cursor=cursor)
    with pytest.raises(InvalidQuery, match="different query"):
        store.trials(sweep_id, sort="objective", state="queued", limit=5, cursor=cursor)


def test_trials_of_an_unknown_sweep_are_not_found(store: Store) -> None:
    with pytest.raises(NotFound):
        store.trials("000000000000")


# -- best, one trial, changes, aggregates ----------------------------------------------


def test_best_follows_the_objective_direction(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    ids = trial_ids(sweep_id, points)
    for tid, objective in zip(ids, [0.5, 0.9, None, 0.7, 0.9], strict=False):
        complete(store, tid, objective)
    run(store, ids[5])
    store.finish(ids[5], 1, "failed", result={"objective": 1.0})
    assert [t["index"] for t in store.best(sweep_id, 3)] == [1, 4, 3]
    assert [t["objective"] for t in store.best(sweep_id)] == [0.9, 0.9, 0.7, 0.5]

    loss = small_spec(name="by-loss", objective={"metric": "val_loss", "direction": "minimize"})
    loss_id, loss_points = make_sweep(store, loss)
    for tid, value in zip(trial_ids(loss_id, loss_points), [0.3, None, 0.1, 0.2], strict=False):
        run(store, tid)
        store.finish(tid, 1, "complete", result={"val_loss": value})
    assert [t["objective"] for t in store.best(loss_id, 2)] == [0.1, 0.2]
    with pytest.raises(InvalidQuery, match="k"):
        store.best(sweep_id, 0)


def test_get_trial_with_and_without_metrics(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    run(store, tid)
    store.report(tid, 1, 0, {"val_loss": 1.0})
    assert len(store.get_trial(tid)["metrics"]) == 1
    assert "metrics" not in store.get_trial(tid, with_metrics=False)
    with pytest.raises(NotFound):
        store.get_trial(f"{sweep_id}-ffffffffffffffff")


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
