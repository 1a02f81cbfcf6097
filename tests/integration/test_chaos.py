"""Chaos (#29): sweeps of every kind (fused groups and plain trials pruned by ASHA at their
rungs, chunks of cheap trials, data-parallel trials, checkpoints) on real services through
a seeded schedule of kills of training processes, ranks, workers and the scheduler, a
second scheduler beside the first, a broker restart and a store outage: every trial ends
exactly once with every epoch row of its final attempt, and the counts equal a recount.

The harness is `tests.integration.chaos`; `python -m bench.bench_chaos` runs it longer.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.integration.chaos import Chaos, plan, schedule

pytestmark = pytest.mark.integration

SEED = 29


@pytest.mark.timeout(600)  # about 3 minutes on 2 cores; the drain is bounded below
def test_every_trial_ends_once_whole_through_a_seeded_schedule_of_disruptions(
    secantus_url: str,
) -> None:
    # Logs (and the wrong trials, suspects.json) are kept where a failure says, not in
    # pytest's tmp_path, which later runs remove.
    tmp_path = Path(tempfile.mkdtemp(prefix="sweepstack-chaos-"))
    disruptions = schedule(SEED, 11, hold=(2.0, 5.0), gap=(2.0, 4.0))
    assert {d.kind for d in disruptions} == {
        "child", "rank", "worker", "scheduler", "two_schedulers", "broker", "store"
    }  # fmt: skip
    with Chaos(
        secantus_url,
        tmp_path,
        seed=SEED,
        sweeps=plan(scale=2, later={"chunks": 0.3, "data-parallel": 0.4}),
        disruptions=disruptions,
        say=print,
    ) as chaos:
        report = chaos.run(timeout=180)
    print(report.text())
    assert report.ok, report.text()
    shutil.rmtree(tmp_path, ignore_errors=True)
