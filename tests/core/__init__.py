"""Helpers for the store tests: a store on a database of its own, a fake clock, small sweeps.

Every store test runs against the real server the `mongo_url` fixture names (SecantusDB,
and a real mongod when ``SWEEPSTACK_TEST_MONGO_URL`` is set) and drops its database after.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from core.spec.sweep import SweepSpec, load_spec
from core.states import Heartbeat, TrialState
from core.store.roles import EpochRow, Finish
from core.store.store import Store
from scheduler.expand import TrialPoint, expand

WORKER = {"host": "test-host", "pid": 4242, "name": "worker-1"}


class FakeClock:
    """A clock that moves only when told to; thread-safe."""

    def __init__(self, start: datetime = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)) -> None:
        self.now = start
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += timedelta(seconds=seconds)


def open_store(url: str, db_name: str, clock: FakeClock | None = None) -> Iterator[Store]:
    """A store on `db_name` (indexes made), yielded; the database is dropped after."""
    store = Store.connect(url, db_name, clock=clock or FakeClock(), change_lag=0)
    try:
        store.ensure_indexes()
        yield store
    finally:
        store.client.drop_database(db_name)
        store.close()


def small_spec(**overrides: Any) -> SweepSpec:
    """36 trials: depth x width x activation x optimizer, momentum only with sgd."""
    document: dict[str, Any] = {
        "name": "store-test",
        "dataset": {"name": "digits"},
        "model": {
            "hidden_layers": [1, 2],
            "hidden_units": [32, 64, 128],
            "activation": ["relu", "tanh"],
        },
        "training": {
            "optimizer": ["sgd", "adam"],
            "momentum": {"choice": [0.5, 0.9], "when": {"optimizer": ["sgd"]}},
        },
        "objective": {"metric": "val_accuracy", "direction": "maximize"},
    }
    document.update(overrides)
    return load_spec(document)


def width_spec(n: int, name: str = "widths") -> SweepSpec:
    """`n` trials, one per width 1..n."""
    widths = list(range(1, n + 1))
    return load_spec({"name": name, "dataset": {"name": "iris"}, "model": {"hidden_units": widths}})


def make_sweep(
    store: Store, spec: SweepSpec | None = None, **kwargs: Any
) -> tuple[str, list[TrialPoint]]:
    """Create a sweep of `spec` (default `small_spec`); its id and its points."""
    spec = spec or small_spec()
    points = expand(spec, with_config=True)
    return store.admin.create_sweep(spec, points, **kwargs), points


def trial_ids(sweep_id: str, points: list[TrialPoint]) -> list[str]:
    """The store ids of the points, in index order."""
    return [f"{sweep_id}-{p.id}" for p in points]


def run(store: Store, trial_id: str, *, stale_after: float = 60) -> dict[str, Any]:
    """Claim the trial as `WORKER`; its document."""
    claimed = store.lifecycle.claim(trial_id, WORKER, stale_after=stale_after)
    assert claimed is not None
    return claimed


def complete(store: Store, trial_id: str, objective: float | None, **result: Any) -> None:
    """Claim the trial and finish it complete with `objective` (and `result`)."""
    attempt = run(store, trial_id)["attempt"]
    outcome = {"objective": objective, **result}
    assert finish(store, trial_id, attempt, TrialState.COMPLETE, result=outcome)


# One trial's writes, as a test makes them: the store has only the batched forms, which a
# worker uses (`core.store.roles.TrialLifecycle`), so these give each one trial.


def heartbeat(store: Store, trial_id: str, attempt: int) -> Heartbeat:
    """`TrialLifecycle.heartbeat_many` for one attempt: its answer."""
    return store.lifecycle.heartbeat_many({trial_id: attempt})[trial_id]


def report(store: Store, trial_id: str, attempt: int, epoch: int, metrics: dict[str, Any]) -> None:
    """`TrialLifecycle.report_many` of one epoch row."""
    store.lifecycle.report_many([EpochRow(trial_id, attempt, epoch, metrics)])


def finish(
    store: Store,
    trial_id: str,
    attempt: int,
    state: TrialState | str,
    *,
    result: dict[str, Any] | None = None,
    error: str | None = None,
    extra: dict[str, Any] | None = None,
) -> bool:
    """`TrialLifecycle.finish_many` of one attempt: whether this call ended it."""
    ended = Finish(trial_id, attempt, state, result, error, extra or {})
    return store.lifecycle.finish_many([ended])[trial_id]
