"""The feeding loop on the real store and RabbitMQ: exact budgets, windows, restarts, the
lease, and a 50,000-trial grid counted whole at once. A stand-in worker claims and finishes
trials through the store (what a worker's lifecycle writes are); the real Celery workers
run in tests/integration/test_feed_workers.py."""

from __future__ import annotations

import itertools
import math
import time
import uuid
from typing import Any

import pytest

from core.spec.sweep import load_spec
from core.store.records import flatten_params, utcnow
from scheduler.feed import Feeder, owner_name
from scheduler.submit import submit_sweep
from tests.core import finish
from tests.integration.stack import Stack

pytestmark = pytest.mark.integration

WORKER = {"host": "test", "pid": 1, "name": "stand-in"}


def tpe_spec(trials: int = 40, parallelism: int = 4, seed: int = 7) -> Any:
    return load_spec(
        f"name: tpe-{uuid.uuid4().hex[:6]}\ndataset: {{name: digits}}\n"
        "model: {hidden_units: {int: [4, 64]}, activation: [relu, tanh]}\n"
        "training: {epochs: 1, lr: {loguniform: [0.0001, 0.1]}}\n"
        "objective: {metric: val_accuracy, direction: max}\n"
        f"search: {{algorithm: tpe, trials: {trials}, parallelism: {parallelism}, "
        f"seed: {seed}}}\n"
    )


def objective(params: dict[str, Any]) -> float:
    """A made-up result of the params: deterministic, so replays see the same results."""
    width = params.get("model.hidden_units", 40)
    return 1.0 - abs(math.log(params.get("training.lr", 0.0067)) + 5) / 10 - abs(width - 40) / 200


def in_flight(stack: Stack, sweep_id: str) -> int:
    sweep = stack.store.reads.get_sweep(sweep_id)
    counts = sweep["counts"]
    return counts["queued"] - int(sweep.get("planned") or 0) + counts["running"]


def finish_some(stack: Stack, sweep_id: str, k: int) -> int:
    """Claim and complete up to `k` queued trials, as a worker would."""
    done = 0
    for doc in stack.store.feeding.feed_trials(sweep_id):
        if done == k:
            break
        if doc["state"] != "queued":
            continue
        claimed = stack.store.lifecycle.claim(doc["_id"], WORKER, stale_after=60)
        assert claimed is not None
        value = objective(flatten_params(doc["params"]))
        finish(
            stack.store, doc["_id"], claimed["attempt"], "complete", result={"val_accuracy": value}
        )
        done += 1
    return done


def counting(target: Any, name: str) -> list[int]:
    """Count the calls of `target.name` from now on (one item each); it still runs."""
    calls: list[int] = []
    method = getattr(target, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return method(*args, **kwargs)

    setattr(target, name, counted)
    return calls


def asked_points(stack: Stack, sweep_id: str) -> list[str]:
    docs = sorted(stack.store.feeding.feed_trials(sweep_id), key=lambda d: d["index"])
    return [repr(sorted(flatten_params(d["params"]).items())) for d in docs]


def run_to_end(stack: Stack, sweep_id: str, feeder: Feeder, per_step: int = 2) -> int:
    most = 0
    for _ in range(500):
        alive = feeder.step()
        most = max(most, in_flight(stack, sweep_id))
        if not alive:
            return most
        finish_some(stack, sweep_id, per_step)
    raise AssertionError("the sweep did not end")


def test_tpe_creates_exactly_its_budget_never_more_than_parallelism_in_flight(
    stack: Stack,
) -> None:
    spec = tpe_spec()
    sweep_id, total = submit_sweep(spec, stack.store, stack.app)
    assert total == 40
    assert stack.store.reads.counts(sweep_id)["queued"] == 40  # planned ones count from the start
    assert len(stack.store.feeding.feed_trials(sweep_id)) == 4
    feeder = Feeder.open(stack.store, stack.app, sweep_id, owner=owner_name())
    assert feeder is not None
    most = run_to_end(stack, sweep_id, feeder)
    assert most <= 4
    docs = stack.store.feeding.feed_trials(sweep_id)
    assert len(docs) == 40
    assert len(set(asked_points(stack, sweep_id))) == 40
    assert sorted(d["index"] for d in docs) == list(range(40))
    assert stack.store.reads.counts(sweep_id)["complete"] == 40
    assert stack.store.admin.recount(sweep_id)["complete"] == 40
    assert stack.queue_depth() == 40  # one message per trial, none sent twice


def fused_spec(trials: int = 40, parallelism: int = 3) -> Any:
    """Small nets that fuse (`scheduler.grouping.fused_size`: groups of 6, the cap)."""
    return load_spec(
        f"name: fused-{uuid.uuid4().hex[:6]}\ndataset: {{name: digits}}\n"
        "model: {hidden_units: [16, 32, 64], activation: [relu, tanh]}\n"
        "training: {epochs: 20, lr: {loguniform: [0.001, 0.3]}, batch_size: [32, 64]}\n"
        "objective: {metric: val_accuracy, direction: max}\n"
        f"search: {{algorithm: tpe, trials: {trials}, parallelism: {parallelism}, seed: 3}}\n"
    )


def live_units(stack: Stack, sweep_id: str) -> dict[int, list[dict[str, Any]]]:
    units: dict[int, list[dict[str, Any]]] = {}
    for doc in stack.store.feeding.feed_trials(sweep_id):
        if doc["state"] in ("queued", "running"):
            units.setdefault(doc["optuna"]["unit"], []).append(doc)
    return units


def test_an_adaptive_search_asks_fused_groups_and_its_window_counts_each_once(
    stack: Stack,
) -> None:
    spec = fused_spec()
    sweep_id, total = submit_sweep(spec, stack.store, stack.app, workers=2)
    assert total == 40
    units = live_units(stack, sweep_id)
    assert [len(u) for u in units.values()] == [6, 6, 6]  # parallelism 3: three units of 6
    for members in units.values():
        params = [flatten_params(d["params"]) for d in members]
        shared = {(p["model.activation"], p["training.batch_size"]) for p in params}
        assert len(shared) == 1  # what a fused group must share, the sampler was told
        assert len({p["training.lr"] for p in params}) == 6
    assert stack.queue_depth() == 3  # one fused group a unit
    feeder = Feeder.open(stack.store, stack.app, sweep_id, owner=owner_name(), workers=2)
    assert feeder is not None  # rebuilt from the store: its units too
    most = 0
    for _ in range(500):
        alive = feeder.step()
        most = max(most, len(live_units(stack, sweep_id)))
        if not alive:
            break
        finish_some(stack, sweep_id, 3)
    assert not alive
    assert most == 3  # never more units in flight than the window, refilled unit by unit
    docs = stack.store.feeding.feed_trials(sweep_id)
    assert len(docs) == 40 == len(set(asked_points(stack, sweep_id)))
    assert stack.store.reads.counts(sweep_id)["complete"] == 40
    assert stack.queue_depth() == 7  # 40 trials in seven fused messages, none sent twice


def test_a_killed_feeder_is_rebuilt_without_asking_twice_and_replays_the_same_points(
    stack: Stack,
) -> None:
    spec = tpe_spec(trials=24, parallelism=3, seed=11)
    sweep_id, _ = submit_sweep(spec, stack.store, stack.app)
    first = Feeder.open(stack.store, stack.app, sweep_id, owner="a", lease_seconds=1)
    assert first is not None
    for _ in range(4):
        first.step()
        finish_some(stack, sweep_id, 2)
    # "kill -9" between storing and sending: a window stored, never sent.
    points, extras = first.ask(2)
    stack.store.feeding.begin_sending(sweep_id, [f"{sweep_id}-{p.id}" for p in points])
    stack.store.feeding.add_trials(sweep_id, first.spec, points, extras)
    del first  # no release: the lease runs out
    stack.store._state.clock = lambda: utcnow() + _later()
    second = Feeder.open(stack.store, stack.app, sweep_id, owner="b")
    assert second is not None
    assert stack.store.reads.get_sweep(sweep_id)["sending"] == []  # the rebuild sent them
    run_to_end(stack, sweep_id, second)
    killed = asked_points(stack, sweep_id)
    assert len(killed) == len(set(killed)) == 24

    # The same seed and results, never interrupted: the same points in the same order.
    spec2 = load_spec({**spec.document, "name": spec.name})
    replay_id, _ = submit_sweep(spec2, stack.store, stack.app)
    feeder = Feeder.open(stack.store, stack.app, replay_id, owner="c")
    assert feeder is not None
    run_to_end(stack, replay_id, feeder)
    assert asked_points(stack, replay_id) == killed


def _later() -> Any:
    from datetime import timedelta

    return timedelta(seconds=5)


def test_only_the_lease_holder_feeds(stack: Stack) -> None:
    sweep_id, _ = submit_sweep(tpe_spec(trials=10, parallelism=2), stack.store, stack.app)
    one = Feeder.open(stack.store, stack.app, sweep_id, owner="one")
    two = Feeder.open(stack.store, stack.app, sweep_id, owner="two")
    assert one is not None and two is None
    assert stack.store.feeding.take_lease(sweep_id, "two", 30) is False
    one.close()  # gives the lease back
    assert stack.store.feeding.take_lease(sweep_id, "two", 30) is True
    assert one.step() is False  # one lost it: it stops feeding


def test_cancel_stops_feeding_and_drops_planned_trials(stack: Stack) -> None:
    sweep_id, _ = submit_sweep(tpe_spec(trials=10, parallelism=2), stack.store, stack.app)
    feeder = Feeder.open(stack.store, stack.app, sweep_id, owner="x")
    assert feeder is not None
    stack.store.admin.cancel_sweep(sweep_id)
    assert feeder.step() is False
    sweep = stack.store.reads.get_sweep(sweep_id)
    assert sweep["counts"]["cancelled"] == 2 and sweep["counts"]["queued"] == 0
    assert sweep["trial_count"] == 2 and sweep["planned"] == 0
    assert stack.store.admin.recount(sweep_id)["cancelled"] == 2


def test_a_50000_trial_grid_counts_whole_at_once(stack: Stack) -> None:
    spec = load_spec(
        f"name: big-{uuid.uuid4().hex[:6]}\ndataset: {{name: digits}}\n"
        "model: {hidden_units: {range: [1, 1001, 1]}, hidden_layers: {range: [1, 11, 1]}, "
        "activation: [relu, tanh, sigmoid, elu, gelu]}\n"
        "training: {epochs: 1}\nobjective: {metric: val_accuracy, direction: max}\n"
    )
    sweep_id, total = submit_sweep(spec, stack.store, stack.app, window=500)
    assert total == 50_000
    assert stack.store.reads.counts(sweep_id)["queued"] == 50_000
    assert stack.store.reads.get_sweep(sweep_id)["trial_count"] == 50_000
    assert len(stack.store.feeding.feed_trials(sweep_id)) == 500
    feeder = Feeder.open(stack.store, stack.app, sweep_id, owner="g", big_window=500)
    assert feeder is not None
    feeder.step()  # the window is full: nothing more
    assert len(stack.store.feeding.feed_trials(sweep_id)) == 500
    finish_some(stack, sweep_id, 100)
    feeder.step()
    assert len(stack.store.feeding.feed_trials(sweep_id)) == 600
    counts = stack.store.reads.counts(sweep_id)
    assert counts["queued"] == 49_900 and counts["complete"] == 100
    assert stack.queue_depth() == 600


def test_a_feeder_killed_between_creating_trials_and_moving_the_plan_is_repaired(
    stack: Stack,
) -> None:
    """kill -9 after `add_trials` inserted a window but before it moved ``planned``: the
    next feeder sets ``planned`` from the trials there are, and the counts stay whole."""
    sweep_id, _ = submit_sweep(tpe_spec(trials=12, parallelism=3), stack.store, stack.app)
    first = Feeder.open(stack.store, stack.app, sweep_id, owner="k", lease_seconds=1)
    assert first is not None
    finish_some(stack, sweep_id, 2)
    points, extras = first.ask(2)
    stack.store.feeding.add_trials(sweep_id, first.spec, points, extras)
    stack.store.db["sweeps"].update_one({"_id": sweep_id}, {"$inc": {"planned": 2}})  # not moved
    assert sum(stack.store.reads.counts(sweep_id).values()) == 12
    stack.store.feeding.release_lease(sweep_id, "k")
    second = Feeder.open(stack.store, stack.app, sweep_id, owner="r")
    assert second is not None
    sweep = stack.store.reads.get_sweep(sweep_id)
    assert sweep["planned"] == 12 - 5 and sum(sweep["counts"].values()) == 12
    assert stack.store.admin.recount(sweep_id) == sweep["counts"]
    run_to_end(stack, sweep_id, second)
    assert len(stack.store.feeding.feed_trials(sweep_id)) == 12
    assert stack.store.reads.counts(sweep_id)["complete"] == 12
    assert stack.store.admin.recount(sweep_id)["complete"] == 12


def test_counts_left_one_off_by_a_kill_mid_finish_are_recounted_once_they_stop_moving(
    stack: Stack,
) -> None:
    """kill -9 between a finish's trial write and its counter write: the counts say one
    trial still runs, so the sweep would never end. The feeder recounts once the counts
    have not moved for its stall wait, then ends the sweep; the wait doubles while they
    stay still (no recount on every step of a long epoch)."""
    sweep_id, _ = submit_sweep(tpe_spec(trials=4, parallelism=4), stack.store, stack.app)
    feeder = Feeder.open(stack.store, stack.app, sweep_id, owner="s")
    assert feeder is not None
    feeder.stall_seconds = 0.3
    assert finish_some(stack, sweep_id, 4) == 4
    # The last finish's counter write never landed: one still "running".
    stack.store.db["sweeps"].update_one(
        {"_id": sweep_id}, {"$inc": {"counts.complete": -1, "counts.running": 1}}
    )
    assert feeder.step() is True  # counts just seen: no recount yet
    assert stack.store.reads.counts(sweep_id)["running"] == 1
    time.sleep(0.4)
    assert feeder.step() is False  # stalled: recounted, nothing in flight, done
    assert stack.store.reads.counts(sweep_id)["complete"] == 4
    assert stack.store.reads.counts(sweep_id)["running"] == 0


def test_counts_left_off_by_a_kill_mid_claim_are_recounted_at_once(stack: Stack) -> None:
    """kill -9 between a claim's trial write and its counter write (CI, the poison test:
    a worker killed the instant its trial showed "running"): once the trial ends the counts
    say one queued and minus one running. Nothing looks in flight, yet the sweep looks
    unfinished to the schedulers, so a feeder that stopped would be opened again forever.
    The feeder recounts at once and ends the sweep."""
    sweep_id, _ = submit_sweep(tpe_spec(trials=2, parallelism=2), stack.store, stack.app)
    feeder = Feeder.open(stack.store, stack.app, sweep_id, owner="c")
    assert feeder is not None
    assert finish_some(stack, sweep_id, 2) == 2
    stack.store.db["sweeps"].update_one(
        {"_id": sweep_id}, {"$inc": {"counts.queued": 1, "counts.running": -1}}
    )
    assert [d["_id"] for d in stack.store.feeding.unfinished_sweeps()] == [sweep_id]
    assert feeder.step() is False
    counts = stack.store.reads.counts(sweep_id)
    assert (counts["queued"], counts["running"], counts["complete"]) == (0, 0, 2)
    assert sweep_id not in [d["_id"] for d in stack.store.feeding.unfinished_sweeps()]


def test_a_long_epoch_is_recounted_with_a_doubling_wait(stack: Stack) -> None:
    sweep_id, _ = submit_sweep(tpe_spec(trials=2, parallelism=2), stack.store, stack.app)
    feeder = Feeder.open(stack.store, stack.app, sweep_id, owner="l")
    assert feeder is not None
    feeder.stall_seconds = 0.2
    doc = stack.store.feeding.feed_trials(sweep_id)[0]
    assert stack.store.lifecycle.claim(doc["_id"], WORKER, stale_after=60) is not None
    revs = []
    started = time.monotonic()
    for _ in range(12):
        assert feeder.step() is True
        revs.append(stack.store.reads.get_sweep(sweep_id)["counts_rev"])
        time.sleep(0.1)
    elapsed = time.monotonic() - started
    recounts = sum(1 for a, b in itertools.pairwise(revs) if b != a)
    # Waits of 0.2, 0.4, 0.8 ... s: k recounts take at least 0.2 * (2**k - 1) s.
    most = math.floor(math.log2(elapsed / 0.2 + 1))
    assert 1 <= recounts <= most, (revs, elapsed)
    assert stack.store.reads.counts(sweep_id)["running"] == 1  # a real running trial stays


def test_a_step_renews_the_lease_a_quarter_through_it_and_a_stalled_one_learns_it_lost_it(
    stack: Stack,
) -> None:
    from scheduler.feed import RENEW_SHARE

    sweep_id, _ = submit_sweep(tpe_spec(trials=10, parallelism=2), stack.store, stack.app)
    feeder = Feeder.open(stack.store, stack.app, sweep_id, owner="one", lease_seconds=4)
    assert feeder is not None
    taken = stack.store.reads.get_sweep(sweep_id)["lease"]
    assert feeder.step() is True
    assert stack.store.reads.get_sweep(sweep_id)["lease"] == taken  # too soon to renew
    feeder._renewed -= RENEW_SHARE * 4  # a quarter of the lease later
    assert feeder.step() is True
    renewed = stack.store.reads.get_sweep(sweep_id)["lease"]
    assert renewed["owner"] == "one" and renewed["expires"] >= taken["expires"]
    # A stall past the lease: another takes the sweep; the first step after it renews,
    # finds the lease gone and stops before it feeds anything.
    stack.store._state.clock = lambda: utcnow() + _later()
    assert stack.store.feeding.take_lease(sweep_id, "two", 30) is True
    feeder._renewed -= 10
    assert feeder.step() is False
    assert stack.store.reads.get_sweep(sweep_id)["lease"]["owner"] == "two"


def test_a_step_reads_the_trials_in_flight_only_when_the_counts_say_one_ended(
    stack: Stack,
) -> None:
    sweep_id, _ = submit_sweep(tpe_spec(trials=12, parallelism=3), stack.store, stack.app)
    feeder = Feeder.open(stack.store, stack.app, sweep_id, owner="x")
    assert feeder is not None
    reads = counting(stack.store.feeding, "feed_trials")
    assert feeder.step() is True
    assert len(reads) == 1  # the first step reads them
    assert feeder.step() is True
    assert len(reads) == 1  # nothing ended: no read
    assert finish_some(stack, sweep_id, 2) == 2  # (reads them too)
    before = len(reads)
    assert feeder.step() is True
    assert len(reads) == before + 1
    assert in_flight(stack, sweep_id) == 3  # and the two told were replaced at once


def pruned_spec(pruning: str) -> Any:
    return load_spec(
        f"name: pruned-{uuid.uuid4().hex[:6]}\ndataset: {{name: digits}}\n"
        "model: {hidden_units: {int: [4, 64]}}\n"
        "training: {epochs: 9, lr: {loguniform: [0.0001, 0.1]}}\n"
        "objective: {metric: val_accuracy, direction: max}\n"
        "search: {algorithm: tpe, trials: 6, parallelism: 6, seed: 3}\n"
        f"pruning: {pruning}\n"
    )


@pytest.mark.parametrize(
    ("pruning", "reads"),
    [
        # At a successive-halving rung the value there is all the pruner judges on.
        ("{algorithm: asha, min_resource: 3, reduction_factor: 3}", 0),
        # A pruner the scheduler runs after any epoch (successive halving whose rungs wait
        # for the trials: min_resource auto) judges every value: epochs 1-2 were never read.
        ("{algorithm: asha, reduction_factor: 3}", 1),
    ],
)
def test_a_decision_reads_the_rows_only_where_the_progress_is_not_all_the_pruner_needs(
    stack: Stack, pruning: str, reads: int
) -> None:
    from tests.core import report

    sweep_id, _ = submit_sweep(pruned_spec(pruning), stack.store, stack.app)
    feeder = Feeder.open(stack.store, stack.app, sweep_id, owner="j")
    assert feeder is not None and feeder.step() is True
    ids = [d["_id"] for d in stack.store.feeding.feed_trials(sweep_id)]
    for value, tid in enumerate(ids[:3]):
        claimed = stack.store.lifecycle.claim(tid, WORKER, stale_after=60)
        assert claimed is not None
        for epoch in (1, 2, 3):
            report(stack.store, tid, 1, epoch, {"val_accuracy": 0.1 * value + 0.01 * epoch})
    counted = counting(stack.store.feeding, "epoch_rows")
    assert feeder.judge() is True
    assert len(counted) == reads
    verdicts = stack.store.lifecycle.judged(dict.fromkeys(ids[:3], 1))
    assert all(v.answer == "prune" or v.epoch == 3 for v in verdicts.values())
    assert stack.store.feeding.awaiting(ids[:3]) == {}  # every one judged
