"""The spec's `search` and `pruning` sections: defaults compatible with the first spec, one
test per rule, and the shape of every message (field, rule, value)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

import core.spec.sweep
from core.spec.search import (
    ALGORITHMS,
    METRIC_DIRECTIONS,
    Pruning,
    Search,
    check_search,
    deprecated_option_problems,
    option_problems,
    pruning_direction,
)
from core.spec.sweep import load_spec, problems_from
from tests import loaded_after

ROOT = Path(__file__).resolve().parents[3]

SPACE = """
name: s
dataset: {name: digits}
model:
  hidden_layers: {int: [1, 3]}
  hidden_units: [[64, 32], [128, 64]]
  activation: [relu, tanh]
training:
  lr: {loguniform: [0.001, 0.1]}
  optimizer: [sgd, adam]
  momentum: {uniform: [0.5, 0.99], when: {optimizer: sgd}}
search: {algorithm: random, trials: 10}
"""


def _space(text: str = SPACE) -> dict:
    return load_spec(text).space


def _messages(search: Search, pruning: Pruning | None = None, text: str = SPACE) -> list[str]:
    return [str(p) for p in check_search(_space(text), search, pruning)]


def _invalid(model: type, raw: dict, prefix: str) -> list[str]:
    with pytest.raises(ValidationError) as info:
        model.model_validate(raw)
    return [str(p) for p in problems_from(info.value, prefix, raw)]


def test_defaults_are_the_first_specs() -> None:
    old, new = core.spec.sweep.Search(), Search()
    assert (new.algorithm, new.trials, new.seed) == (old.algorithm, old.trials, old.seed)
    assert Search.model_validate(old.model_dump()) == new
    assert new.parallelism is None and not new.adaptive
    assert Pruning().algorithm == "none" and not Pruning().enabled


def test_every_algorithm_validates_and_adaptive_ones_are_marked() -> None:
    for algorithm in ALGORITHMS:
        search = Search(algorithm=algorithm, trials=5)
        assert search.adaptive == (algorithm not in ("grid", "random"))


def test_metric_names_match_the_objectives() -> None:
    assert set(METRIC_DIRECTIONS) == set(core.spec.sweep.METRICS)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            {"algorithm": "bayes"},
            "search.algorithm: must be one of 'grid', 'random', 'tpe', "
            "'cmaes', 'gp', 'qmc', 'nsga2' or 'nsga3', got 'bayes'",
        ),
        ({"trials": 0}, "search.trials: must be > 0, got 0"),
        ({"parallelism": -2}, "search.parallelism: must be > 0, got -2"),
        ({"seed": -1}, "search.seed: must be >= 0, got -1"),
        ({"popsize": 1}, "search.popsize: must be >= 2, got 1"),
        (
            {"qmc_type": "lattice"},
            "search.qmc_type: must be one of 'sobol' or 'halton', got 'lattice'",
        ),
        ({"multivariate": "maybe"}, "search.multivariate: must be true or false, got 'maybe'"),
        ({"sampler": "tpe"}, "search.sampler: unknown key"),
    ],
)
def test_search_field_rules_name_the_field_and_value(raw: dict, expected: str) -> None:
    assert expected in _invalid(Search, raw, "search")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"algorithm": "wilcoxon"}, "pruning.algorithm: must be one of"),
        ({"percentile": 120}, "pruning.percentile: must be <= 100, got 120"),
        ({"reduction_factor": 1}, "pruning.reduction_factor: must be >= 2, got 1"),
        ({"interval_steps": 0}, "pruning.interval_steps: must be > 0, got 0"),
        ({"metric": "accuracy"}, "pruning.metric: must be one of 'val_accuracy'"),
        ({"min_delta": -0.1}, "pruning.min_delta: must be >= 0, got -0.1"),
        (
            {"wrapped": {"algorithm": "median", "n_warmup_steps": -1}},
            "pruning.wrapped.n_warmup_steps: must be >= 0, got -1",
        ),
    ],
)
def test_pruning_field_rules_name_the_field_and_value(raw: dict, expected: str) -> None:
    found = _invalid(Pruning, raw, "pruning")
    assert any(p.startswith(expected) for p in found), found


def test_adaptive_algorithms_need_a_budget() -> None:
    for algorithm in ("tpe", "cmaes", "gp", "qmc"):
        found = [str(p) for p in option_problems(Search(algorithm=algorithm))]
        assert found == [f"search.trials: is required when search.algorithm is {algorithm}"]


def test_grid_and_random_keep_their_rules() -> None:
    assert _messages(Search(algorithm="random")) == [
        "search.trials: is required when search.algorithm is random"
    ]
    found = _messages(Search(algorithm="grid"))
    assert "model.hidden_layers: grid search cannot enumerate a int dimension" not in found
    assert any(
        p.startswith("training.lr: grid search cannot enumerate a loguniform") for p in found
    )
    assert _messages(Search(algorithm="random", trials=3, parallelism=2)) == []


def test_an_option_of_another_algorithm_names_both() -> None:
    found = _messages(Search(algorithm="tpe", trials=5, popsize=8, qmc_type="sobol"))
    assert found == [
        "search.popsize: is an option of cmaes, but search.algorithm is tpe",
        "search.qmc_type: is an option of qmc, but search.algorithm is tpe",
    ]
    assert _messages(Search(algorithm="random", trials=5, n_startup_trials=3)) == [
        "search.n_startup_trials: is an option of tpe and cmaes and gp, "
        "but search.algorithm is random"
    ]


def test_tpe_group_needs_multivariate() -> None:
    found = _messages(Search(algorithm="tpe", trials=5, group=True, multivariate=False))
    assert found == [
        "search.group: `multivariate` must be true for `group`, but got (multivariate=false)"
    ]
    assert _messages(Search(algorithm="tpe", trials=5, group=True)) == []


def test_cmaes_refuses_list_valued_and_conditional_dimensions() -> None:
    found = _messages(Search(algorithm="cmaes", trials=5))
    assert found == [
        "training.momentum.when: search.algorithm cmaes needs the same dimensions in every "
        "trial and cannot take a conditional one; use tpe (or random)",
        "model.hidden_units: search.algorithm cmaes cannot take a list-valued dimension "
        "(CMA-ES samples numbers); use tpe or gp, or fix it",
    ]


def test_cmaes_needs_a_numeric_dimension_and_refuses_clashing_options() -> None:
    text = "name: s\ndataset: {name: digits}\nmodel: {activation: [relu, tanh]}\n"
    assert _messages(Search(algorithm="cmaes", trials=5), text=text) == [
        "search.algorithm: cmaes needs at least one int, uniform or loguniform dimension; "
        "every dimension here is a list of values (use tpe, gp or random)"
    ]
    numeric = "name: s\ndataset: {name: digits}\ntraining: {lr: {uniform: [0.01, 0.1]}}\n"
    numeric += "search: {algorithm: random, trials: 5}\n"
    search = Search(algorithm="cmaes", trials=5, lr_adapt=True, with_margin=True)
    assert _messages(search, text=numeric) == [
        "search.lr_adapt: cannot be combined with with_margin"
    ]


def test_qmc_refuses_conditions_but_takes_lists() -> None:
    found = _messages(Search(algorithm="qmc", trials=5))
    assert found == [
        "training.momentum.when: search.algorithm qmc needs the same dimensions in every "
        "trial and cannot take a conditional one; use tpe (or random)"
    ]


def test_adaptive_search_needs_something_to_search() -> None:
    text = "name: s\ndataset: {name: digits}\n"
    assert _messages(Search(algorithm="tpe", trials=3), text=text) == [
        "search.algorithm: tpe needs at least one dimension that varies"
    ]


def test_deprecated_cmaes_options_get_the_reason() -> None:
    found = [str(p) for p in deprecated_option_problems({"algorithm": "cmaes", "sigma0": 0.3})]
    assert found == [
        "search.sigma0: is deprecated by Optuna (4.9; removed in 6.0) and not offered: "
        "CMA-ES starts from the ranges' smallest width / 6"
    ]


@pytest.mark.parametrize(
    ("pruning", "expected"),
    [
        (Pruning(algorithm="median", reduction_factor=3),
         "pruning.reduction_factor: is an option of asha and hyperband, "
         "but pruning.algorithm is median"),
        (Pruning(algorithm="percentile"), "pruning.percentile: is required when the pruner is "
         "percentile"),
        (Pruning(algorithm="patient"), "pruning.patience: is required when the pruner is patient"),
        (Pruning(algorithm="threshold"), "pruning: a threshold pruner needs `lower`, `upper` "
         "or both"),
        (Pruning(algorithm="threshold", lower=0.9, upper=0.5),
         "pruning.lower: `lower < upper` must hold, but got (lower=0.9, upper=0.5)"),
        (Pruning(algorithm="asha", bootstrap_count=2),
         "pruning.bootstrap_count: needs an explicit `min_resource`, but got "
         "(min_resource=auto, bootstrap_count=2)"),
        (Pruning(algorithm="hyperband", min_resource=10, max_resource=5),
         "pruning.min_resource: `min_resource <= max_resource` must hold, but got "
         "(min_resource=10, max_resource=5)"),
        (Pruning(algorithm="patient", patience=2, wrapped=Pruning(algorithm="percentile")),
         "pruning.wrapped.percentile: is required when the pruner is percentile"),
    ],
)  # fmt: skip
def test_pruning_rules(pruning: Pruning, expected: str) -> None:
    assert _messages(Search(algorithm="random", trials=3), pruning) == [expected]


def test_pruning_direction_follows_the_metric() -> None:
    assert pruning_direction(Pruning(), "val_accuracy", "maximize") == "maximize"
    assert pruning_direction(Pruning(metric="val_loss"), "val_accuracy", "maximize") == "minimize"
    accuracy = Pruning(metric="val_accuracy")
    assert pruning_direction(accuracy, "val_loss", "minimize") == "maximize"


def test_the_spec_language_loads_no_optuna() -> None:
    assert loaded_after("import core.spec.search, core.spec.sweep", ["optuna"]) == []
