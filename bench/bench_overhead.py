"""The platform's own overhead per trial: trials that train nothing (zero epochs) go through
the real broker, the real store and 2 real Celery worker processes.

Prints the median and p99 of the time from enqueue to terminal record, and trials per
second. Needs RabbitMQ on SWEEPSTACK_TEST_BROKER_URL (default 127.0.0.1:5672); starts its
own SecantusDB. For scale: Ray Tune's published overhead is about 14% on 1-second trials,
roughly 140 ms per trial.

    python -m bench.bench_overhead [--trials 1000] [--workers 2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from tests.integration.stack import Stack
from tests.services import SecantusProcess, broker_url_or_fail


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = SecantusProcess(Path(tmp) / "data")
        stack = Stack(broker_url_or_fail(), server.url, f"bench_{uuid.uuid4().hex[:8]}", Path(tmp))
        try:
            stack.start_worker(concurrency=args.workers)
            text = (
                f"name: overhead-{uuid.uuid4().hex[:6]}\ndataset: {{name: iris}}\n"
                f"execution: {{device: cpu}}\n"
                f"training:\n  epochs: 0\n  seed: {{int: [1, {args.trials}]}}\n"
            )
            start = time.time()
            sweep_id, n = stack.submit(text)
            submitted = time.time()
            stack.wait_finished(sweep_id, timeout=3600)
            end = time.time()
            latencies = []
            cursor = None
            while True:
                page, cursor = stack.store.trials(sweep_id, limit=500, cursor=cursor)
                for doc in page:
                    latencies.append((doc["finished_at"] - doc["queued_at"]).total_seconds())
                if not cursor:
                    break
            latencies.sort()
            p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
            print(f"trials: {n}, workers: {args.workers}")
            print(f"submit (store + enqueue): {submitted - start:.2f} s")
            print(
                f"enqueue -> terminal record: median {statistics.median(latencies) * 1000:.0f} ms,"
                f" p99 {p99 * 1000:.0f} ms (queueing included: all trials enqueued at once)"
            )
            print(
                f"throughput: {n / (end - submitted):.1f} trials/s; "
                f"per-trial overhead at steady state: "
                f"{(end - submitted) / n * args.workers * 1000:.0f} ms per worker process"
            )
        finally:
            stack.close()
            server.stop()


if __name__ == "__main__":
    main()
