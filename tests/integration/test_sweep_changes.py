"""Pausing, extending and adding values to a running sweep with everything real: Celery
worker processes train the trials (1 epoch, small nets, digits) and `sweepstack scheduler`
processes feed them, one killed -9 part way through each test.

What a user relies on (#32): extending a running TPE sweep from 40 to 60 trials creates
exactly 20 more, none repeating an asked point; adding a value to a grid dimension creates
exactly the new combinations; a paused sweep starts no trial after the pause, and its
trials left queued are trained once it resumes. One stack serves the module.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from core.store import changes
from core.store.records import flatten_params
from scheduler.submit import submit_sweep
from tests.integration.stack import Scheduler, Stack, wait_for
from tests.integration.test_feed_workers import LEASE, TERMINAL, logs, tpe

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def fed(
    broker_url: str, secantus_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """A stack with one worker of two processes, and a small feeding window."""
    tmp = tmp_path_factory.mktemp("changes")
    stack = Stack(broker_url, secantus_url, f"sweepstack_test_{uuid.uuid4().hex[:10]}", tmp)
    stack.env["SWEEPSTACK_FEED_WINDOW"] = "4"
    try:
        stack.start_worker(concurrency=2)
        yield stack
    finally:
        stack.close()


@pytest.fixture
def started(fed: Stack) -> Iterator[list[Scheduler]]:
    """Schedulers a test starts, stopped after it."""
    out: list[Scheduler] = []
    yield out
    for s in out:
        s.stop()


def start(fed: Stack, out: list[Scheduler]) -> Scheduler:
    s = Scheduler(fed.env, fed.tmp / f"scheduler-{uuid.uuid4().hex[:6]}.log", LEASE)
    out.append(s)
    return s


def trials(fed: Stack, sweep_id: str) -> list[dict[str, Any]]:
    return list(fed.store.db["trials"].find({"sweep_id": sweep_id}))


def check_each_once(fed: Stack, sweep_id: str, n: int) -> list[dict[str, Any]]:
    """Exactly `n` trials, every point and index once, each ended after one claim."""
    docs = trials(fed, sweep_id)
    assert len(docs) == n
    assert len({d["index"] for d in docs}) == n
    points = {repr(sorted(flatten_params(d["params"]).items())) for d in docs}
    assert len(points) == n  # no point asked twice
    assert [d["_id"] for d in docs if d["state"] not in TERMINAL or d["attempt"] != 1] == []
    counts = fed.store.reads.counts(sweep_id)
    assert counts == fed.store.admin.recount(sweep_id)
    sweep = fed.store.reads.get_sweep(sweep_id)
    assert sweep["planned"] == 0 and sweep["trial_count"] == n
    return docs


def test_extending_a_running_tpe_sweep_from_40_to_60_creates_exactly_20_more(
    fed: Stack, started: list[Scheduler]
) -> None:
    sweep_id, _ = fed.submit(tpe(trials=40, parallelism=4, seed=21))
    first = start(fed, started)
    wait_for(lambda: len(trials(fed, sweep_id)) >= 12, 120, "12 trials")
    before = {d["_id"]: d["params"] for d in trials(fed, sweep_id)}
    changes.change_sweep(fed.store, sweep_id, {"trials": 60}, owner=None, by="test")
    # The scheduler rebuilds its feeder on the new spec; then it is killed -9 part way.
    wait_for(lambda: fed.store.reads.get_sweep(sweep_id).get("applied_rev") == 1, 30, "replan")
    wait_for(lambda: len(trials(fed, sweep_id)) >= 30, 120, "30 trials")
    first.kill_all()
    start(fed, started)  # takes over once the dead one's lease runs out
    counts = fed.wait_finished(sweep_id, timeout=300)
    assert counts["complete"] == 60, logs(fed, started)
    docs = check_each_once(fed, sweep_id, 60)
    assert len({d["optuna"]["number"] for d in docs}) == 60
    after = {d["_id"]: d["params"] for d in docs}
    assert all(after[tid] == params for tid, params in before.items())  # ids and points kept


def test_adding_a_value_to_a_grid_creates_exactly_the_new_combinations(
    fed: Stack, started: list[Scheduler]
) -> None:
    sweep_id, total = fed.submit(
        f"name: grid-{uuid.uuid4().hex[:6]}\ndataset: {{name: digits}}\n"
        "execution: {device: cpu, fuse: off}\n"
        "model: {hidden_layers: 1, hidden_units: [4, 8, 12, 16], activation: [relu, tanh]}\n"
        "training: {epochs: 1, batch_size: 256}\n"
        "objective: {metric: val_accuracy, direction: max}\n"
    )
    assert total == 8
    first = start(fed, started)
    wait_for(lambda: len(trials(fed, sweep_id)) >= 4, 120, "4 trials")
    done = changes.change_sweep(fed.store, sweep_id, {"add": {"model.activation": ["elu"]}},
                                owner=None, by="test")  # fmt: skip
    assert done["summary"] == 'model.activation + ["elu"]'
    first.kill_all()  # maybe before its feeder saw the change: the next one applies it
    start(fed, started)
    wait_for(lambda: fed.store.reads.get_sweep(sweep_id).get("applied_rev") == 1, 30, "replan")
    counts = fed.wait_finished(sweep_id, timeout=300)
    assert counts["complete"] == 12, logs(fed, started)
    docs = check_each_once(fed, sweep_id, 12)
    combos = {(p["model.hidden_units"], p["model.activation"])
              for p in (flatten_params(d["params"]) for d in docs)}  # fmt: skip
    assert combos == {(w, a) for w in (4, 8, 12, 16) for a in ("relu", "tanh", "elu")}


def test_a_paused_sweep_starts_no_trial_after_the_pause_and_goes_on_when_resumed(
    fed: Stack, started: list[Scheduler]
) -> None:
    # Batches of four: trials of ~0.3 s, so that some wait in the broker at the pause.
    sweep_id, _ = fed.submit(tpe(trials=14, parallelism=4, seed=8).replace(
        "batch_size: 256", "batch_size: 4"))  # fmt: skip
    first = start(fed, started)

    def waiting() -> bool:
        """Some trials complete, and some sent but not claimed: their messages wait in the
        broker (the worker's two processes each hold one message at a time)."""
        docs = trials(fed, sweep_id)
        complete = sum(d["state"] == "complete" for d in docs)
        return complete >= 2 and sum(d["state"] == "queued" for d in docs) >= 2

    wait_for(waiting, 120, "trials waiting in the broker")
    changes.pause_sweep(fed.store, sweep_id, owner=None, by="test")
    paused_at = fed.store.reads.get_sweep(sweep_id)["paused_at"]
    # Running trials finish; the queued ones stay queued, a scheduler restart included.
    wait_for(lambda: fed.store.reads.counts(sweep_id)["running"] == 0, 60, "running to end")
    first.kill_all()
    start(fed, started)
    # The worker takes the waiting messages and leaves their trials queued, for the feeder
    # to send again on resume.
    wait_for(lambda: fed.store.reads.get_sweep(sweep_id).get("held"), 30, "held trials")
    time.sleep(LEASE + 3)  # the new scheduler has taken the sweep, and sends nothing
    held = fed.store.reads.counts(sweep_id)
    assert held["running"] == 0 and held["queued"] > 0
    late = [d["_id"] for d in trials(fed, sweep_id)
            if d.get("started_at") is not None and d["started_at"] > paused_at]  # fmt: skip
    assert late == [], "trials started after the pause"
    created = len(trials(fed, sweep_id))
    changes.resume_sweep(fed.store, sweep_id, owner=None, by="test")
    resumed_at = fed.store.reads.get_sweep(sweep_id)["changes"][-1]["at"]
    counts = fed.wait_finished(sweep_id, timeout=300)
    assert counts["complete"] == 14, logs(fed, started)
    docs = check_each_once(fed, sweep_id, 14)
    assert created < 14  # nothing new was created while paused
    between = [d["_id"] for d in docs if paused_at < d["started_at"] < resumed_at]
    assert between == []
    assert fed.store.reads.get_sweep(sweep_id).get("held") in (None, [])


def test_a_warm_started_tpe_sweep_trains_better_first_trials_than_a_cold_one(
    fed: Stack, started: list[Scheduler]
) -> None:
    """The McLeod space (configs/mcleod-demo.yaml: 48 nets on digits), each trained for
    real for one epoch: the first 6 trials of TPE warm-started from a 16-trial sweep against
    a cold start's, two fixed seeds each (tests/scheduler/test_changes.py holds the same
    with a cheap stand-in for training, over more sweeps)."""
    from tests.scheduler.test_changes import mcleod_spec

    start(fed, started)
    tag = uuid.uuid4().hex[:6]

    def run(spec: Any) -> tuple[str, list[float]]:
        sweep_id, _ = submit_sweep(spec, fed.store, fed.app, owner="ann")
        counts = fed.wait_finished(sweep_id, timeout=300)
        assert counts["complete"] == spec.search.trials, logs(fed, started)
        docs = sorted(trials(fed, sweep_id), key=lambda d: d["index"])
        return sweep_id, [d["objective"] for d in docs]

    earlier, _ = run(mcleod_spec(f"earlier-{tag}", 16, seed=1))
    cold: list[float] = []
    warm: list[float] = []
    for seed in (3, 4):
        cold += run(mcleod_spec(f"cold-{seed}-{tag}", 6, seed=seed))[1]
        warm += run(mcleod_spec(f"warm-{seed}-{tag}", 6, seed=seed, warm_start=[earlier]))[1]
    print(f"first 6 trials, 2 seeds: warm mean {statistics.mean(warm):.3f}, "
          f"cold mean {statistics.mean(cold):.3f}")  # fmt: skip
    assert statistics.mean(warm) > statistics.mean(cold) + 0.05, (warm, cold)
