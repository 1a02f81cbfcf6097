"""Concurrent callers of the store: every transition is made by exactly one of them.

Each thread has its own `Store` on its own client, as separate worker processes would, and
its own clock, a millisecond apart from the next thread's (a batched finish tells the
trials it ended by the time it wrote, `core.store.lifecycle`).
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any, TypeVar

import pytest

from core.store.store import Store
from tests.core import WORKER, FakeClock, finish, make_sweep, small_spec, trial_ids, width_spec

T = TypeVar("T")
THREADS = 8
Threads = Callable[[Callable[[Store, int], Any]], list[Any]]


@pytest.fixture
def in_threads(mongo_url: str, db_name: str, clock: FakeClock) -> Threads:
    """Run `work(store_of_this_thread, n)` in THREADS threads that start together."""

    def run(work: Callable[[Store, int], T]) -> list[T]:
        stores = [
            Store.connect(mongo_url, db_name, clock=_later_by(clock, n)) for n in range(THREADS)
        ]
        barrier = threading.Barrier(THREADS)

        def start(n: int) -> T:
            barrier.wait()
            return work(stores[n], n)

        try:
            with ThreadPoolExecutor(THREADS) as pool:
                return list(pool.map(start, range(THREADS)))
        finally:
            for each in stores:
                each.close()

    return run


def _later_by(clock: FakeClock, ms: int) -> Callable[[], datetime]:
    return lambda: clock() + timedelta(milliseconds=ms)


def test_eight_workers_claim_500_trials_exactly_once(store: Store, in_threads: Threads) -> None:
    sweep_id, points = make_sweep(store, width_spec(500))
    ids = trial_ids(sweep_id, points)

    def claim_all(mine: Store, n: int) -> list[tuple[str, int]]:
        order = list(ids)
        random.Random(n).shuffle(order)
        worker = {**WORKER, "name": f"worker-{n}"}
        won = []
        for tid in order:
            claimed = mine.lifecycle.claim(tid, worker, stale_after=3600)
            if claimed is not None:
                assert claimed["worker"] == worker
                won.append((tid, claimed["attempt"]))
        return won

    claims = [c for won in in_threads(claim_all) for c in won]
    assert len(claims) == 500
    assert Counter(tid for tid, _ in claims) == Counter(ids)
    assert {attempt for _, attempt in claims} == {1}
    assert store.reads.counts(sweep_id) == {**store.admin.recount(sweep_id), "running": 500}
    assert store.reads.counts(sweep_id)["queued"] == 0


def test_concurrent_requeue_stale_requeues_each_trial_once(
    store: Store, clock: FakeClock, in_threads: Threads
) -> None:
    sweep_id, points = make_sweep(store, width_spec(120))
    ids = trial_ids(sweep_id, points)
    for tid in ids[:100]:
        store.lifecycle.claim(tid, WORKER, stale_after=60)
    clock.advance(120)

    requeued = [i for got in in_threads(lambda s, _: s.admin.requeue_stale(60)) for i in got]
    assert sorted(requeued) == sorted(ids[:100])
    assert store.reads.counts(sweep_id) == store.admin.recount(sweep_id)
    assert store.reads.counts(sweep_id)["queued"] == 120
    for tid in ids[:3]:
        history = store.reads.get_trial(tid)["history"]
        assert [(h["attempt"], h["state"]) for h in history] == [(1, "lost")]


def test_one_finish_wins_and_one_takeover_wins(
    store: Store, clock: FakeClock, in_threads: Threads
) -> None:
    sweep_id, points = make_sweep(store, small_spec())
    finished, taken = trial_ids(sweep_id, points)[:2]
    store.lifecycle.claim(finished, WORKER, stale_after=60)
    store.lifecycle.claim(taken, WORKER, stale_after=60)
    clock.advance(120)

    def race(mine: Store, n: int) -> tuple[bool, Any]:
        won_finish = finish(mine, finished, 1, "complete", result={"objective": n / 10})
        claimed = mine.lifecycle.claim(taken, {**WORKER, "name": f"w{n}"}, stale_after=60)
        return won_finish, claimed

    results = in_threads(race)
    assert sum(won for won, _ in results) == 1
    winners = [claimed for _, claimed in results if claimed is not None]
    assert len(winners) == 1 and winners[0]["attempt"] == 2
    trial = store.reads.get_trial(taken)
    assert [(h["attempt"], h["state"]) for h in trial["history"]] == [(1, "lost")]
    assert len(store.reads.get_trial(finished)["history"]) == 1
    assert store.reads.counts(sweep_id) == store.admin.recount(sweep_id)
