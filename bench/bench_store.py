"""The store on 50,000 trials: bulk-insert rate, and the latency of a filtered, sorted page.

    python -m bench.bench_store [--url mongodb://...]

Without --url (or SWEEPSTACK_BENCH_MONGO_URL) it starts its own SecantusDB in a temporary
folder. Each figure is compared in the same run with what a plain query would cost: an
unindexed ``insert_many`` of the same documents, and ``sort().skip().limit()`` pages.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench import store_url
from bench.bench_expand import GRID
from core.spec.sweep import load_spec
from core.store.records import trial_document, utcnow
from core.store.store import INSERT_BATCH, Store
from scheduler.expand import expand

PAGE = 50


def _timed(fn: Callable[[], Any], repeat: int = 3) -> tuple[float, float]:
    """(first call, median of the next `repeat`) in seconds."""
    start = time.perf_counter()
    fn()
    first = time.perf_counter() - start
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return first, statistics.median(runs)


def _ms(pair: tuple[float, float]) -> str:
    return f"first {pair[0] * 1000:7.1f} ms, then {pair[1] * 1000:7.1f} ms"


def run(url: str) -> None:
    db_name = f"bench_store_{uuid.uuid4().hex[:8]}"
    store = Store.connect(url, db_name)
    try:
        spec = load_spec(GRID)
        points = expand(spec, with_config=True)
        store.ensure_indexes()

        start = time.perf_counter()
        sweep_id = store.admin.create_sweep(spec, points)
        took = time.perf_counter() - start
        n = len(points)
        print(
            f"create_sweep  {n:,} trials: {took:6.2f} s ({n / took:,.0f} trials/s, "
            f"batches of {INSERT_BATCH}, 3 secondary indexes)"
        )
        now = utcnow()
        raw = [trial_document("raw", p, p.config, now) for p in points]
        start = time.perf_counter()
        for i in range(0, n, INSERT_BATCH):
            store.db["bench_raw"].insert_many(raw[i : i + INSERT_BATCH], ordered=False)
        floor = time.perf_counter() - start
        print(
            f"  vs insert_many into an unindexed collection: {floor:6.2f} s "
            f"({n / floor:,.0f} docs/s)"
        )

        trials = store.db["trials"]
        query = {"state": "queued", "params": {"model.activation": "relu"}}
        mongo = {"sweep_id": sweep_id, "state": "queued", "params.model.activation": "relu"}
        _, deep = store.reads.trials(sweep_id, **query, limit=PAGE, cursor=None)
        for _ in range(249):  # walk to page 250, ~25,000 trials in
            _, deep = store.reads.trials(sweep_id, **query, limit=PAGE, cursor=deep)

        print(f"one page of {PAGE}, state=queued and model.activation=relu, by index:")
        print("  store, page 1:       ", _ms(_timed(lambda: store.reads.trials(sweep_id, **query))))
        print(
            "  store, page 251:     ",
            _ms(_timed(lambda: store.reads.trials(sweep_id, **query, cursor=deep))),
        )
        print(
            "  find.sort.skip(0):   ",
            _ms(_timed(lambda: list(trials.find(mongo).sort("index", 1).limit(PAGE)), 1)),
        )
        print(
            "  find.sort.skip(12500):",
            _ms(
                _timed(lambda: list(trials.find(mongo).sort("index", 1).skip(12500).limit(PAGE)), 1)
            ),
        )

        by = {**query, "sort": "model.hidden_units", "descending": True}
        server = [("params.model.hidden_units", -1), ("index", -1)]
        print(f"one page of {PAGE}, same filter, by model.hidden_units descending:")
        print("  store, page 1:       ", _ms(_timed(lambda: store.reads.trials(sweep_id, **by))))
        print(
            "  find.sort.limit:     ",
            _ms(_timed(lambda: list(trials.find(mongo).sort(server).limit(PAGE)), 1)),
        )

        print("counts by state:")
        print("  reads.counts:        ", _ms(_timed(lambda: store.reads.counts(sweep_id))))
        print("  admin.recount:       ", _ms(_timed(lambda: store.admin.recount(sweep_id), 1)))
    finally:
        store.client.drop_database(db_name)
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("SWEEPSTACK_BENCH_MONGO_URL"))
    url = parser.parse_args().url
    with store_url(url) as reached:
        print(f"store {reached}")
        run(reached)


if __name__ == "__main__":
    main()
