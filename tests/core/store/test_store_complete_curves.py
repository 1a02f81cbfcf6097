"""Contract of what a worker reads to run a sweep's pruner itself (`TrialLifecycle.pruning`,
`TrialLifecycle.complete_curves`, `workers.pruning`): the spec's pruning section, and the
complete trials it has not seen, each with its objective and the pruned metric's values of
its final attempt; one small read while nothing completed.

Runs against the real server of the `mongo_url` fixture (SecantusDB, and a real mongod
when SWEEPSTACK_TEST_MONGO_URL is set); each test uses a database of its own and drops it.
"""

from __future__ import annotations

from typing import Any

import pytest

from core.errors import InvalidQuery, NotFound
from core.states import TrialState
from core.store.store import Store
from tests.core import FakeClock, finish, make_sweep, report, run, small_spec, trial_ids


def _reads(store: Store) -> list[str]:
    """Every read of the trials and metrics collections from now on, by collection."""
    seen: list[str] = []
    for name in ("trials", "metrics"):
        collection = getattr(store._state, name)
        original = collection.find

        def find(*args: Any, _n: str = name, _f: Any = original, **kwargs: Any) -> Any:
            seen.append(_n)
            return _f(*args, **kwargs)

        collection.find = find
    return seen


def test_the_pruning_section_comes_as_the_spec_gives_it(store: Store) -> None:
    pruning = {"algorithm": "median", "n_startup_trials": 2, "metric": "val_loss"}
    sweep_id, _ = make_sweep(store, small_spec(pruning=pruning))
    assert store.lifecycle.pruning(sweep_id) == pruning
    plain, _ = make_sweep(store)
    assert store.lifecycle.pruning(plain) == {}
    with pytest.raises(NotFound):
        store.lifecycle.pruning("0" * 12)


def test_complete_curves_are_the_final_attempts_finite_values(
    store: Store, clock: FakeClock
) -> None:
    sweep_id, points = make_sweep(store)
    done, retried, failed, running, nan = trial_ids(sweep_id, points)[:5]
    for tid in (done, failed, running, nan):
        run(store, tid)
    for epoch, value in ((1, 0.2), (2, 0.4), (3, float("nan"))):
        report(store, done, 1, epoch, {"val_accuracy": value, "val_loss": 1.0})
    assert finish(store, done, 1, TrialState.COMPLETE, result={"objective": 0.4})
    # A first attempt lost at epoch 2, the second complete after 1: only its rows count.
    run(store, retried)
    report(store, retried, 1, 1, {"val_accuracy": 0.9})
    report(store, retried, 1, 2, {"val_accuracy": 0.9})
    clock.advance(120)
    assert store.lifecycle.claim(retried, {"host": "h", "pid": 1}, stale_after=60) is not None
    report(store, retried, 2, 1, {"val_accuracy": 0.3})
    assert finish(store, retried, 2, TrialState.COMPLETE, result={"objective": 0.3})
    report(store, failed, 1, 1, {"val_accuracy": 0.1})
    assert finish(store, failed, 1, TrialState.FAILED, error="boom")
    report(store, running, 1, 1, {"val_accuracy": 0.5})
    assert finish(store, nan, 1, TrialState.COMPLETE, result={"objective": float("nan")})

    found = store.lifecycle.complete_curves(sweep_id, "val_accuracy", set(), None)
    assert found.curves == {
        done: (0.4, {1: 0.2, 2: 0.4}),
        retried: (0.3, {1: 0.3}),
        nan: (None, {}),
    }
    assert found.since is not None
    # Told what it knows, with the counts unchanged: only the sweep's counts are read.
    seen = _reads(store)
    again = store.lifecycle.complete_curves(sweep_id, "val_accuracy", set(found.curves),
                                            found.since)  # fmt: skip
    assert again.curves == {} and again.since == found.since
    assert seen == []


def test_only_the_trials_completed_since_are_read_again(store: Store, clock: FakeClock) -> None:
    sweep_id, points = make_sweep(store)
    first, second = trial_ids(sweep_id, points)[:2]
    run(store, first)
    report(store, first, 1, 1, {"val_accuracy": 0.5})
    assert finish(store, first, 1, TrialState.COMPLETE, result={"objective": 0.5})
    found = store.lifecycle.complete_curves(sweep_id, "val_accuracy", set(), None)
    assert set(found.curves) == {first}
    clock.advance(30)
    run(store, second)
    report(store, second, 1, 1, {"val_accuracy": 0.7})
    assert finish(store, second, 1, TrialState.COMPLETE, result={"objective": 0.7})
    later = store.lifecycle.complete_curves(sweep_id, "val_accuracy", {first}, found.since)
    assert later.curves == {second: (0.7, {1: 0.7})}
    # Known ones are never returned, however the window is read.
    assert store.lifecycle.complete_curves(sweep_id, "val_accuracy", {second}, None).curves == {
        first: (0.5, {1: 0.5})
    }


def test_bad_input_is_refused_naming_the_field(store: Store) -> None:
    sweep_id, _ = make_sweep(store)
    with pytest.raises(InvalidQuery, match="metric"):
        store.lifecycle.complete_curves(sweep_id, "", set(), None)
    with pytest.raises(InvalidQuery, match="since"):
        store.lifecycle.complete_curves(sweep_id, "val_accuracy", set(), "yesterday")  # type: ignore[arg-type]
    with pytest.raises(InvalidQuery, match="sweep_id"):
        store.lifecycle.complete_curves({"$ne": 1}, "val_accuracy", set(), None)  # type: ignore[arg-type]
    with pytest.raises(NotFound):
        store.lifecycle.complete_curves("0" * 12, "val_accuracy", set(), None)
