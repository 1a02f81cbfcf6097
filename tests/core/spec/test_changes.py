"""`core.spec.changes`: a change written into a spec as submitted, and every refusal naming
the field and the rule (the spec itself untouched); search.first and search.warm_start
checked against the space."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from core.errors import SpecError
from core.spec.changes import apply_change

SPEC: dict[str, Any] = {
    "name": "changes",
    "dataset": {"name": "digits"},
    "model": {
        "hidden_layers": {"int": [0, 10], "step": 2},
        "hidden_units": {"choice": [16, 64]},
        "activation": ["relu", "tanh"],
    },
    "training": {"epochs": 1, "lr": {"loguniform": [0.001, 0.1]}},
    "objective": {"metric": "val_accuracy", "direction": "maximize"},
    "search": {"algorithm": "tpe", "trials": 10},
}


def test_a_change_is_written_into_the_spec_and_said_in_one_line() -> None:
    before = copy.deepcopy(SPEC)
    change = {
        "trials": 20,
        "add": {"model.hidden_units": [256], "model.activation": ["elu"]},
        "narrow": {"training.lr": [0.002, 0.05], "model.hidden_layers": [2, 8]},
    }
    spec, said = apply_change(SPEC, change)
    assert before == SPEC  # untouched
    assert spec["search"]["trials"] == 20
    assert spec["model"]["hidden_units"] == {"choice": [16, 64, 256]}
    assert spec["model"]["activation"] == ["relu", "tanh", "elu"]
    assert spec["training"]["lr"] == {"loguniform": [0.002, 0.05]}
    assert spec["model"]["hidden_layers"] == {"int": [2, 8], "step": 2}
    assert said == (
        'search.trials 10 -> 20; model.hidden_units + [256]; model.activation + ["elu"]; '
        "training.lr [0.001, 0.1] -> [0.002, 0.05]; model.hidden_layers [0, 10] -> [2, 8]"
    )


@pytest.mark.parametrize(
    ("change", "path", "rule"),
    [
        ("60", "", "a change must be a mapping"),
        ({}, "", "needs at least one of trials, add, narrow"),
        ({"remove": {}}, "remove", "is not a change"),
        ({"trials": "60"}, "trials", "must be an integer"),
        ({"trials": 10}, "trials", "must be more than the sweep's search.trials (10)"),
        ({"trials": 10**9}, "trials", "must be <= the sweep's limits.max_trials"),
        ({"add": {"model.depth": [1]}}, "add.model.depth", "is not a dimension of the sweep"),
        ({"add": {"model.hidden_units": 32}}, "add.model.hidden_units", "non-empty list"),
        ({"add": {"model.hidden_units": [64]}}, "add.model.hidden_units", "already one"),
        ({"add": {"training.lr": [0.5]}}, "add.training.lr", "grid list or a choice"),
        ({"narrow": {"model.activation": [0, 1]}}, "narrow.model.activation", "narrow takes"),
        ({"narrow": {"training.lr": [0.0001, 0.01]}}, "narrow.training.lr", "must lie inside"),
        ({"narrow": {"training.lr": [0.01, 0.002]}}, "narrow.training.lr", "low < high"),
        ({"narrow": {"training.lr": [0.01]}}, "narrow.training.lr", "must be [low, high]"),
        ({"narrow": {"model.hidden_layers": [1, 9]}}, "narrow.model.hidden_layers",
         "must start on its step of 2"),
        ({"narrow": {"model.hidden_layers": [2.5, 8]}}, "narrow.model.hidden_layers",
         "takes integers"),
    ],
)  # fmt: skip
def test_a_change_that_breaks_a_rule_names_it(change: Any, path: str, rule: str) -> None:
    with pytest.raises(SpecError) as caught:
        apply_change(SPEC, change)
    problem = caught.value.problems[0]
    assert problem.path == path and rule in problem.message, problem


def test_a_grid_grows_by_its_values_not_its_trials() -> None:
    grid = {**SPEC, "search": {"algorithm": "grid"},
            "model": {"hidden_units": [16, 64]}, "training": {"epochs": 1}}  # fmt: skip
    with pytest.raises(SpecError, match="a grid's size is its values'"):
        apply_change(grid, {"trials": 40})
    assert apply_change(grid, {"add": {"model.hidden_units": [128]}})[1] == (
        "model.hidden_units + [128]"
    )


@pytest.mark.parametrize(
    ("search", "path", "rule"),
    [
        ({"algorithm": "random", "trials": 4, "first": [{"model.activation": "relu"}]},
         "search.first", "needs an adaptive search.algorithm"),
        ({"algorithm": "grid", "warm_start": ["3f2a9c1d7e4b"]}, "search.warm_start",
         "needs an adaptive search.algorithm"),
        ({"algorithm": "tpe", "trials": 4, "first": [{"model.depth": 2}]},
         "search.first[0].model.depth", "is not a dimension that varies"),
        ({"algorithm": "tpe", "trials": 4, "first": [{"model.hidden_layers": 3}]},
         "search.first[0].model.hidden_layers", "3 is not a value of this int dimension"),
        ({"algorithm": "tpe", "trials": 4, "first": [{"training.lr": 1}]},
         "search.first[0].training.lr", "is not a value of this loguniform dimension"),
        ({"algorithm": "tpe", "trials": 4,
          "first": [{"model.activation": "tanh"}, {"model.activation": "tanh"}]},
         "search.first[1]", "repeats search.first[0]"),
        ({"algorithm": "tpe", "trials": 4, "first": [{}]}, "search.first[0]",
         "at least one dimension"),
    ],
)  # fmt: skip
def test_first_points_and_warm_starts_are_checked_against_the_space(
    search: dict[str, Any], path: str, rule: str
) -> None:
    from core.spec.sweep import load_spec

    with pytest.raises(SpecError) as caught:
        load_spec({**SPEC, "search": search})
    assert any(p.path == path and rule in p.message for p in caught.value.problems), (
        caught.value.problems
    )
