"""The fair share on real workers and a real scheduler (#32): a sweep submitted behind a
large one of another user starts within about one trial's time, the two users then share
the workers' time half and half, and a high-priority sweep submitted behind both starts
within one trial's time; the same with two schedulers, one of them killed -9.

The issue's figures, scaled to this machine (2 cores, shared): 2 worker processes, trials of
~0.3-0.8 s (three epochs of a 256x256 network on digits, ``fuse: off``: one message, one
worker, per trial), a sweep of 1,000 trials against one of 200 submitted once the first
has finished 8 trials (not 2,000 against 100, 30 s later), shares measured over 15 s (not
a minute). What each assertion means is unchanged: B runs within two median trial
durations of its submit (plus 0.5 s, the margin a loaded machine needs); each user's share
of the worker time over the window is 50 ± 10 %; the high sweep's first trial starts within
one median trial duration (plus the same 0.5 s). In the second run the scheduler feeding
the large sweep is killed -9 and the other takes its lease over before B is submitted.
`bench/bench_share.py` runs the full-size figure.
"""

from __future__ import annotations

import statistics
import time
import uuid
from datetime import datetime

import pytest

from core.spec.sweep import load_spec
from scheduler.submit import submit_sweep
from tests.integration.stack import Scheduler, Stack, wait_for

LEASE = 2.0
OBSERVE_SECONDS = 15.0


def grid(name: str, trials: int, priority: str = "normal") -> str:
    """A grid of `trials` one-epoch trials on digits (learning rates x seeds)."""
    rates = [round(0.001 + 0.0001 * i, 6) for i in range(trials // 2)]
    return f"""
name: {name}
priority: {priority}
dataset: {{name: digits}}
model: {{hidden_units: [256, 256], activation: relu}}
training: {{epochs: 3, batch_size: 32, lr: {rates}, seed: [1, 2]}}
execution: {{fuse: off}}
"""


def submit(stack: Stack, text: str, owner: str) -> tuple[str, float]:
    """The new sweep's id, and when its submit began (the wait counts the submit too)."""
    began = time.time()
    sweep_id, _ = submit_sweep(load_spec(text), stack.store, stack.app, owner=owner)
    return sweep_id, began


def first_start(stack: Stack, sweep_id: str) -> float | None:
    """When the sweep's first trial started (epoch seconds), None before."""
    starts = [s for s, _, _ in intervals(stack, [sweep_id])]
    return min(starts) if starts else None


def intervals(stack: Stack, sweep_ids: list[str]) -> list[tuple[float, float, float]]:
    """(start, end, duration) of every trial of the sweeps that started; a running one
    ends now."""
    now = time.time()
    out = []
    fields = ("state", "started_at", "finished_at")
    docs = [
        d
        for sweep_id in sweep_ids
        for d in stack.store.reads.changed_rows(sweep_id, None, fields)[0]
    ]
    for doc in docs:
        if not isinstance(doc.get("started_at"), datetime):
            continue
        start = doc["started_at"].timestamp()
        end = (
            doc["finished_at"].timestamp() if isinstance(doc.get("finished_at"), datetime) else now
        )
        out.append((start, end, end - start))
    return out


def worker_seconds(stack: Stack, sweep_ids: list[str], since: float, until: float) -> float:
    """The worker time the sweeps' trials took between `since` and `until` (one message
    per trial: ``fuse: off``, so a trial's start and finish are its worker's)."""
    return sum(max(0.0, min(e, until) - max(s, since)) for s, e, _ in intervals(stack, sweep_ids))


def median_duration(stack: Stack, sweep_id: str) -> float:
    finished = [d for s, e, d in intervals(stack, [sweep_id])
                if e < time.time() - 0.01]  # fmt: skip
    return statistics.median(finished)


@pytest.mark.parametrize("schedulers", ["one", "two, one killed -9"])
def test_a_late_small_sweep_gets_half_the_workers_and_a_high_one_goes_first(
    stack: Stack, schedulers: str
) -> None:
    stack.start_worker(concurrency=2)
    started = [Scheduler(stack.env, stack.tmp / f"s-{uuid.uuid4().hex[:6]}.log", LEASE)]
    if schedulers != "one":
        started.append(Scheduler(stack.env, stack.tmp / f"s-{uuid.uuid4().hex[:6]}.log", LEASE))
    try:
        wait_for(
            lambda: stack.store.shares.workers() == 2, 120, "the workers to be counted", every=0.5
        )
        a, _ = submit(stack, grid("big", 1000), "alice")
        wait_for(lambda: stack.store.reads.counts(a)["complete"] >= 8, 60, "alice's first trials")
        if schedulers != "one":
            # kill -9 the scheduler feeding alice's sweep: the other takes over its lease.
            holder = stack.store.reads.get_sweep(a)["lease"]["owner"]
            victim = next(s for s in started if f":{s.proc.pid}:" in holder)
            victim.kill_all()
            survivor = next(s for s in started if s is not victim)
            wait_for(
                lambda: (
                    f":{survivor.proc.pid}:"
                    in (stack.store.reads.get_sweep(a)["lease"] or {}).get("owner", "")
                ),
                30,
                "the other scheduler to take alice's sweep over",
            )
        median = median_duration(stack, a)
        b, b_at = submit(stack, grid("small", 200), "bob")
        b_start = wait_for(lambda: first_start(stack, b), 60, "bob's first trial")
        assert b_start - b_at <= 2 * median + 0.5, (b_start - b_at, median)

        since = time.time() + 1.0  # a trial's time for the windows to settle
        time.sleep(1.0 + OBSERVE_SECONDS)
        until = time.time()
        alice = worker_seconds(stack, [a], since, until)
        bob = worker_seconds(stack, [b], since, until)
        share = alice / (alice + bob)
        assert 0.4 <= share <= 0.6, (alice, bob, share)
        assert stack.store.reads.counts(b)["queued"] > 0, ("bob's sweep ended too soon", median)

        median = median_duration(stack, a)
        c, c_at = submit(stack, grid("urgent", 6, "high"), "carol")
        c_start = wait_for(lambda: first_start(stack, c), 60, "carol's first trial", every=0.05)
        assert c_start - c_at <= median + 0.5, (c_start - c_at, median)
        print(
            f"[{schedulers}] median {median:.2f} s; bob started after {b_start - b_at:.2f} s; "
            f"alice's share {share:.0%}; the high sweep started after {c_start - c_at:.2f} s"
        )
        stack.wait_finished(c, 60)
    finally:
        for s in started:
            s.stop()
