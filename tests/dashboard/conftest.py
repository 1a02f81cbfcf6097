"""Fixtures of the dashboard tests: a store on the real server with a small sweep whose
trials went through the real lifecycle, and (in `test_browser`) a real Chromium."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from core.spec import SweepSpec, load_spec
from core.states import TrialState
from core.store import Store
from scheduler.expand import TrialPoint
from tests.core import FakeClock, make_sweep, open_store, trial_ids

#: 16 trials: depth 1-2 x width 32/64 x relu/tanh x seeds 0/1.
SPEC: dict[str, Any] = {
    "name": "dashboard-test",
    "dataset": {"name": "digits"},
    "model": {"hidden_layers": [1, 2], "hidden_units": [32, 64],
              "activation": ["relu", "tanh"]},
    "training": {"seed": [0, 1], "epochs": 3},
    "objective": {"metric": "val_accuracy", "direction": "maximize"},
}


def small_sweep_spec(**overrides: Any) -> SweepSpec:
    return load_spec({**SPEC, **overrides})


@dataclass
class Sweep:
    """A sweep in the store, its points and trial ids by index, and the clock it ran on."""

    store: Store
    clock: FakeClock
    sweep_id: str
    points: list[TrialPoint]
    ids: list[str]

    def finish(self, index: int, state: TrialState = TrialState.COMPLETE, *,
               objective: float | None = None, seconds: float = 1.0, error: str | None = None,
               epochs: int = 0, device: str = "cpu", worker: str = "celery@w1") -> None:
        """Claim, report `epochs` epochs and finish trial `index`, `seconds` of clock later."""
        trial_id = self.ids[index]
        claimed = self.store.claim(trial_id, {"host": "h", "pid": 7, "name": worker},
                                   stale_after=60)
        assert claimed is not None
        for epoch in range(1, epochs + 1):
            accuracy = (objective or 0.5) * epoch / epochs
            self.store.report(trial_id, claimed["attempt"], epoch,
                              {"train_loss": 1 / epoch, "val_loss": 1.2 / epoch,
                               "val_accuracy": accuracy, "lr": 0.01, "epoch_seconds": 0.1})
        self.clock.advance(seconds)
        result = {"objective": objective} if objective is not None else None
        extra = {"train_seconds": seconds, "device": device} if state == "complete" else None
        assert self.store.finish(trial_id, claimed["attempt"], state, result=result,
                                 error=error, extra=extra)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(secantus_url: str, db_name: str, clock: FakeClock) -> Iterator[Store]:
    yield from open_store(secantus_url, db_name, clock)


@pytest.fixture
def sweep(store: Store, clock: FakeClock) -> Sweep:
    """16 queued trials of `SPEC`."""
    sweep_id, points = make_sweep(store, small_sweep_spec(), owner="alice")
    return Sweep(store, clock, sweep_id, points, trial_ids(sweep_id, points))
