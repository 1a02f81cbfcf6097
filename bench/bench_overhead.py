"""The platform's own cost per trial: trials that train nothing (zero epochs) go through the
real broker, the real store and real Celery worker processes (2 by default).

**Platform cost of a trial** is what a worker process spends on it outside the training
function, at steady state: for each worker process, its trials in the order they ended,
the time from the previous trial's terminal record to this one's, minus this trial's
``train_seconds`` (which the training function measures: data, model and epochs). It holds
everything the platform adds between two trainings: the broker delivering the next message
(prefetch one, acks late: the next is asked for after the previous is acked), Celery's
task handling, the claim, heartbeats, epoch rows, the finish, and the record's versions and
objective. Each process's first trial is left out (nothing before it to measure from). The
median and p99 of that, per trial, are the figures of issue 14 (target: ≤ 20 ms and
≤ 100 ms on a quiet machine).

It runs the sweep twice, in one run: with the default ``execution.fuse: auto``, where such
cheap trials share messages, a few dozen at a time (`scheduler.chunks`: one delivery, one
claim write per chunk; each trial still trains alone and is finished as it ends), and with
``fuse: off``, one message per trial, the path of every trial too large to share one. For
the second it also splits the cost at the claim (`cost_parts`; in a chunk every trial is
claimed at its start, so the split says nothing there).

Also printed: the whole run's wall time per trial per worker process (platform cost plus
training plus any idle time), and the submit time. Needs RabbitMQ on
SWEEPSTACK_TEST_BROKER_URL (default 127.0.0.1:5672); starts its own SecantusDB. The
machine's load shows in every figure: run it on a quiet machine, or compare runs made
back to back. For scale: Ray Tune's published overhead is about 14% on 1-second trials,
roughly 140 ms per trial.

    python -m bench.bench_overhead [--trials 1000] [--workers 2]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from tests.integration.stack import Stack
from tests.services import SecantusProcess, broker_url_or_fail


def platform_costs(trials: list[dict[str, Any]]) -> list[float]:
    """Seconds each trial cost its worker process outside training (module docstring)."""
    by_process: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for doc in trials:
        worker = doc.get("worker") or {}
        by_process.setdefault((worker.get("host"), worker.get("pid")), []).append(doc)
    costs: list[float] = []
    for docs in by_process.values():
        docs.sort(key=lambda d: d["finished_at"])
        for previous, doc in itertools.pairwise(docs):
            gap = (doc["finished_at"] - previous["finished_at"]).total_seconds()
            costs.append(gap - (doc.get("train_seconds") or 0.0))
    return sorted(costs)


def cost_parts(trials: list[dict[str, Any]]) -> tuple[list[float], list[float]]:
    """The platform cost split in two at the claim. Both times are stamped when a store call
    starts, so the first part (previous ``finished_at`` to this ``started_at``) holds the
    previous finish's writes, the ack, the broker's next delivery and Celery's handling; the
    second (``started_at`` to ``finished_at``, minus training) holds the claim's writes, the
    training set-up (data from the cache, model, optimiser) and the epoch rows. Seconds,
    sorted."""
    by_process: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for doc in trials:
        worker = doc.get("worker") or {}
        by_process.setdefault((worker.get("host"), worker.get("pid")), []).append(doc)
    between: list[float] = []
    inside: list[float] = []
    for docs in by_process.values():
        docs.sort(key=lambda d: d["finished_at"])
        for previous, doc in itertools.pairwise(docs):
            between.append((doc["started_at"] - previous["finished_at"]).total_seconds())
            inside.append(
                (doc["finished_at"] - doc["started_at"]).total_seconds()
                - (doc.get("train_seconds") or 0.0)
            )
    return sorted(between), sorted(inside)


def _percentile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))]


def run_once(stack: Stack, trials: int, workers: int, fuse: str) -> None:
    """Submit `trials` zero-epoch trials under `fuse`, wait for them, print the figures."""
    text = (
        f"name: overhead-{uuid.uuid4().hex[:6]}\ndataset: {{name: iris}}\n"
        f"execution: {{device: cpu, fuse: {fuse}}}\n"
        f"training:\n  epochs: 0\n  seed: {{int: [1, {trials}]}}\n"
    )
    start = time.time()
    sweep_id, n = stack.submit(text)
    submitted = time.time()
    stack.wait_finished(sweep_id, timeout=3600)
    end = time.time()
    docs = stack.all_trials(sweep_id)
    costs = platform_costs(docs)
    messages = len({doc.get("group") or doc["_id"] for doc in docs})
    train = sorted(doc.get("train_seconds") or 0.0 for doc in docs)
    print(f"fuse {fuse}: {n} trials in {messages} messages")
    print(f"  submit (store + enqueue): {submitted - start:.2f} s")
    print(
        f"  platform cost per trial: median {statistics.median(costs) * 1000:.1f} ms, "
        f"p99 {_percentile(costs, 0.99) * 1000:.1f} ms "
        f"(training function: median {statistics.median(train) * 1000:.1f} ms)"
    )
    if fuse == "off":
        between, inside = cost_parts(docs)
        print(
            f"  finish call to next claim (finish writes, ack, delivery, Celery): median "
            f"{statistics.median(between) * 1000:.1f} ms; claim to finish call minus "
            f"training (claim, set-up): median {statistics.median(inside) * 1000:.1f} ms"
        )
    print(
        f"  wall time per trial per worker process: "
        f"{(end - submitted) / n * workers * 1000:.0f} ms ({n / (end - submitted):.1f} trials/s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--fuse", choices=("auto", "off", "both"), default="both", help="which runs (default both)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = SecantusProcess(Path(tmp) / "data")
        stack = Stack(broker_url_or_fail(), server.url, f"bench_{uuid.uuid4().hex[:8]}", Path(tmp))
        try:
            stack.start_worker(concurrency=args.workers)
            print(f"{args.trials} zero-epoch trials, {args.workers} worker processes")
            for fuse in ("auto", "off") if args.fuse == "both" else (args.fuse,):
                run_once(stack, args.trials, args.workers, fuse)
        finally:
            stack.close()
            server.stop()


if __name__ == "__main__":
    main()
