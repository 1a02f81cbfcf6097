"""Pausing, resuming and changing a sweep (`core.store.changes`, `core.spec.changes`), and
warm starts (`scheduler.warm`, ``search.first``), on the real store and RabbitMQ. A stand-in
worker claims and finishes trials through the store, as in test_feed.py; the real Celery
workers and scheduler process are in tests/integration/test_sweep_changes.py."""

from __future__ import annotations

import statistics
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.errors import NotFound, SpecError
from core.spec.sweep import load_spec
from core.store import changes
from core.store.records import flatten_params, sweep_status, utcnow
from scheduler.feed import Feeder
from scheduler.submit import submit_sweep
from tests.core import finish
from tests.integration.stack import Stack
from tests.scheduler.test_feed import (
    WORKER,
    _later,
    asked_points,
    finish_some,
    run_to_end,
    tpe_spec,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def reopen(stack: Stack, sweep_id: str, owner: str = "next") -> Feeder:
    feeder = Feeder.open(stack.store, stack.app, sweep_id, owner=owner)
    assert feeder is not None
    return feeder


def check_whole(stack: Stack, sweep_id: str, total: int) -> None:
    """Exactly `total` trials, every point and index once, the counts as the trials say."""
    docs = stack.store.feeding.feed_trials(sweep_id)
    assert len(docs) == total
    points = asked_points(stack, sweep_id)
    assert len(set(points)) == total
    assert len({d["index"] for d in docs}) == total
    numbers = [(d.get("optuna") or {}).get("number") for d in docs]
    if all(n is not None for n in numbers):
        assert len(set(numbers)) == total
    sweep = stack.store.reads.get_sweep(sweep_id)
    assert sweep["trial_count"] == total and int(sweep.get("planned") or 0) == 0
    assert stack.store.admin.recount(sweep_id) == sweep["counts"]


def test_extending_a_running_tpe_sweep_creates_exactly_the_new_trials_none_asked_twice(
    stack: Stack,
) -> None:
    sweep_id, _ = submit_sweep(tpe_spec(trials=40, parallelism=4), stack.store, stack.app)
    feeder = reopen(stack, sweep_id, "first")
    for _ in range(12):
        feeder.step()
        finish_some(stack, sweep_id, 2)
    before = {d["_id"]: d for d in stack.store.feeding.feed_trials(sweep_id)}
    done = changes.change_sweep(stack.store, sweep_id, {"trials": 60}, owner=None, by="ann")
    assert done["summary"] == "search.trials 40 -> 60"
    assert feeder.step() is False  # its spec changed: a rebuilt feeder takes over
    assert feeder.respecified
    # A restart part way: the rebuilt feeder is killed, its lease runs out, another goes on.
    second = reopen(stack, sweep_id, "second")
    assert stack.store.reads.get_sweep(sweep_id)["planned"] == 60 - len(before)
    for _ in range(3):
        second.step()
        finish_some(stack, sweep_id, 2)
    stack.store.feeding.release_lease(sweep_id, "second")
    run_to_end(stack, sweep_id, reopen(stack, sweep_id, "third"))
    check_whole(stack, sweep_id, 60)
    after = {d["_id"]: d for d in stack.store.feeding.feed_trials(sweep_id)}
    for tid, doc in before.items():  # kept their ids, params and results
        assert after[tid]["params"] == doc["params"]
        if doc["state"] == "complete":
            assert after[tid]["objective"] == doc["objective"]
    history = stack.store.reads.get_sweep(sweep_id)["changes"]
    assert [(c["kind"], c["summary"], c["by"]) for c in history] == [
        ("change", "search.trials 40 -> 60", "ann")
    ]


def test_a_finished_sweep_extended_is_fed_again(stack: Stack) -> None:
    sweep_id, _ = submit_sweep(tpe_spec(trials=6, parallelism=2), stack.store, stack.app)
    run_to_end(stack, sweep_id, reopen(stack, sweep_id))
    assert stack.store.reads.get_sweep(sweep_id)["counts"]["complete"] == 6
    changes.change_sweep(stack.store, sweep_id, {"trials": 9}, owner=None, by=None)
    assert sweep_id in {d["_id"] for d in stack.store.feeding.unfinished_sweeps()}
    run_to_end(stack, sweep_id, reopen(stack, sweep_id))
    check_whole(stack, sweep_id, 9)


def grid_spec() -> Any:
    return load_spec(
        f"name: grid-{uuid.uuid4().hex[:6]}\ndataset: {{name: digits}}\n"
        "model: {hidden_units: [8, 16], activation: {choice: [relu, tanh]}}\n"
        "training: {epochs: 1}\nobjective: {metric: val_accuracy, direction: max}\n"
    )


def test_adding_a_value_to_a_grid_creates_exactly_the_new_combinations(stack: Stack) -> None:
    sweep_id, total = submit_sweep(grid_spec(), stack.store, stack.app, window=2)
    assert total == 4
    feeder = Feeder.open(stack.store, stack.app, sweep_id, owner="a", big_window=2)
    assert feeder is not None
    feeder.step()
    finish_some(stack, sweep_id, 2)
    before = set(asked_points(stack, sweep_id))
    change = {"add": {"model.hidden_units": [32], "model.activation": ["sigmoid"]}}
    done = changes.change_sweep(stack.store, sweep_id, change, owner=None, by=None)
    assert "model.hidden_units + [32]" in done["summary"]
    assert feeder.step() is False
    run_to_end(stack, sweep_id, reopen(stack, sweep_id))
    check_whole(stack, sweep_id, 9)  # 3 widths x 3 activations, the first 4 among them
    assert before <= set(asked_points(stack, sweep_id))
    assert stack.queue_depth() == 9  # one message each: none sent twice


def test_a_narrowed_range_is_searched_inside_and_the_search_keeps_what_it_learned(
    stack: Stack,
) -> None:
    sweep_id, _ = submit_sweep(tpe_spec(trials=20, parallelism=2), stack.store, stack.app)
    feeder = reopen(stack, sweep_id, "a")
    for _ in range(5):
        feeder.step()
        finish_some(stack, sweep_id, 2)
    old = {d["_id"] for d in stack.store.feeding.feed_trials(sweep_id)}
    change = {
        "narrow": {"training.lr": [0.001, 0.01], "model.hidden_units": [16, 48]},
        "add": {"model.activation": ["elu", "gelu"]},
    }
    changes.change_sweep(stack.store, sweep_id, change, owner=None, by=None)
    assert feeder.step() is False
    fresh = reopen(stack, sweep_id, "b")
    told = fresh.session.study.get_trials(deepcopy=False)
    assert sum(t.state.name == "COMPLETE" for t in told) >= 8  # what it learned, outside too
    run_to_end(stack, sweep_id, fresh)
    check_whole(stack, sweep_id, 20)
    activations: set[str] = set()
    for doc in stack.store.feeding.feed_trials(sweep_id):
        if doc["_id"] not in old:
            params = flatten_params(doc["params"])
            assert 0.001 <= params["training.lr"] <= 0.01
            assert 16 <= params["model.hidden_units"] <= 48
            activations.add(params["model.activation"])
    assert activations & {"elu", "gelu"}  # the values added are asked too


def test_changes_that_break_a_rule_are_refused_naming_it_and_change_nothing(
    stack: Stack,
) -> None:
    sweep_id, _ = submit_sweep(tpe_spec(trials=10, parallelism=2), stack.store, stack.app)
    spec_before = stack.store.reads.get_sweep(sweep_id)["spec"]
    for change, path in [
        ({"trials": 5}, "trials"),
        ({"narrow": {"training.lr": [0.00001, 0.01]}}, "narrow.training.lr"),
        ({"add": {"model.activation": ["relu"]}}, "add.model.activation"),
        ({"add": {"model.hidden_units": [100]}}, "add.model.hidden_units"),
        ({"add": {"model.depth": [1]}}, "add.model.depth"),
    ]:
        with pytest.raises(SpecError) as caught:
            changes.change_sweep(stack.store, sweep_id, change, owner=None, by=None)
        assert caught.value.problems[0].path.startswith(path), caught.value
    with pytest.raises(NotFound):
        changes.change_sweep(stack.store, sweep_id, {"trials": 20}, owner="mallory", by=None)
    with pytest.raises(NotFound):
        changes.pause_sweep(stack.store, sweep_id, owner="mallory", by=None)
    sweep = stack.store.reads.get_sweep(sweep_id)
    assert sweep["spec"] == spec_before and not sweep.get("changes")


def test_a_paused_sweep_starts_nothing_and_its_held_trials_go_out_again_on_resume(
    stack: Stack,
) -> None:
    sweep_id, _ = submit_sweep(tpe_spec(trials=12, parallelism=3), stack.store, stack.app)
    feeder = reopen(stack, sweep_id)
    feeder.step()
    running = stack.store.feeding.feed_trials(sweep_id)[0]
    claimed = stack.store.lifecycle.claim(running["_id"], WORKER, stale_after=60)
    assert claimed is not None
    assert changes.pause_sweep(stack.store, sweep_id, owner=None, by="ann")["changed"]
    assert not changes.pause_sweep(stack.store, sweep_id, owner=None, by="ann")["changed"]
    assert sweep_status(stack.store.reads.get_sweep(sweep_id)) == "paused"
    queued = {d["_id"]: d["attempt"] for d in stack.store.feeding.feed_trials(sweep_id)
              if d["state"] == "queued"}  # fmt: skip
    assert len(queued) == 2
    # Both claim paths leave them queued, held: the batched one and the careful one.
    assert stack.store.lifecycle.claim_queued(queued, WORKER) == []
    one = next(iter(queued))
    assert stack.store.lifecycle.claim(one, WORKER, stale_after=60) is None
    sweep = stack.store.reads.get_sweep(sweep_id)
    assert sorted(sweep["held"]) == sorted(queued)
    assert sweep["counts"]["running"] == 1 and sweep["counts"]["queued"] == 11
    for doc in stack.store.feeding.feed_trials(sweep_id, list(queued)):
        assert doc["state"] == "queued" and doc["attempt"] == 0
    # The running trial finishes and is told; nothing new goes out while paused.
    finish(stack.store, running["_id"], claimed["attempt"], "complete",
           result={"val_accuracy": 0.5})  # fmt: skip
    depth = stack.queue_depth()
    for _ in range(3):
        assert feeder.step() is True
    assert len(stack.store.feeding.feed_trials(sweep_id)) == 3
    assert stack.queue_depth() == depth
    # A restart while paused changes nothing; resumed, the held trials go out again.
    stack.store.feeding.release_lease(sweep_id, feeder.owner)
    feeder = reopen(stack, sweep_id, "after")
    feeder.step()
    assert stack.queue_depth() == depth
    assert changes.resume_sweep(stack.store, sweep_id, owner=None, by="ann")["changed"]
    feeder.step()
    assert stack.store.reads.get_sweep(sweep_id)["held"] == []
    assert stack.queue_depth() == depth + 2 + 1  # the two held, and one new in the free place
    run_to_end(stack, sweep_id, feeder)
    check_whole(stack, sweep_id, 12)
    kinds = [c["kind"] for c in stack.store.reads.get_sweep(sweep_id)["changes"]]
    assert kinds == ["pause", "resume"]


def test_search_first_is_asked_before_the_sampler(stack: Stack) -> None:
    spec = tpe_spec(trials=6, parallelism=2)
    doc = dict(spec.document)
    doc["search"] = {**doc["search"], "first": [
        {"model.hidden_units": 5, "training.lr": 0.001, "model.activation": "tanh"},
        {"model.hidden_units": 60},
    ]}  # fmt: skip
    sweep_id, _ = submit_sweep(load_spec(doc), stack.store, stack.app)
    run_to_end(stack, sweep_id, reopen(stack, sweep_id))
    docs = sorted(stack.store.feeding.feed_trials(sweep_id), key=lambda d: d["index"])
    first, second = (flatten_params(d["params"]) for d in docs[:2])
    assert first == {"model.hidden_units": 5, "training.lr": 0.001, "model.activation": "tanh"}
    assert second["model.hidden_units"] == 60
    check_whole(stack, sweep_id, 6)
    bad = dict(doc, search={**doc["search"], "first": [{"model.hidden_units": 500}]})
    with pytest.raises(SpecError, match=r"search\.first\[0\]\.model\.hidden_units"):
        load_spec(bad)


# --- warm starts, on the McLeod space ----------------------------------------------------

#: A made-up accuracy of a McLeod point, deterministic (no training: see the test's
#: docstring), shaped as the paper's plateaus: sigmoid nets fall apart with depth, narrow
#: nets lose a little, past a few hundred units nothing is gained.
_WIDTH = {16: -0.12, 64: -0.04, 256: 0.0, 1024: -0.01}


def mcleod_accuracy(params: dict[str, Any]) -> float:
    depth, width = params["model.hidden_layers"], params["model.hidden_units"]
    act = params["model.activation"]
    loss = 0.25 * (depth - 1) if act == "sigmoid" else 0.02 * abs(depth - 2)
    return round(0.97 + _WIDTH[width] - loss - (0.01 if act == "relu" else 0.0), 4)


def mcleod_spec(name: str, trials: int, seed: int, **search: Any) -> Any:
    doc = yaml.safe_load((ROOT / "configs" / "mcleod-demo.yaml").read_text())
    doc["name"] = name
    doc["training"]["epochs"] = 1
    doc["search"] = {"algorithm": "tpe", "trials": trials, "parallelism": 1, "seed": seed,
                     **search}  # fmt: skip
    return load_spec(doc)


def run_mcleod(stack: Stack, spec: Any, owner: str | None = None) -> tuple[str, list[float]]:
    """Run a McLeod sweep to its end, one trial at a time; its objectives in asked order."""
    sweep_id, _ = submit_sweep(spec, stack.store, stack.app, owner=owner)
    feeder = reopen(stack, sweep_id)
    for _ in range(500):
        if not feeder.step():
            break
        for doc in stack.store.feeding.feed_trials(sweep_id):
            if doc["state"] == "queued":
                claimed = stack.store.lifecycle.claim(doc["_id"], WORKER, stale_after=60)
                value = mcleod_accuracy(flatten_params(doc["params"]))
                finish(stack.store, doc["_id"], claimed["attempt"], "complete",
                       result={"val_accuracy": value})  # fmt: skip
    docs = sorted(stack.store.feeding.feed_trials(sweep_id), key=lambda d: d["index"])
    return sweep_id, [d["objective"] for d in docs]


def test_a_warm_started_tpe_sweep_asks_better_points_first_than_a_cold_one(
    stack: Stack,
) -> None:
    """The McLeod space (configs/mcleod-demo.yaml, 48 points) with a cheap deterministic
    objective in place of training (`mcleod_accuracy`): TPE's first ten trials are random
    when it starts cold (n_startup_trials), and use the earlier sweep's results when warm.
    Fixed seeds; the first 8 trials of three sweeps each way."""
    earlier, _ = run_mcleod(stack, mcleod_spec("mcleod-earlier", 16, seed=1), owner="ann")
    tag = uuid.uuid4().hex[:6]
    cold: list[float] = []
    warm: list[float] = []
    for seed in (3, 4, 5):
        cold += run_mcleod(stack, mcleod_spec(f"cold-{seed}-{tag}", 8, seed=seed), "ann")[1]
        warm_spec = mcleod_spec(f"warm-{seed}-{tag}", 8, seed=seed, warm_start=[earlier])
        warm_id, values = run_mcleod(stack, warm_spec, owner="ann")
        warm += values
    print(f"first 8 trials, 3 seeds: warm mean {statistics.mean(warm):.3f}, "
          f"cold mean {statistics.mean(cold):.3f}")  # fmt: skip
    assert statistics.mean(warm) > statistics.mean(cold) + 0.05, (warm, cold)
    assert len(stack.store.reads.get_sweep(warm_id)["warm_trials"]) == 16
    # Restarted, its session is told the same earlier trials first: the numbers hold.
    stack.store._state.clock = lambda: utcnow() + _later()
    rebuilt = reopen(stack, warm_id, "later")
    assert rebuilt.session.trials_in_study >= 16 + 8


def test_warm_start_refuses_another_owners_sweep_and_an_incompatible_space(
    stack: Stack,
) -> None:
    earlier, _ = run_mcleod(stack, mcleod_spec(f"e-{uuid.uuid4().hex[:6]}", 4, seed=1),
                            owner="ann")  # fmt: skip
    with pytest.raises(NotFound):
        submit_sweep(mcleod_spec("w", 4, seed=1, warm_start=[earlier]), stack.store,
                     stack.app, owner="bob")  # fmt: skip
    with pytest.raises(NotFound):
        submit_sweep(mcleod_spec("w", 4, seed=1, warm_start=["nope"]), stack.store,
                     stack.app, owner="ann")  # fmt: skip
    # A dimension varied there and neither varied nor set here: refused, named.
    doc = mcleod_spec("w", 4, seed=1, warm_start=[earlier]).document
    doc = {**doc, "model": {k: v for k, v in doc["model"].items() if k != "hidden_layers"}}
    with pytest.raises(SpecError, match=r"search\.warm_start\[0\].*hidden_layers"):
        submit_sweep(load_spec(doc), stack.store, stack.app, owner="ann")
    # Set here instead: mapped (only the earlier trials at that value are told).
    doc["model"]["hidden_layers"] = 2
    sweep_id, _ = submit_sweep(load_spec(doc), stack.store, stack.app, owner="ann")
    kept = stack.store.reads.get_sweep(sweep_id)["warm_trials"]
    depths = {
        flatten_params(d["params"])["model.hidden_layers"]
        for d in stack.store.feeding.feed_trials(earlier, kept)
    }
    assert depths <= {2}
    # Another objective: refused.
    other = mcleod_spec("w", 4, seed=1, warm_start=[earlier]).document
    other = {**other, "objective": {"metric": "val_loss", "direction": "minimize"}}
    with pytest.raises(SpecError, match="same objectives"):
        submit_sweep(load_spec(other), stack.store, stack.app, owner="ann")


def test_the_history_keeps_the_latest_entries(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    from core.store import admin

    monkeypatch.setattr(admin, "MAX_CHANGES", 3)
    sweep_id, _ = submit_sweep(tpe_spec(trials=4, parallelism=2), stack.store, stack.app)
    for _ in range(3):
        changes.pause_sweep(stack.store, sweep_id, owner=None, by="a")
        changes.resume_sweep(stack.store, sweep_id, owner=None, by="b")
    kept = stack.store.reads.get_sweep(sweep_id)["changes"]
    assert [(c["kind"], c["by"]) for c in kept] == [
        ("resume", "b"), ("pause", "a"), ("resume", "b")
    ]  # fmt: skip
