"""Counting a spec's trials (`scheduler.expand.tally`): in bounded time whatever its
conditional dimensions, and always the number of trials expansion gives."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from core.errors import TooManyTrials
from core.spec.sweep import load_spec
from scheduler.expand import expand, tally
from tests.scheduler.test_expand import spec

SEVEN = {
    "lr": [0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.007, 0.008, 0.009, 0.01],
    "weight_decay": [0.0, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09],
    "momentum": [0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45],
    "beta1": [0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45],
    "beta2": [0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45],
    "lr_gamma": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0],
    "batch_size": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
}


def seven_controllers(dependents: int = 1, gated: bool = False) -> str:
    """Issue 16's reproducer: 7 dimensions of 10 values named in `when:` (6.3 s to count,
    by walking all 10**7 combinations). Each dependent accepts a different value of every
    controller, so the values fall into dependents + 1 groups. `gated`: each controller is
    itself conditional (on a condition that always holds), so that no product of
    dimensions active in every trial refuses the spec before the walk."""
    gate = ", when: {model.init: [default, orthogonal]}" if gated else ""
    lines = [f"  {key}: {{choice: {json.dumps(values)}{gate}}}" for key, values in SEVEN.items()]
    targets = ["epochs", "lr_step_size", "optimizer", "lr_schedule"][:dependents]
    choices = {"epochs": [1, 2], "lr_step_size": [3, 4], "optimizer": ["sgd", "adam"],
               "lr_schedule": ["step", "cosine"]}  # fmt: skip
    for j, target in enumerate(targets):
        when = ", ".join(f"{key}: {json.dumps(values[j])}" for key, values in SEVEN.items())
        lines.append(f"  {target}: {{choice: {json.dumps(choices[target])}, when: {{{when}}}}}")
    model = "model:\n  init: [default, orthogonal]\n" if gated else ""
    body = model + "training:\n" + "\n".join(lines) + "\nlimits: {max_trials: 1000000}\n"
    return spec(body)


def test_conditional_dimensions_are_counted_by_groups_not_combinations() -> None:
    loaded = load_spec(seven_controllers())
    exact = tally(loaded)
    assert (exact.count, exact.exact) == (10**7 + 1, True)
    assert exact.visits < 1000  # 2**7 groups of values, not 10**7 combinations
    with pytest.raises(TooManyTrials, match="expands to at least") as info:
        expand(loaded)
    assert info.value.count > loaded.limits.max_trials and info.value.at_least


def test_dimensions_in_every_trial_refuse_a_spec_before_any_walk() -> None:
    counted = tally(load_spec(seven_controllers(dependents=4)), 100_000)
    assert (counted.count, counted.exact, counted.visits) == (10**7, False, 0)


def test_counting_stops_past_the_limit_however_the_values_split() -> None:
    # Four dependents, each accepting other values: 5 groups per controller, 5**7 states,
    # and every controller conditional, so only the walk can tell the count.
    loaded = load_spec(seven_controllers(dependents=4, gated=True))
    dims = len(loaded.dimensions)
    for limit in (500, 100_000):
        counted = tally(loaded, limit)
        assert counted.count > limit and not counted.exact
        assert 0 < counted.visits <= (limit + 2) * (dims + 1)
    assert tally(loaded).count == 2 * (10**7 + 4)


def test_a_large_int_range_controller_is_never_listed() -> None:
    loaded = load_spec(
        spec(
            "training:\n  seed: {int: [0, 2147483647], step: 2}\n"
            "  epochs: {choice: [1, 2, 3], when: {seed: [0, 7, 2147483646, 4.0]}}\n"
            "limits: {max_trials: 1000000}\n"
        )
    )
    counted = tally(loaded)  # 0, 4 and 2147483646 are on the grid (7 is not): 3 trials each
    assert counted.count == 2**30 - 3 + 3 * 3 and counted.visits < 20


POOLS: dict[str, list[Any]] = {
    "training.optimizer": ["sgd", "adam", "rmsprop", "momentum"],
    "training.lr_schedule": ["none", "step", "cosine"],
    "training.batch_size": [16, 32, 64, 128],
    "training.epochs": [1, 2, 10, 3],
    "training.beta1": [0.9, 0.8, 0.5],
    "model.activation": ["relu", "tanh", "gelu", "elu"],
    "model.init": ["default", "orthogonal", "xavier_normal"],
    "model.dropout": [0.0, 0.1, 0.2],
}


@pytest.mark.parametrize("seed", range(60))
def test_the_count_is_the_number_of_expanded_trials(seed: int) -> None:
    """Random conditional grids (defaults among the accepted values, conditions on earlier
    dimensions, chains of them): counting agrees with walking every trial."""
    rng = random.Random(seed)
    paths = rng.sample(list(POOLS), rng.randint(2, len(POOLS)))
    sections: dict[str, dict[str, Any]] = {}
    for i, path in enumerate(paths):
        values = rng.sample(POOLS[path], rng.randint(1, len(POOLS[path])))
        leaf: Any = values if rng.random() < 0.5 else {"choice": values}
        earlier = paths[:i]
        if earlier and rng.random() < 0.7:
            targets = rng.sample(earlier, rng.randint(1, min(2, len(earlier))))
            when = {t: rng.sample(POOLS[t], rng.randint(1, 2)) for t in targets}
            leaf = {"choice": values, "when": when}
        section, key = path.split(".")
        sections.setdefault(section, {})[key] = leaf
    loaded = load_spec({"name": "r", "dataset": {"name": "digits"}, **sections})
    trials = expand(loaded)
    assert tally(loaded).count == len(trials) == len({t.id for t in trials})
    limited = tally(loaded, max(1, len(trials) - 1))
    assert limited.count > len(trials) - 1
