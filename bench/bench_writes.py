"""Store writes per trial, before and after batching: claim, epoch report, heartbeat, finish.

"Before" is one call per trial (the careful `claim`, and the batched methods of
`core.store.roles.TrialLifecycle` given one trial each: a fused group of K pays K round
trips; the store's single-trial report, heartbeat and finish, which also read the trial
first, are gone); "after" is what a worker sends (`core.store.lifecycle`: one write for a
whole group, a claim with no read, epoch rows in batches). Both run in one process
against one SecantusDB it starts, on fresh queued trials, and print the median
milliseconds per trial of each path, for one trial alone and for a fused group of K. The
epoch row is counted per epoch of one trial; "after" for a trial alone writes one row per
batch, so it is the worst case (an epoch slower than the 2 s between batches); a faster
trial shares one write among all its epochs of 2 s.

    python -m bench.bench_writes [--group 32] [--repeats 15]

Times come from a shared, noisy machine: compare the columns of one run.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.spec.sweep import load_spec
from core.store.roles import EpochRow, Finish
from core.store.store import Store
from scheduler.expand import expand
from tests.services import SecantusProcess

WORKER = {"host": "bench", "pid": 1, "name": "bench"}
ROW = {"loss": 0.5, "val_loss": 0.6, "val_accuracy": 0.9, "epoch_seconds": 0.01}


def _sweep(store: Store, n: int) -> list[str]:
    spec = load_spec(
        {
            "name": "bench-writes",
            "dataset": {"name": "iris"},
            "model": {"hidden_units": list(range(1, n + 1))},
        }
    )
    points = expand(spec, with_config=True)
    sweep_id = store.admin.create_sweep(spec, points)
    return [f"{sweep_id}-{p.id}" for p in points]


def _timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def _measure(store: Store, k: int, repeats: int) -> dict[str, tuple[float, float]]:
    """Median ms per trial of each path for groups of `k` (1: a trial alone)."""
    before: dict[str, list[float]] = {"claim": [], "report": [], "heartbeat": [], "finish": []}
    after: dict[str, list[float]] = {key: [] for key in before}
    lc = store.lifecycle
    for _ in range(repeats):
        old, new = _sweep(store, k), _sweep(store, k)
        rows = [EpochRow(t, 1, 1, ROW) for t in new]
        held = dict.fromkeys(new, 1)
        result = {"objective": 0.9, "val_accuracy": 0.9}
        ends = [Finish(t, 1, "complete", result) for t in new]
        paths: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
            "claim": (
                lambda old=old: [lc.claim(t, WORKER, stale_after=60) for t in old],
                lambda new=new: lc.claim_queued(dict.fromkeys(new, 0), WORKER),
            ),
            "report": (
                lambda old=old: [lc.report_many([EpochRow(t, 1, 1, ROW)]) for t in old],
                lambda rows=rows: lc.report_many(rows),
            ),
            "heartbeat": (
                lambda old=old: [lc.heartbeat_many({t: 1}) for t in old],
                lambda held=held: lc.heartbeat_many(held),
            ),
            "finish": (
                lambda old=old, r=result: [
                    lc.finish_many([Finish(t, 1, "complete", r)]) for t in old
                ],
                lambda ends=ends: lc.finish_many(ends),
            ),
        }
        for key, (was, now) in paths.items():  # in lifecycle order: each needs the one before
            before[key].append(_timed(was) / k)
            after[key].append(_timed(now) / k)
    return {key: (statistics.median(before[key]), statistics.median(after[key])) for key in before}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--group", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = SecantusProcess(Path(tmp) / "data")
        store = Store.connect(server.url, "bench_writes")
        try:
            store.ensure_indexes()
            _sweep(store, 4)  # warm the connection and the server
            alone = _measure(store, 1, args.repeats)
            group = _measure(store, args.group, args.repeats)
        finally:
            store.close()
            server.stop()
    k = args.group
    print(f"store writes, ms per trial (median of {args.repeats}; SecantusDB, this machine)")
    print(f"{'path':<22}{'alone before':>14}{'alone after':>13}{f'K={k} before':>14}"
          f"{f'K={k} after':>13}")  # fmt: skip
    for key, label in (
        ("claim", "claim"),
        ("report", "report (per epoch)"),
        ("heartbeat", "heartbeat (per beat)"),
        ("finish", "finish"),
    ):
        (a_old, a_new), (g_old, g_new) = alone[key], group[key]
        print(f"{label:<22}{a_old:>14.2f}{a_new:>13.2f}{g_old:>14.2f}{g_new:>13.2f}")


if __name__ == "__main__":
    main()
