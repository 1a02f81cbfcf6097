"""What a durable store costs (#29): epoch rows written with and without sync on commit.

Two embedded stores (`python -m cli.embedded_store`, as `sweepstack run` starts it), one
syncing its journal on every commit (the default since #29) and one not
(``--no-sync-on-commit``), each written to by two clients: the store's default write
concern (``w: majority, j: true``, since #29) and none (the server's default, as before).
Each of the four pairs writes epoch rows as a worker does (`TrialLifecycle.report_many`:
an update of the trial's progress and an insert of the row), one row a call (a trial whose
epochs are slower than the worker's 2 s batches: the worst case) and 32 rows a call (a
fused group, or a fast trial's batch), in short interleaved rounds, each in another order,
so that the machine's load falls on all alike. Prints the median ms per epoch row of each,
and each against before #29 (no sync, no ``j``).

    python -m bench.bench_store_durability [--rows 2048] [--rounds 32] [--group 32]

Times come from a shared, noisy machine, and fsync's cost from its disk: compare the rows
of one run.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from core.settings import DEFAULT_WRITE_CONCERN
from core.spec.sweep import load_spec
from core.store.roles import EpochRow
from core.store.store import Store
from scheduler.expand import expand
from tests.services import free_port, wait_listening

WORKER = {"host": "bench", "pid": 1, "name": "bench"}
ROW = {"loss": 0.5, "val_loss": 0.6, "val_accuracy": 0.9, "epoch_seconds": 0.01}
#: (label, the store syncs on commit, the client's write concern); the first is the baseline.
MODES: list[tuple[str, bool, dict[str, Any]]] = [
    ("before #29: no sync, no j", False, {}),
    ("j: true only", False, dict(DEFAULT_WRITE_CONCERN)),
    ("sync on commit only", True, {}),
    ("#29: sync on commit + majority, j", True, dict(DEFAULT_WRITE_CONCERN)),
]


@contextmanager
def embedded_store(folder: Path, sync_on_commit: bool) -> Iterator[str]:
    """The store process of `sweepstack run` on `folder`, with or without sync on commit;
    its URL, for the block."""
    port = free_port()
    flag = "--sync-on-commit" if sync_on_commit else "--no-sync-on-commit"
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "cli.embedded_store", "--port", str(port)),
            *("--storage-path", str(folder), flag),
        ]
    )
    try:
        wait_listening("127.0.0.1", port, 60, proc)
        yield f"mongodb://127.0.0.1:{port}/?retryWrites=false"
    finally:
        proc.terminate()
        proc.wait(30)


class Writer:
    """Epoch rows of `trials` running trials through one store, epochs counting up."""

    def __init__(self, store: Store, trials: int) -> None:
        self.store = store
        spec = load_spec(
            {
                "name": "bench-durability",
                "dataset": {"name": "iris"},
                "model": {"hidden_units": list(range(1, trials + 1))},
            }
        )
        points = expand(spec, with_config=True)
        sweep_id = store.admin.create_sweep(spec, points)
        self.ids = [f"{sweep_id}-{p.id}" for p in points]
        store.lifecycle.claim_queued(dict.fromkeys(self.ids, 0), WORKER)
        self.epoch = 0

    def write(self, rows: int, per_call: int) -> float:
        """Write `rows` rows, `per_call` trials' rows a call; ms per row."""
        start = time.perf_counter()
        for _ in range(rows // per_call):
            self.epoch += 1
            batch = [EpochRow(t, 1, self.epoch, ROW) for t in self.ids[:per_call]]
            self.store.lifecycle.report_many(batch)
        return (time.perf_counter() - start) * 1000 / (rows // per_call * per_call)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2048, help="epoch rows per mode and shape")
    parser.add_argument("--rounds", type=int, default=32)
    parser.add_argument("--group", type=int, default=32)
    args = parser.parse_args()
    shapes = {"1 row a call": 1, f"{args.group} rows a call": args.group}
    times: dict[tuple[str, str], list[float]] = {
        (label, shape): [] for label, _, _ in MODES for shape in shapes
    }
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        urls = {
            sync: stack.enter_context(embedded_store(Path(tmp) / f"db-{sync}", sync))
            for sync in (False, True)
        }
        writers = {}
        for label, sync, concern in MODES:
            store = Store.connect(urls[sync], "bench_durability", write_concern=concern)
            stack.callback(store.close)
            writers[label] = Writer(store, args.group)
            writers[label].write(args.group * 4, args.group)  # warm the connection and server
        per_round = max(args.group, args.rows // args.rounds // args.group * args.group)
        for r in range(args.rounds):
            for shape, per_call in shapes.items():
                for label, _, _ in MODES[r % len(MODES) :] + MODES[: r % len(MODES)]:
                    times[label, shape].append(writers[label].write(per_round, per_call))
    medians = {key: statistics.median(values) for key, values in times.items()}
    print(
        f"epoch rows, ms per row (median of {args.rounds} rounds of {per_round} rows; "
        "the embedded SecantusDB, this machine)"
    )
    width = max(len(label) for label, _, _ in MODES) + 2
    print(f"{'store and client':<{width}}" + "".join(f"{shape:>26}" for shape in shapes))
    base = MODES[0][0]
    for label, _, _ in MODES:
        cells = []
        for shape in shapes:
            ms, was = medians[label, shape], medians[base, shape]
            cells.append(f"{ms:8.3f} ({ms - was:+.3f}, {ms / was:4.2f}x)")
        print(f"{label:<{width}}" + "".join(f"{cell:>26}" for cell in cells))


if __name__ == "__main__":
    main()
