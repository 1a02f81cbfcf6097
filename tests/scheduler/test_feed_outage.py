"""A feed pass that meets the store down loses no point (#29): a 20-trial grid fed in windows
of 5 through a real outage (the feeder reaches SecantusDB through a TCP proxy that the test
cuts, refusing and dropping every connection, then restores) ends with exactly 20 trials, each
once. A stand-in worker finishes trials through the store, as in tests/scheduler/test_feed.py."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from urllib.parse import urlparse

import pytest

from core.errors import SweepstackError
from core.spec.sweep import load_spec
from core.store.store import Store
from scheduler.feed import Feeder
from scheduler.submit import submit_sweep
from tests.integration.stack import Stack
from tests.scheduler.test_feed import finish_some
from tests.services import Proxy

pytestmark = pytest.mark.integration


@pytest.fixture
def proxied(stack: Stack, secantus_url: str) -> Iterator[tuple[Proxy, Store]]:
    where = urlparse(secantus_url)
    proxy = Proxy((where.hostname or "127.0.0.1", where.port or 27017))
    store = Store.connect(f"mongodb://127.0.0.1:{proxy.port}/?retryWrites=false",
                          stack.store.db.name, timeout_ms=500)  # fmt: skip
    try:
        yield proxy, store
    finally:
        store.close()
        proxy.close()


def test_a_20_trial_grid_fed_through_a_store_outage_creates_20_trials(
    stack: Stack, proxied: tuple[Proxy, Store]
) -> None:
    proxy, store = proxied
    spec = load_spec(
        f"name: outage-{uuid.uuid4().hex[:6]}\ndataset: {{name: digits}}\n"
        "model: {hidden_units: [4, 8, 16, 32, 64]}\ntraining: {epochs: 1, seed: [1, 2, 3, 4]}\n"
    )
    sweep_id, _ = submit_sweep(spec, stack.store, stack.app, window=5)
    feeder = Feeder.open(store, stack.app, sweep_id, owner="a", big_window=5)
    assert feeder is not None
    calls = {"n": 0}
    real_add = store.feeding.add_trials

    def add_then_cut(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 2:  # the outage begins as the second window is being stored
            proxy.cut()
        return real_add(*args, **kwargs)

    store.feeding.add_trials = add_then_cut  # type: ignore[method-assign]
    failures = 0
    for _ in range(200):
        try:
            alive = feeder.step()
        except SweepstackError:  # what the scheduler's loop catches: it steps again later
            failures += 1
            proxy.restore()
            continue
        if not alive:
            break
        finish_some(stack, sweep_id, 5)
    assert failures >= 1
    trials = stack.all_trials(sweep_id)
    assert len(trials) == len({t["_id"] for t in trials}) == 20
    assert {t["state"] for t in trials} == {"complete"}
    sweep = stack.store.reads.get_sweep(sweep_id)
    assert sweep["counts"]["complete"] == 20 and not sweep.get("planned")
