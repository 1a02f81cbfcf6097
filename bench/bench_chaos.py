"""Chaos, the long run (#29): the harness of tests/integration/test_chaos.py at >= 500 trials
and >= 40 disruptions, on a SecantusDB started here and a RabbitMQ node of the harness's own.

Waves of sweeps (fused groups and plain trials pruned by ASHA, with checkpoints; chunks of
cheap trials; data-parallel trials) are submitted along a seeded schedule of disruptions
(kill -9 of training processes, ranks, workers and the scheduler; a second scheduler; broker
restarts; store outages). Prints each disruption as it comes, then the checks
(`tests.integration.chaos.Chaos.check`) and the folder of the run's logs; exits 1 when
one fails, the wrong trials kept there too (``suspects.json``).

    python -m bench.bench_chaos [--seed 29] [--disruptions 42] [--waves 4] [--scale 3]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from tests.integration.chaos import Chaos, plan, schedule
from tests.services import SecantusProcess


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument("--disruptions", type=int, default=42)
    parser.add_argument("--waves", type=int, default=4, help="waves of sweeps along the run")
    parser.add_argument("--scale", type=int, default=3, help="about 48 trials per unit a wave")
    parser.add_argument("--timeout", type=float, default=900, help="seconds to end, after")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="sweepstack-chaos-bench-"))
    sweeps = [
        sweep
        for wave in range(args.waves)
        for sweep in plan(args.scale, wave / args.waves, {"chunks": (wave + 0.5) / args.waves})
    ]
    disruptions = schedule(args.seed, args.disruptions, hold=(2.0, 6.0), gap=(4.0, 9.0))
    store = SecantusProcess(folder / "secantus")
    try:
        with Chaos(
            store.url, folder, seed=args.seed, sweeps=sweeps, disruptions=disruptions,
            say=lambda line: print(line, flush=True),
        ) as chaos:  # fmt: skip
            report = chaos.run(timeout=args.timeout)
    finally:
        store.stop()
    print(report.summary())
    shutil.rmtree(folder / "secantus", ignore_errors=True)
    print(f"logs kept in {folder}" + ("" if report.ok else ", with the wrong trials"))
    if not report.ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
