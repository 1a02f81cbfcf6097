"""Spec validation: one test per rule, and the shape of every error message."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import SpecError
from core.spec.config import TrialConfig
from core.spec.fields import field_adapter
from core.spec.space import Categorical, Fixed, IntRange, Uniform
from core.spec.sweep import load_spec, load_spec_file

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


def problems(text: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_spec(text)
    return [str(p) for p in info.value.problems]


def spec(body: str) -> str:
    return "name: t\ndataset: {name: digits}\n" + body


@pytest.mark.parametrize("name", ["mcleod-digits", "mcleod-demo", "quickstart", "random-search"])
def test_shipped_configs_are_valid(name: str) -> None:
    loaded = load_spec_file(CONFIGS / f"{name}.yaml")
    assert loaded.name == name


def test_minimal_spec_fills_defaults() -> None:
    loaded = load_spec("name: t\ndataset: {name: iris}\n")
    assert loaded.dimensions == []
    assert loaded.objective.metric == "val_loss"
    assert loaded.limits.max_trials == 100_000
    config = TrialConfig.model_validate(loaded.resolve({}))
    assert isinstance(config, TrialConfig)
    assert config.model.widths == [64, 64]


def test_json_is_accepted() -> None:
    loaded = load_spec('{"name": "j", "dataset": {"name": "wine"}, "model": {"dropout": [0, 0.5]}}')
    assert loaded.space["model.dropout"].values() == [0.0, 0.5]


def test_negative_width_and_unknown_activation_name_both_paths() -> None:
    found = problems(spec("model:\n  hidden_units: [16, 32, -5]\n  activation: swish\n"))
    assert "model.hidden_units[2]: must be > 0, got -5" in found
    assert any(
        p.startswith("model.activation: must be one of 'relu'") and "got 'swish'" in p
        for p in found
    )


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("training:\n  lr: -0.1\n", "training.lr: must be > 0, got -0.1"),
        (
            "training:\n  lr: {loguniform: [0, 1]}\nsearch: {algorithm: random, trials: 3}\n",
            "training.lr.loguniform[0]: must be > 0 for loguniform, got 0.0",
        ),
        (
            "training:\n  lr: {uniform: [0.5, 0.1]}\nsearch: {algorithm: random, trials: 3}\n",
            "training.lr.uniform: low < high must hold, got low=0.5, high=0.1",
        ),
        ("training:\n  batch_size: 0\n", "training.batch_size: must be > 0, got 0"),
        ("training:\n  epochs: 2.5\n", "training.epochs: must be a whole number, got 2.5"),
        ("training:\n  optimizer: lbfgs\n", "training.optimizer: must be one of"),
        ("training:\n  momentum: 1.0\n", "training.momentum: must be < 1, got 1"),
        ("training:\n  lr_schedule: linear\n", "training.lr_schedule: must be one of"),
        ("training:\n  weight_decay: -1\n", "training.weight_decay: must be >= 0, got -1"),
        ("model:\n  dropout: 1.0\n", "model.dropout: must be < 1, got 1"),
        ("model:\n  hidden_layers: -1\n", "model.hidden_layers: must be >= 0, got -1"),
        ("model:\n  batch_norm: maybe\n", "model.batch_norm: must be true or false, got 'maybe'"),
        ("model:\n  init: he\n", "model.init: must be one of"),
        ("model:\n  kind: cnn\n", "model.kind: must be one of 'mlp', got 'cnn'"),
        ("model:\n  widths: 3\n", "model.widths: unknown key"),
        ("execution:\n  device: tpu\n", "execution.device: must be auto, cpu, cuda or cuda:N"),
        ("execution:\n  dtype: int8\n", "execution.dtype: must be one of"),
        ("execution:\n  time_limit: 0\n", "execution.time_limit: must be > 0, got 0"),
        ("objective: {metric: f1}\n", "objective.metric: must be one of"),
        ("objective: {direction: up}\n", "objective.direction: must be one of"),
        (
            "search: {algorithm: bayes}\n",
            "search.algorithm: must be one of 'grid', 'random', 'tpe', 'cmaes', 'gp', 'qmc', "
            "'nsga2' or 'nsga3'",
        ),
        (
            "search: {algorithm: random}\n",
            "search.trials: is required when search.algorithm is random",
        ),
        ("limits: {max_trials: 0}\n", "limits.max_trials: must be > 0, got 0"),
        ("extra: 1\n", "extra: unknown key"),
        (
            "model:\n  hidden_units: []\n",
            "model.hidden_units: a grid list must hold at least one value",
        ),
        (
            "model:\n  hidden_units: {choice: 5}\n",
            "model.hidden_units.choice: must be a non-empty list",
        ),
        (
            "model:\n  hidden_units: {int: [1, 4], step: 0}\n",
            "model.hidden_units.step: must be an integer > 0, got 0",
        ),
        (
            "model:\n  hidden_units: {range: [10, 1, 2]}\n",
            "model.hidden_units.range: start < stop must hold",
        ),
        (
            "model:\n  hidden_units: {choice: [1], uniform: [0, 1]}\n",
            "model.hidden_units: use one of choice, uniform, not several",
        ),
        (
            "model:\n  dropout: {uniform: [0, 0.5]}\n",
            "model.dropout: grid search cannot enumerate a uniform dimension",
        ),
        (
            "training:\n  momentum: {value: 0.5, when: {nothing: 1}}\n",
            "training.momentum.when.training.nothing: no such field",
        ),
        (
            "training:\n  momentum: {value: 0.5, when: {optimizer: lbfgs}}\n",
            "training.momentum.when.training.optimizer: must be one of",
        ),
        ("execution:\n  parallel:\n    tau: 0\n", "execution.parallel.tau: must be >= 1, got 0"),
        (
            "execution:\n  parallel:\n    tau: [5, 0]\n",
            "execution.parallel.tau[1]: must be >= 1, got 0",
        ),
        (
            "execution:\n  parallel:\n    world_size: {int: [1, 2000]}\n",
            "execution.parallel.world_size.int[1]: must be <= 1024, got 2000",
        ),
        (
            "execution:\n  parallel:\n    strategy: gossip\n",
            "execution.parallel.strategy: must be one of 'allreduce', 'local_sgd' or 'easgd', "
            "got 'gossip'",
        ),
        (
            "execution:\n  parallel:\n    foo: 1\n",
            "execution.parallel.foo: unknown key (known: world_size, strategy, tau, alpha, "
            "asynchronous, backend, timeout, hosts, gather_timeout)",
        ),
        (
            "execution:\n  parallel: [1, 2]\n",
            "execution.parallel: is a section: give its keys (world_size, strategy, tau, "
            "alpha, asynchronous, backend, timeout, hosts, gather_timeout) as a mapping, "
            "got [1, 2]",
        ),
        (
            "execution:\n  parallel: {choice: [{world_size: 2}]}\n",
            "execution.parallel: is a section: give its keys",
        ),
        (
            "execution:\n  parallel:\n    tau: {choice: [1, 2], when: {device: cpu}}\n",
            "execution.parallel.tau.when.execution.parallel.device: no such field in "
            "execution.parallel; name a field elsewhere by its full path",
        ),
        (
            "execution:\n  parallel:\n    tau: {choice: [1, 2], when: {strategy: ring}}\n",
            "execution.parallel.tau.when.execution.parallel.strategy: must be one of",
        ),
    ],
)
def test_each_rule_names_path_and_rule(body: str, expected: str) -> None:
    found = problems(spec(body))
    assert any(p.startswith(expected) for p in found), found


def test_dataset_rules() -> None:
    assert any(
        p.startswith("dataset.name: must be one of")
        for p in problems("name: t\ndataset: {name: mnist}\n")
    )
    assert any(
        "dataset.path: must end in one of .npz, .csv, .parquet" in p
        for p in problems("name: t\ndataset: {path: data.xlsx, target: y}\n")
    )
    assert any(
        p.startswith("dataset.validation_fraction: must be < 1")
        for p in problems("name: t\ndataset: {name: iris, validation_fraction: 1.5}\n")
    )
    assert "dataset: is required" in problems("name: t\n")
    assert "name: is required" in problems("dataset: {name: iris}\n")


def test_objective_must_fit_the_task() -> None:
    found = problems(
        "name: t\ndataset: {name: synthetic_regression}\n"
        "objective: {metric: val_accuracy, direction: max}\n"
    )
    assert any(p.startswith("objective.metric: val_accuracy needs a classification") for p in found)
    found = problems("name: t\ndataset: {name: iris}\nobjective: {metric: val_rmse}\n")
    assert any(p.startswith("objective.metric: val_rmse needs a regression") for p in found)


def test_direction_aliases() -> None:
    loaded = load_spec(spec("objective: {metric: val_accuracy, direction: max}\n"))
    assert loaded.objective.direction == "maximize"


def test_every_problem_is_reported_at_once() -> None:
    found = problems(spec("model:\n  hidden_units: -1\n  dropout: 2\ntraining:\n  lr: 0\n"))
    assert len(found) == 3


def test_yaml_syntax_error_gives_line_number() -> None:
    found = problems("name: t\ndataset:\n  name: digits\n model: 3\n")
    assert len(found) == 1
    assert found[0].startswith("<spec>:4:") and "YAML syntax error" in found[0]


def test_yaml_syntax_error_in_file_names_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(SpecError) as info:
        load_spec_file(path)
    assert str(info.value).startswith(f"{path}:")


def test_spec_must_be_mapping() -> None:
    assert problems("- a\n- b\n")[0].endswith('a spec must be a mapping, got ["a", "b"]')


def test_dimension_forms() -> None:
    loaded = load_spec(
        spec(
            "model:\n"
            "  hidden_layers: {int: [1, 5], step: 2}\n"
            "  hidden_units: {range: [16, 64, 16]}\n"
            "  activation: {choice: [relu, tanh]}\n"
            "  dropout: {range: [0.0, 0.3, 0.1]}\n"
            "training:\n"
            "  lr: {loguniform: [0.0001, 0.1]}\n"
            "search: {algorithm: random, trials: 5}\n"
        )
    )
    assert loaded.space["model.hidden_layers"].values() == [1, 3, 5]
    assert loaded.space["model.hidden_units"].values() == [16, 32, 48]
    assert loaded.space["model.dropout"].values() == [0.0, 0.1, 0.2]
    assert isinstance(loaded.space["model.activation"], Categorical)
    lr = loaded.space["training.lr"]
    assert isinstance(lr, Uniform) and lr.log


def test_value_escape_for_per_layer_widths() -> None:
    loaded = load_spec(spec("model:\n  hidden_layers: 2\n  hidden_units: {value: [128, 64]}\n"))
    dim = loaded.space["model.hidden_units"]
    assert isinstance(dim, Fixed) and dim.value == [128, 64]
    assert TrialConfig.model_validate(loaded.resolve({})).model.widths == [128, 64]


def test_grid_values_are_coerced_and_deduplicated() -> None:
    loaded = load_spec(spec("training:\n  lr: [0.1, 0.1, 1, 1.0]\n"))
    assert loaded.space["training.lr"].values() == [0.1, 1.0]


def test_per_layer_width_lists_in_a_grid() -> None:
    loaded = load_spec(spec("model:\n  hidden_layers: 2\n  hidden_units: [[64, 32], [128, 64]]\n"))
    assert loaded.space["model.hidden_units"].values() == [[64, 32], [128, 64]]
    found = problems(spec("model:\n  hidden_units: [[64, -1]]\n"))
    assert found == ["model.hidden_units[0][1]: must be > 0, got -1"]


def test_conditional_short_and_full_paths() -> None:
    loaded = load_spec(
        spec(
            "training:\n  optimizer: [sgd, adam]\n"
            "  momentum: {choice: [0.5, 0.9], when: {optimizer: sgd}}\n"
            "  beta1: {choice: [0.8, 0.9], when: {training.optimizer: [adam]}}\n"
        )
    )
    assert loaded.space["training.momentum"].when == {"training.optimizer": ("sgd",)}
    assert loaded.space["training.beta1"].when == {"training.optimizer": ("adam",)}


TAU_SWEEP = """\
name: tau-sweep
dataset: {name: digits}
training: {optimizer: sgd, lr: 0.1, epochs: 3}
execution:
  device: cpu
  parallel:
    world_size: 2
    strategy: local_sgd
    tau: [1, 5, 20, 50]
"""


def test_sub_section_leaves_are_parameters_at_their_full_path() -> None:
    loaded = load_spec(TAU_SWEEP)
    assert [d.path for d in loaded.dimensions] == ["execution.parallel.tau"]
    assert loaded.space["execution.parallel.tau"].values() == [1, 5, 20, 50]
    assert loaded.space["execution.parallel.world_size"].values() == [2]
    assert loaded.base_config()["execution"] == {
        "device": "cpu",
        "parallel": {"world_size": 2, "strategy": "local_sgd"},
    }
    base = loaded.base_config()
    resolved = loaded.resolve({"execution.parallel.tau": 20}, base)
    assert resolved["execution"]["parallel"] == {
        "world_size": 2,
        "strategy": "local_sgd",
        "tau": 20,
    }
    assert "tau" not in base["execution"]["parallel"]  # the base is never mutated
    config = TrialConfig.model_validate(loaded.resolve({"execution.parallel.tau": 5}))
    assert config.execution.device == "cpu"
    assert (config.execution.parallel.tau, config.execution.parallel.world_size) == (5, 2)
    assert config.execution.parallel.backend == "auto"  # unset: the default


def test_field_adapter_knows_leaves_at_any_depth() -> None:
    tau = field_adapter("execution.parallel.tau")
    assert tau is not None and tau.validate_python(5) == 5
    assert field_adapter("model.hidden_units") is not None
    for not_a_leaf in (
        "execution.parallel",
        "execution.parallel.nope",
        "execution.tau",
        "model.hidden_units.x",
        "parallel.tau",
    ):
        assert field_adapter(not_a_leaf) is None, not_a_leaf


def test_sub_section_dimension_forms() -> None:
    loaded = load_spec(
        spec(
            "execution:\n  parallel:\n"
            "    tau: {int: [1, 50]}\n"
            "    strategy: {choice: [local_sgd, easgd]}\n"
            "    alpha: {uniform: [0.01, 0.2]}\n"
            "    timeout: {range: [60, 180, 60]}\n"
            "search: {algorithm: random, trials: 4}\n"
        )
    )
    tau = loaded.space["execution.parallel.tau"]
    assert isinstance(tau, IntRange) and (tau.low, tau.high) == (1, 50)
    assert loaded.space["execution.parallel.strategy"].values() == ["local_sgd", "easgd"]
    assert isinstance(loaded.space["execution.parallel.alpha"], Uniform)
    assert loaded.space["execution.parallel.timeout"].values() == [60, 120]


def test_conditions_inside_a_sub_section_name_its_own_fields() -> None:
    loaded = load_spec(
        spec(
            "training:\n"
            "  lr: {choice: [0.1, 0.2], when: {execution.parallel.strategy: local_sgd}}\n"
            "execution:\n  parallel:\n"
            "    strategy: [allreduce, local_sgd, easgd]\n"
            "    asynchronous: {choice: [false, true], when: {strategy: easgd}}\n"
            "    tau: {choice: [5, 20], when: {strategy: [local_sgd, easgd], "
            "execution.device: auto}}\n"
        )
    )
    asynchronous = loaded.space["execution.parallel.asynchronous"]
    assert asynchronous.when == {"execution.parallel.strategy": ("easgd",)}
    assert loaded.space["execution.parallel.tau"].when == {
        "execution.parallel.strategy": ("local_sgd", "easgd"),
        "execution.device": ("auto",),
    }
    assert loaded.space["training.lr"].when == {"execution.parallel.strategy": ("local_sgd",)}


# -- values no spec may hold, wherever they are (issue 16) ----------------------------------


def test_a_key_given_twice_is_refused_with_its_line() -> None:
    (problem,) = problems("name: t\ndataset:\n  name: digits\n  name: iris\n")
    assert "found duplicate key 'name'" in problem and "<spec>:4:3" in problem


def test_a_nul_in_any_string_names_the_field() -> None:
    assert problems(spec('model:\n  activation: [relu, "ta\\0nh"]\n')) == [
        "model.activation[1]: must not contain a NUL character"
    ]
    assert problems('name: "a\\0"\ndataset: {name: digits}\n') == [
        "name: must not contain a NUL character"
    ]


def test_integers_past_64_bits_are_refused_before_any_rule() -> None:
    assert problems(spec(f"training:\n  seed: [1, {2**63}]\n")) == [
        f"training.seed[1]: must be a 64-bit integer (-2**63 to 2**63-1), got {2**63}"
    ]
    assert problems(spec(f"search: {{seed: {-(2**63) - 1}}}\n"))[0].startswith("search.seed:")
    # A dict source can hold any int: its size is named, not printed.
    with pytest.raises(SpecError, match="an integer of 3322 bits"):
        load_spec({"name": "t", "dataset": {"name": "digits"}, "training": {"seed": 10**1000}})


def test_an_integer_of_more_than_4300_digits_is_a_spec_error() -> None:
    assert problems(spec(f"training:\n  seed: {'9' * 5000}\n")) == [
        "<spec>: a number has more than 4,300 digits"
    ]


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_nan_and_infinities_are_refused(value: str) -> None:
    (problem,) = problems(spec(f"training:\n  weight_decay: {{range: [0, {value}, 1]}}\n"))
    assert problem.startswith("training.weight_decay.range[1]: must be a finite number")


@pytest.mark.parametrize(
    ("path", "rule"),
    [
        ("~/data.csv", "must not start with ~"),
        ("../data.csv", "must not contain a .. part"),
        ("a/../../data.csv", "must not contain a .. part"),
        ("data.txt", "must end in one of .npz, .csv, .parquet"),
    ],
)
def test_dataset_path_rules_of_its_own(path: str, rule: str) -> None:
    (problem,) = problems(f"name: t\ndataset: {{path: '{path}'}}\n")
    assert problem.startswith(f"dataset.path: {rule}")
