"""The order a sweep's messages are sent: most expensive first (pure logic)."""

from __future__ import annotations

import heapq
from pathlib import Path
from typing import Any

import pytest

from core.spec.sweep import load_spec, load_spec_file
from scheduler.cost import estimate_seconds
from scheduler.expand import expand
from scheduler.messages import messages
from scheduler.order import group_cost, order_by_cost, steps, trial_cost

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def config(**sections: dict[str, Any]) -> dict[str, Any]:
    return {"dataset": {"name": "digits"}, **sections}


def makespan(costs: list[float], workers: int) -> float:
    """When the last of `costs` ends if `workers` take them in this order, each when free."""
    free = [0.0] * workers
    for cost in costs:
        heapq.heappush(free, heapq.heappop(free) + cost)
    return max(free)


def test_order_by_cost_is_descending_and_stable() -> None:
    items = ["a", "b", "c", "d", "e"]
    assert order_by_cost(items, [1.0, 5.0, 1.0, 5.0, 3.0]) == ["b", "d", "e", "a", "c"]
    assert order_by_cost([], []) == []


def test_order_by_cost_needs_one_cost_per_item() -> None:
    with pytest.raises(ValueError, match="need one cost per item, got 1 costs for 2 items"):
        order_by_cost(["a", "b"], [1.0])


def test_cost_grows_with_width_depth_epochs_and_data() -> None:
    base = trial_cost(config(model={"hidden_units": 256, "hidden_layers": 2}))
    assert trial_cost(config(model={"hidden_units": 1024, "hidden_layers": 2})) > base
    assert trial_cost(config(model={"hidden_units": 256, "hidden_layers": 4})) > base
    more_epochs = config(model={"hidden_units": 256, "hidden_layers": 2}, training={"epochs": 40})
    assert trial_cost(more_epochs) > base
    iris = {"dataset": {"name": "iris"}, "model": {"hidden_units": 256, "hidden_layers": 2}}
    assert trial_cost(iris) < base


def test_a_zero_epoch_trial_still_costs_a_step() -> None:
    assert steps(config(training={"epochs": 0})) == 1
    assert trial_cost(config(training={"epochs": 0})) > 0


def test_a_fused_group_shares_the_step_overhead() -> None:
    members = [config(model={"hidden_units": 32}, training={"seed": s}) for s in range(8)]
    alone = [trial_cost(m) for m in members]
    assert max(alone) < group_cost(members) < sum(alone)
    assert group_cost(members[:1]) == alone[0]


def test_messages_go_most_expensive_first() -> None:
    spec = load_spec_file(CONFIGS / "mcleod-demo.yaml")
    trials = expand(spec, with_config=True)
    by_id = {f"s1-{t.id}": t for t in trials}
    for fuse in ("off", "auto"):
        for t in trials:
            t.config.setdefault("execution", {})["fuse"] = fuse
        sent = messages("s1", trials)
        costs = [
            group_cost([by_id[i].config for i in ([ids] if isinstance(ids, str) else ids)])
            for ids, *_ in sent
        ]
        assert costs == sorted(costs, reverse=True)
        first = sent[0][0]
        first_ids = [first] if isinstance(first, str) else first
        assert all(by_id[i].params["model.hidden_units"] == 1024 for i in first_ids)
        assert all(by_id[i].params["model.hidden_layers"] == 4 for i in first_ids)


def test_longest_first_ends_the_mcleod_demo_sooner_on_two_workers() -> None:
    """Expansion order sends the 4 x 1024 nets last; sent first, the tail is short."""
    trials = expand(load_spec_file(CONFIGS / "mcleod-demo.yaml"), with_config=True)
    expansion = [trial_cost(t.config) for t in trials]
    longest_first = sorted(expansion, reverse=True)
    total = sum(expansion)
    assert makespan(longest_first, 2) < makespan(expansion, 2)
    assert makespan(longest_first, 2) <= total / 2 * 1.05


def test_equal_trials_keep_their_expansion_order() -> None:
    spec = load_spec(
        "name: t\ndataset: {name: digits}\ntraining: {seed: [0, 1, 2, 3]}\nexecution: {fuse: off}\n"
    )
    trials = expand(spec, with_config=True)
    assert [ids for ids, *_ in messages("s1", trials)] == [f"s1-{t.id}" for t in trials]


def test_a_caffe_trial_costs_its_graph_and_the_bigger_net_goes_first() -> None:
    document = dict(load_spec_file(CONFIGS / "caffe-sweep.yaml").document)
    document["caffe"] = {**document["caffe"], "layers": {"ip1": {"num_output": [20, 500]}},
                         "solver_params": {"base_lr": [0.01, 0.03]}}  # fmt: skip
    trials = expand(load_spec(document), with_config=True)
    width = {t.id: t.params["caffe.layers.ip1.num_output"] for t in trials}
    assert [width[t.id] for t in trials] == [20, 20, 500, 500]  # expansion: the small ones first
    costs = {t.id: trial_cost(t.config) for t in trials}
    assert len({costs[t.id] for t in trials if width[t.id] == 20}) == 1  # base_lr costs nothing
    small, big = (next(costs[t.id] for t in trials if width[t.id] == w) for w in (20, 500))
    assert big > small > trial_cost(config())  # LeNet's convolutions, not a default MLP
    sent = [ids for ids, *_ in messages("s1", trials)]
    assert [width[i.removeprefix("s1-")] for i in sent] == [500, 500, 20, 20]
    alone = [estimate_seconds([t.config]) for t in trials]
    assert alone[2] > alone[0] > estimate_seconds([{"dataset": {"name": "digits"}}])


def test_a_pruning_grid_feeds_its_cheapest_fifth_first_then_the_rest_longest_first() -> None:
    from scheduler.feed import Feeder
    from scheduler.units import RUNG_WARM_UP

    spec = load_spec_file(CONFIGS / "mcleod-asha.yaml")
    feeder = Feeder(None, None, "", spec, owner="test")  # type: ignore[arg-type]
    asked = feeder.ask(len(feeder.listed.points if feeder.listed else []))[0]
    assert sorted(p.id for p in asked) == sorted(p.id for p in expand(spec))  # each once
    # The feeding order; each window's messages then go most expensive first.
    points = feeder.listed.points if feeder.listed else []
    costs = [trial_cost(p.config) for p in points]
    head = round(RUNG_WARM_UP * len(points))
    assert head == 24
    assert costs[:head] == sorted(costs[:head])  # the cheap ones, cheapest first
    assert max(costs[:head]) <= min(costs[head:])
    assert costs[head:] == sorted(costs[head:], reverse=True)  # then longest first
    # Without pruning the same grid goes longest first from the start.
    plain = load_spec({**spec.document, "pruning": {"algorithm": "none"}})
    unpruned = Feeder(None, None, "", plain, owner="test")  # type: ignore[arg-type]
    costs = [trial_cost(p.config) for p in (unpruned.listed.points if unpruned.listed else [])]
    assert costs == sorted(costs, reverse=True)
