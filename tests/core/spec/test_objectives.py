"""Several objectives and constraints in a spec (#31): `objectives:` and the single
`objective:` (a list of one, the primary), every refusal naming its field, and the
constraints read strictly and evaluated as Optuna takes them."""

from __future__ import annotations

from typing import Any

import pytest

from core.errors import SpecError
from core.spec.objectives import Constraint, Goals, feasibility, parse_constraint, values_of
from core.spec.sweep import load_spec

BASE: dict[str, Any] = {
    "name": "mo",
    "dataset": {"name": "digits"},
    "model": {"hidden_units": [16, 32]},
    "training": {"epochs": 2},
}
TWO = [{"metric": "val_accuracy", "direction": "max"}, {"metric": "param_count"}]


def _problems(**doc: Any) -> list[str]:
    with pytest.raises(SpecError) as caught:
        load_spec({**BASE, **doc})
    return [str(p) for p in caught.value.problems]


def test_objectives_give_the_primary_and_the_directions() -> None:
    spec = load_spec({**BASE, "objectives": TWO, "constraints": ["param_count <= 100000"]})
    assert spec.objective.metric == "val_accuracy" and spec.objective.direction == "maximize"
    assert [o.metric for o in spec.objectives] == ["val_accuracy", "param_count"]
    assert spec.directions == ["maximize", "minimize"] and spec.multi_objective
    assert spec.constraints == (Constraint("param_count", "<=", 100000.0),)


def test_the_single_objective_is_a_list_of_one() -> None:
    spec = load_spec({**BASE, "objective": {"metric": "val_accuracy", "direction": "max"}})
    assert spec.objectives == (spec.objective,) and not spec.multi_objective
    assert load_spec(BASE).objectives == (load_spec(BASE).objective,)


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ({"objective": {"metric": "val_loss"}, "objectives": TWO},
         "objectives: give either objective (one) or objectives (a list), not both"),
        ({"objectives": [{"metric": "flops"}]}, "objectives[0].metric: must be one of"),
        ({"objectives": [{"metric": "val_loss"}] * 5}, "objectives: at most 4 objectives, got 5"),
        ({"objectives": [{"metric": "val_loss"}, {"metric": "val_loss"}]},
         "objectives[1].metric: val_loss is already an objective"),
        ({"objectives": []}, "objectives: must be a list of {metric, direction}"),
        ({"constraints": ["param_count <== 3"]}, "constraints[0]: must read METRIC OP NUMBER"),
        ({"constraints": ["param_count <= lots"]}, "the bound must be a number, got 'lots'"),
        ({"constraints": ["param_count <= inf"]}, "the bound must be a finite number"),
        ({"constraints": ["flops <= 3"]}, "constraints[0]: unknown metric 'flops'"),
        ({"constraints": "param_count <= 3"}, "constraints: must be a list of texts"),
        ({"objectives": TWO, "pruning": {"algorithm": "hyperband"}},
         "pruning.algorithm: hyperband judges one objective, but the sweep has 2; a "
         "multi-objective sweep is pruned by Pareto rank with median, percentile, asha"),
        ({"objectives": TWO, "pruning": {"algorithm": "median", "metric": "val_loss"}},
         "pruning.metric: a multi-objective sweep is pruned by the Pareto rank"),
        ({"objectives": TWO, "pruning": {"algorithm": "asha", "min_resource": "auto"}},
         "pruning.min_resource: must be a number of epochs for Pareto-rank ASHA"),
        ({"objectives": TWO, "pruning": {"algorithm": "asha", "min_resource": 1,
                                         "bootstrap_count": 2}},
         "pruning.bootstrap_count: is not taken by Pareto-rank ASHA"),
        ({"objectives": TWO, "search": {"algorithm": "cmaes", "trials": 4}},
         "search.algorithm: cmaes searches for one objective, but the sweep has 2"),
        ({"objective": {"metric": "param_count"}, "pruning": {"algorithm": "median"}},
         "pruning.metric: is required when the objective is param_count"),
        ({"objectives": [{"metric": "val_rmse"}, {"metric": "macs"}]},
         "objectives[0].metric: val_rmse needs a regression dataset"),
        ({"search": {"algorithm": "nsga3", "trials": 4, "n_startup_trials": 2}},
         "search.n_startup_trials: is an option of tpe and cmaes and gp"),
    ],
)  # fmt: skip
def test_each_refusal_names_its_field(doc: dict[str, Any], expected: str) -> None:
    assert any(expected in p for p in _problems(**doc)), _problems(**doc)


@pytest.mark.parametrize(
    "pruning",
    [{"algorithm": "median", "n_startup_trials": 2, "n_warmup_steps": 1},
     {"algorithm": "percentile", "percentile": 25.0},
     {"algorithm": "asha", "min_resource": 1, "reduction_factor": 3}],
)  # fmt: skip
def test_rank_pruners_take_several_objectives(pruning: dict[str, Any]) -> None:
    spec = load_spec({**BASE, "objectives": TWO, "pruning": pruning})
    assert spec.multi_objective and spec.pruning.algorithm == pruning["algorithm"]


def test_nsga_options_are_taken() -> None:
    search = {"algorithm": "nsga3", "trials": 8, "population_size": 4, "dividing_parameter": 2}
    spec = load_spec({**BASE, "objectives": TWO, "search": search})
    assert spec.search.sampler_options() == {"population_size": 4, "dividing_parameter": 2}


def test_a_training_function_names_its_own_metrics() -> None:
    doc = {"name": "fn", "trainable": "digits_cnn", "params": {"lr": [0.01, 0.1]},
           "objectives": [{"metric": "loss"}, {"metric": "train_seconds"}],
           "constraints": ["loss < 3"]}  # fmt: skip
    spec = load_spec(doc)
    assert [o.metric for o in spec.objectives] == ["loss", "train_seconds"]
    bad = {**doc, "constraints": ["2loss < 3"]}
    with pytest.raises(SpecError, match=r"constraints\[0\]: must read"):
        load_spec(bad)


@pytest.mark.parametrize(
    ("text", "value", "violation", "holds"),
    [
        ("param_count <= 100", 100, 0.0, True),
        ("param_count <= 100", 150, 50.0, False),
        ("param_count < 100", 100, 1e-12, False),
        ("param_count < 100", 40, -60.0, True),
        ("val_accuracy >= 0.9", 0.95, pytest.approx(-0.05), True),
        ("val_accuracy > 0.9", 0.9, 1e-12, False),
        ("train_seconds>=-1.5e1", -20, 5.0, False),
    ],
)
def test_constraints_read_strictly_and_give_optunas_violation(
    text: str, value: float, violation: float, holds: bool
) -> None:
    found = parse_constraint(text, "constraints[0]", None)
    assert isinstance(found, Constraint)
    assert found.violation(value) == violation and found.holds(value) is holds


def test_feasibility_of_a_trial() -> None:
    goals = Goals.of({
        "objectives": [{"metric": "val_accuracy", "direction": "maximize"},
                       {"metric": "param_count", "direction": "minimize"}],
        "constraints": [{"metric": "param_count", "op": "<=", "bound": 100},
                        {"metric": "train_seconds", "op": "<", "bound": 5}],
    })  # fmt: skip
    assert goals.measures == [("val_accuracy", "maximize"), ("param_count", "minimize"),
                              ("train_seconds", "minimize")]  # fmt: skip
    measured = {"val_accuracy": 0.9, "param_count": 80, "train_seconds": 7.0}
    assert values_of(goals.objectives, measured) == [0.9, 80.0]
    assert feasibility(goals.constraints, measured) == ([-20.0, 2.0], False)
    assert feasibility(goals.constraints, {"param_count": 80}) == ([-20.0, None], False)
    assert feasibility(goals.constraints, {"param_count": 80, "train_seconds": 1}) == (
        [-20.0, -4.0], True)  # fmt: skip
    old = Goals.of({"objective": {"metric": "val_loss", "direction": "minimize"}})
    assert old.objectives == (("val_loss", "minimize"),) and old.constraints == ()
