"""Contract of the reads role (`core.store.roles.Reads`): sweeps, counts, trial pages, the best,
one trial, trials by id and by index.

Runs against the real server of the `mongo_url` fixture (SecantusDB, and a real mongod
when SWEEPSTACK_TEST_MONGO_URL is set); each test uses a database of its own and drops it.
"""

from __future__ import annotations

from typing import Any

import pytest

from core.errors import (
    InvalidQuery,
    NotFound,
    SweepstackError,
)
from core.store.records import flatten_params
from core.store.store import Store
from tests.core import FakeClock, complete, finish, make_sweep, report, run, small_spec, trial_ids

# -- sweeps ----------------------------------------------------------------------------


def test_list_sweeps_newest_first_by_owner_with_a_cursor(store: Store, clock: FakeClock) -> None:
    made = []
    for owner in ("alice", "bob", "alice", "alice"):
        made.append(make_sweep(store, owner=owner)[0])
        clock.advance(1)
    page, cursor = store.reads.list_sweeps(limit=3)
    assert [s["_id"] for s in page] == made[::-1][:3]
    assert all(s["counts"]["queued"] == 36 for s in page)
    rest, end = store.reads.list_sweeps(limit=3, cursor=cursor)
    assert [s["_id"] for s in rest] == [made[0]] and end is None
    mine, cursor = store.reads.list_sweeps(owner="alice", limit=2)
    more, end = store.reads.list_sweeps(owner="alice", limit=2, cursor=cursor)
    assert [s["_id"] for s in mine + more] == [made[3], made[2], made[0]] and end is None
    with pytest.raises(InvalidQuery, match="cursor"):
        store.reads.list_sweeps(owner="bob", cursor=cursor)


def test_get_sweep_is_not_found_when_missing_or_not_the_owners(store: Store) -> None:
    sweep_id, _ = make_sweep(store, owner="alice")
    assert store.reads.get_sweep(sweep_id, owner="alice")["_id"] == sweep_id
    with pytest.raises(NotFound, match="sweep"):
        store.reads.get_sweep(sweep_id, owner="mallory")
    with pytest.raises(NotFound):
        store.reads.get_sweep("000000000000")
    with pytest.raises(InvalidQuery, match="sweep_id"):
        store.reads.get_sweep({"$ne": None})  # type: ignore[arg-type]


def test_counts_name_every_state_and_recount_repairs_them(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    ids = trial_ids(sweep_id, points)
    complete(store, ids[0], 0.1)
    run(store, ids[1])
    finish(store, ids[1], 1, "pruned")
    run(store, ids[2])
    expected = {"queued": 33, "running": 1, "complete": 1, "failed": 0, "pruned": 1, "cancelled": 0}
    assert store.reads.counts(sweep_id) == expected
    store.db["sweeps"].update_one({"_id": sweep_id}, {"$inc": {"counts.queued": 7}})
    assert store.reads.counts(sweep_id)["queued"] == 40
    assert store.admin.recount(sweep_id) == expected
    assert store.reads.counts(sweep_id) == expected


# -- trial pages -----------------------------------------------------------------------


def _all_pages(store: Store, sweep_id: str, limit: int = 7, **query: Any) -> list[dict]:
    out: list[dict] = []
    cursor = None
    while True:
        page, cursor = store.reads.trials(sweep_id, limit=limit, cursor=cursor, **query)
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
            finish(store, tid, 1, "failed", error="boom", extra={"train_seconds": float(i)})
        else:
            attempt = run(store, tid)["attempt"]
            result = {"objective": round((i * 7 % 10) / 10, 1), "val_loss": 1.0 - i / 100}
            finish(
                store,
                tid,
                attempt,
                "complete",
                result=result,
                extra={"train_seconds": float(i % 3)},
            )
    for tid in ids[20:24]:
        run(store, tid)
    trials, _ = store.reads.trials(sweep_id, limit=1000)
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
        finish(store, tid, 1, "complete", result={"note": note})
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
    _, cursor = store.reads.trials(sweep_id, state="queued", limit=10)
    for tid in ids[:5]:
        run(store, tid)  # trials already seen leave the queued state
    second, _ = store.reads.trials(sweep_id, state="queued", limit=10, cursor=cursor)
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
        store.reads.trials(sweep_id, **query)
    assert caught.value.field == field
    assert isinstance(caught.value, SweepstackError)
    assert caught.value.problems[0].path == field
    assert field in str(caught.value)


def test_a_cursor_is_only_good_for_its_own_query(store: Store) -> None:
    sweep_id, _ = make_sweep(store)
    _, cursor = store.reads.trials(sweep_id, sort="objective", limit=5)
    with pytest.raises(InvalidQuery, match="different query"):
        store.reads.trials(sweep_id, sort="index", limit=5, cursor=cursor)
    with pytest.raises(InvalidQuery, match="different query"):
        store.reads.trials(sweep_id, sort="objective", state="queued", limit=5, cursor=cursor)


def test_trials_of_an_unknown_sweep_are_not_found(store: Store) -> None:
    with pytest.raises(NotFound):
        store.reads.trials("000000000000")


# -- best, one trial ----------------------------------------------


def test_best_follows_the_objective_direction(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    ids = trial_ids(sweep_id, points)
    for tid, objective in zip(ids, [0.5, 0.9, None, 0.7, 0.9], strict=False):
        complete(store, tid, objective)
    run(store, ids[5])
    finish(store, ids[5], 1, "failed", result={"objective": 1.0})
    assert [t["index"] for t in store.reads.best(sweep_id, 3)] == [1, 4, 3]
    assert [t["objective"] for t in store.reads.best(sweep_id)] == [0.9, 0.9, 0.7, 0.5]

    loss = small_spec(name="by-loss", objective={"metric": "val_loss", "direction": "minimize"})
    loss_id, loss_points = make_sweep(store, loss)
    for tid, value in zip(trial_ids(loss_id, loss_points), [0.3, None, 0.1, 0.2], strict=False):
        run(store, tid)
        finish(store, tid, 1, "complete", result={"val_loss": value})
    assert [t["objective"] for t in store.reads.best(loss_id, 2)] == [0.1, 0.2]
    with pytest.raises(InvalidQuery, match="k"):
        store.reads.best(sweep_id, 0)


def test_trials_at_reads_the_indexes_asked_for_by_range_or_one_by_one(store: Store) -> None:
    sweep_id, points = make_sweep(store)  # 36 trials
    ids = trial_ids(sweep_id, points)
    for wanted in ([3, 4, 5, 7], [0, 35], [35, 2, 2, 17]):  # a short range, then by index
        docs = store.reads.trials_at(sweep_id, wanted, ["state", "params"])
        assert [d["index"] for d in docs] == sorted(set(wanted))
        assert [d["_id"] for d in docs] == [ids[i] for i in sorted(set(wanted))]
        assert set(docs[0]) == {"_id", "index", "state", "params"}
    assert store.reads.trials_at(sweep_id, [34, 999], ["state"])[0]["index"] == 34  # 99: none
    assert store.reads.trials_at(sweep_id, [], ["state"]) == []
    with pytest.raises(InvalidQuery, match="indexes"):
        store.reads.trials_at(sweep_id, [1, -2], ["state"])
    with pytest.raises(InvalidQuery, match="indexes"):
        store.reads.trials_at(sweep_id, range(1001), ["state"])
    with pytest.raises(InvalidQuery, match="fields"):
        store.reads.trials_at(sweep_id, [1], ["$where"])


def test_get_trial_with_and_without_metrics(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    tid = trial_ids(sweep_id, points)[0]
    run(store, tid)
    report(store, tid, 1, 0, {"val_loss": 1.0})
    assert len(store.reads.get_trial(tid)["metrics"]) == 1
    assert "metrics" not in store.reads.get_trial(tid, with_metrics=False)
    with pytest.raises(NotFound):
        store.reads.get_trial(f"{sweep_id}-ffffffffffffffff")


def test_best_is_remembered_until_another_trial_completes(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    ids = trial_ids(sweep_id, points)
    complete(store, ids[0], 0.5)
    first = store.reads.best(sweep_id, 1)
    first[0]["objective"] = -1.0  # a caller's copy: the remembered answer is not touched
    assert [t["objective"] for t in store.reads.best(sweep_id, 1)] == [0.5]
    run(store, ids[1])
    finish(store, ids[1], 1, "failed", error="x")  # not a completion: same answer
    assert [t["index"] for t in store.reads.best(sweep_id, 1)] == [0]
    complete(store, ids[2], 0.9)
    assert [t["index"] for t in store.reads.best(sweep_id, 1)] == [2]
    assert [t["index"] for t in store.reads.best(sweep_id, 2)] == [2, 0]
