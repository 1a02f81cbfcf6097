"""Specs that name a training function (`core.spec.trainable`): parsing, what is refused and
where, the trials they expand to, and the installed-name check the CLI and the API make."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import main
from core.errors import InvalidQuery, SpecError
from core.settings import Settings
from core.spec.limits import spec_limit_problems
from core.spec.sweep import load_spec
from core.spec.trainable import TrainableSpec, installed_trainables
from core.store.query import param_filters, sort_field
from scheduler.expand import expand
from scheduler.grouping import group_limit, group_trials
from tests import trainables

ROOT = Path(__file__).resolve().parents[3]
CNN = """
name: cnn
trainable: digits_cnn
dataset: {name: digits}
params:
  lr: [0.01, 0.003]
  conv: {channels: [8, 16], kernel: 3}
  momentum: {choice: [0.5, 0.9], when: {lr: 0.01}}
training: {epochs: 4}
execution: {device: cpu, time_limit: 30}
objective: {metric: val_accuracy, direction: max}
"""


@pytest.fixture
def test_trainables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The test package's entry points, visible to this process."""
    monkeypatch.syspath_prepend(str(trainables.install(tmp_path / "site")))
    yield


def problems(text: str) -> dict[str, str]:
    with pytest.raises(SpecError) as caught:
        load_spec(text)
    return {p.path: p.message for p in caught.value.problems}


def test_params_take_every_dimension_form_and_expand_with_the_sections_that_apply() -> None:
    spec = load_spec(CNN)
    assert isinstance(spec, TrainableSpec) and spec.trainable == "digits_cnn"
    assert [d.path for d in spec.dimensions] == [
        "params.lr", "params.conv.channels", "params.momentum",
    ]  # fmt: skip
    trials = expand(spec, with_config=True)
    assert len(trials) == 6  # momentum only when lr is 0.01: 2 x 2 + 1 x 2
    first = trials[0]
    assert first.params == {"params.lr": 0.01, "params.conv.channels": 8, "params.momentum": 0.5}
    assert first.config == {
        "trainable": "digits_cnn",
        "params": {"lr": 0.01, "conv": {"channels": 8, "kernel": 3}, "momentum": 0.5},
        "dataset": {"name": "digits"},
        "training": {"epochs": 4, "seed": first.seed},
        "execution": {"device": "cpu", "time_limit": 30.0},
    }
    assert "momentum" not in trials[-1].config["params"]
    assert spec.objective.metric == "val_accuracy"
    # A trainable is never fused: every trial is a message of its own.
    assert group_limit(first.config) == 1
    groups = group_trials([(t.id, t.config) for t in trials])
    assert groups == [[t.id] for t in trials]


def test_a_spec_without_dataset_or_params_is_a_trainable_of_its_own_metric() -> None:
    spec = load_spec(
        "name: bare\ntrainable: test_slow\ntraining: {epochs: [1, 2]}\n"
        "objective: {metric: my_score, direction: maximize}\n"
        "pruning: {algorithm: median, metric: my_score}\n"
    )
    configs = [t.config for t in expand(spec, with_config=True)]
    assert [c["training"]["epochs"] for c in configs] == [1, 2]
    assert all(set(c) == {"trainable", "params", "training", "execution"} for c in configs)
    assert spec.objective.metric == "my_score" and spec.pruning.metric is None


def test_built_in_settings_that_do_not_apply_are_refused_naming_params() -> None:
    found = problems(
        "name: t\ntrainable: digits_cnn\nmodel: {hidden_units: 8}\n"
        "training: {epochs: 2, lr: 0.1}\nexecution: {fuse: off}\n"
    )
    assert "builds its own model" in found["model"]
    assert found["training.lr"].startswith("does not apply to a trainable (of training, only")
    assert "params" in found["training.lr"] and "execution.fuse" in found


def test_params_problems_name_their_path_and_rule() -> None:
    found = problems(
        "name: t\ntrainable: 'no way!'\nparams:\n  1x: 2\n  a: {value: {b: 1}}\n"
        "  b: {choice: [1, 2], when: {zz: 1}}\n  c: {uniform: [0, 1]}\n"
        "  d: {int: [3, 1]}\nobjective: {metric: 'val acc'}\n"
    )
    assert "must be the name of an installed training function" in found["trainable"]
    assert "identifier" in found["params.1x"]
    assert "cannot be a mapping" in found["params.a"]
    assert "no such parameter" in found["params.b.when.params.zz"]
    assert "grid search cannot enumerate" in found["params.c"]
    assert "low <= high" in found["params.d.int"]
    assert "metric name" in found["objective.metric"]
    # A built-in section keeps its rules, across fields too.
    both = load_spec("name: t\ntrainable: x\ndataset: {name: digits, path: a.csv}\n")
    with pytest.raises(SpecError, match="give exactly one of"):
        expand(both)


def test_an_unknown_name_is_refused_at_validation_listing_the_installed(
    test_trainables: None,
) -> None:
    installed = installed_trainables()
    assert {"digits_cnn", "digits_sgd", *trainables.FUNCTIONS} <= set(installed)
    assert installed["test_slow"].dist.version == trainables.VERSION
    settings = Settings.from_env({})
    (problem,) = spec_limit_problems(load_spec("name: t\ntrainable: nope\n"), settings)
    assert problem.path == "trainable"
    assert "no training function 'nope' in the sweepstack.trainables group" in problem.message
    assert "digits_cnn, digits_sgd" in problem.message and "test_slow" in problem.message
    assert spec_limit_problems(load_spec(CNN), settings) == []


def test_validate_exits_2_on_an_unknown_name_and_0_on_the_examples(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: t\ntrainable: not_installed\nparams: {a: [1, 2]}\n")
    runner = CliRunner()
    result = runner.invoke(main, ["validate", str(bad)])
    assert result.exit_code == 2
    assert "error: trainable: no training function 'not_installed'" in result.output
    assert "installed: digits_cnn, digits_sgd" in result.output
    for name, count in (("trainable-cnn.yaml", 8), ("trainable-sgd.yaml", 12)):
        result = runner.invoke(main, ["validate", str(ROOT / "configs" / name)])
        assert result.exit_code == 0, result.output
        assert f"{count} trials" in result.output


def test_a_trainables_params_can_be_filtered_and_sorted_on_and_nothing_else() -> None:
    assert param_filters({"params.conv.channels": 8}) == {"params.params.conv.channels": 8}
    assert sort_field("params.lr") == "params.params.lr"
    for path in ("params", "params.$gt", "params.a b", "params." + ".".join("a" * 9)):
        with pytest.raises(InvalidQuery, match="is not a parameter"):
            param_filters({path: 1})
