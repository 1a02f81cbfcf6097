"""Expansion: grid counts, determinism, random bounds and spread, conditionals, limits."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.errors import SpecError, TooManyTrials
from core.spec.config import TrialConfig
from core.spec.sweep import load_spec, load_spec_file
from scheduler.expand import expand, tally, trial_id

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def spec(body: str, name: str = "t") -> str:
    return f"name: {name}\ndataset: {{name: digits}}\n" + body


def test_mcleod_grid_has_360_trials_in_stable_order() -> None:
    loaded = load_spec_file(CONFIGS / "mcleod-digits.yaml")
    trials = expand(loaded)
    assert tally(loaded).count == len(trials) == 360
    assert len({t.id for t in trials}) == 360
    assert trials[0].params == {
        "model.hidden_layers": 1,
        "model.hidden_units": 16,
        "model.activation": "relu",
        "training.seed": 0,
    }
    assert trials[1].params["training.seed"] == 1  # last dimension varies fastest
    assert trials[-1].params == {
        "model.hidden_layers": 5,
        "model.hidden_units": 1024,
        "model.activation": "sigmoid",
        "training.seed": 2,
    }
    assert [t.index for t in trials] == list(range(360))


def test_fixed_spec_is_one_trial() -> None:
    trials = expand(load_spec(spec("")))
    assert len(trials) == 1 and trials[0].params == {}


def test_ids_are_a_hash_of_name_and_params() -> None:
    a = expand(load_spec(spec("model:\n  hidden_units: [16, 32]\n", name="a")))
    b = expand(load_spec(spec("model:\n  hidden_units: [32, 16]\n", name="a")))
    c = expand(load_spec(spec("model:\n  hidden_units: [16, 32]\n", name="c")))
    assert {t.id for t in a} == {t.id for t in b}  # same points, same ids, whatever the order
    assert not {t.id for t in a} & {t.id for t in c}
    assert a[0].id == trial_id("a", {"model.hidden_units": 16})


def test_expansion_is_identical_in_other_processes() -> None:
    path = CONFIGS / "random-search.yaml"
    here = [
        json.dumps({"id": t.id, "index": t.index, "seed": t.seed, "params": t.params})
        for t in expand(load_spec_file(path))
    ]
    for hash_seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-m", "cli.main", "generate", str(path), "--format", "jsonl"],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
        ).stdout.splitlines()
        assert out == here


def test_random_draws_stay_in_bounds_and_are_distinct() -> None:
    loaded = load_spec(
        spec(
            "model:\n  hidden_layers: {int: [1, 4]}\n  dropout: {uniform: [0.1, 0.4]}\n"
            "training:\n  lr: {loguniform: [0.0001, 0.1]}\n  batch_size: {choice: [16, 32]}\n"
            "search: {algorithm: random, trials: 500, seed: 3}\n"
        )
    )
    trials = expand(loaded)
    assert len(trials) == 500
    assert len({json.dumps(t.params, sort_keys=True) for t in trials}) == 500
    for t in trials:
        assert 1 <= t.params["model.hidden_layers"] <= 4
        assert 0.1 <= t.params["model.dropout"] <= 0.4
        assert 1e-4 <= t.params["training.lr"] <= 0.1
        assert t.params["training.batch_size"] in (16, 32)
    assert {t.params["model.hidden_layers"] for t in trials} == {1, 2, 3, 4}


def test_loguniform_spreads_evenly_over_decades() -> None:
    loaded = load_spec(
        spec(
            "training:\n  lr: {loguniform: [0.0001, 1]}\n"
            "search: {algorithm: random, trials: 4000, seed: 1}\n"
        )
    )
    decades = [0, 0, 0, 0]
    for t in expand(loaded):
        decades[min(3, int(math.log10(t.params["training.lr"]) + 4))] += 1
    for n in decades:  # about 1,000 each; uniform sampling would put ~90% in the top decade
        assert 850 < n < 1150, decades


def test_random_seed_changes_the_draws() -> None:
    body = (
        "training:\n  lr: {uniform: [0.001, 0.1]}\n"
        "search: {algorithm: random, trials: 5, seed: %d}\n"
    )
    a = expand(load_spec(spec(body % 1)))
    b = expand(load_spec(spec(body % 2)))
    assert [t.params for t in a] != [t.params for t in b]
    assert [t.params for t in a] == [t.params for t in expand(load_spec(spec(body % 1)))]


def test_random_over_a_small_finite_space_collapses_duplicates() -> None:
    loaded = load_spec(
        spec(
            "model:\n  activation: {choice: [relu, tanh]}\n"
            "search: {algorithm: random, trials: 10}\n"
        )
    )
    assert sorted(t.params["model.activation"] for t in expand(loaded)) == ["relu", "tanh"]


def test_conditional_grid() -> None:
    loaded = load_spec(
        spec(
            "training:\n  optimizer: [sgd, adam, rmsprop]\n"
            "  momentum: {choice: [0.0, 0.5, 0.9], when: {optimizer: sgd}}\n"
            "  beta2: {choice: [0.99, 0.999], when: {optimizer: adam}}\n"
        )
    )
    trials = expand(loaded)
    assert tally(loaded).count == len(trials) == 3 + 2 + 1
    sgd = [t for t in trials if t.params["training.optimizer"] == "sgd"]
    assert sorted(t.params["training.momentum"] for t in sgd) == [0.0, 0.5, 0.9]
    rms = [t for t in trials if t.params["training.optimizer"] == "rmsprop"]
    assert rms[0].params == {"training.optimizer": "rmsprop"}
    config = TrialConfig.model_validate(loaded.resolve(rms[0].params))
    assert config.training.momentum == 0.9  # inactive: the field keeps its default


def test_conditional_random_only_draws_when_active() -> None:
    trials = expand(load_spec_file(CONFIGS / "random-search.yaml"))
    for t in trials:
        has = "training.momentum" in t.params
        assert has == (t.params["training.optimizer"] in ("sgd", "nesterov"))
    assert any("training.momentum" in t.params for t in trials)


def test_condition_on_a_fixed_value() -> None:
    on = expand(
        load_spec(
            spec(
                "training:\n  optimizer: sgd\n"
                "  momentum: {choice: [0.1, 0.2], when: {optimizer: sgd}}\n"
            )
        )
    )
    off = expand(
        load_spec(
            spec(
                "training:\n  optimizer: adam\n"
                "  momentum: {choice: [0.1, 0.2], when: {optimizer: sgd}}\n"
            )
        )
    )
    assert len(on) == 2 and len(off) == 1


def test_conditional_cycle_is_an_error() -> None:
    loaded = load_spec(
        spec(
            "training:\n  optimizer: {choice: [sgd, adam], when: {momentum: 0.5}}\n"
            "  momentum: {choice: [0.5, 0.9], when: {optimizer: sgd}}\n"
        )
    )
    with pytest.raises(SpecError, match="cycle"):
        expand(loaded)


def test_fifty_million_grid_is_refused_before_expanding() -> None:
    loaded = load_spec(
        spec(
            "model:\n  hidden_units: {int: [1, 1000]}\n  hidden_layers: {int: [0, 99]}\n"
            "training:\n  lr: [0.1, 0.2, 0.3, 0.4, 0.5]\n  batch_size: {int: [1, 100]}\n"
            "limits: {max_trials: 1000000}\n"
        )
    )
    assert tally(loaded).count == 50_000_000
    with pytest.raises(TooManyTrials) as info:
        expand(loaded)
    assert info.value.count == 50_000_000
    assert "limits.max_trials: the sweep expands to 50,000,000 trials" in str(info.value)


def test_default_limit_applies() -> None:
    loaded = load_spec(
        spec("model:\n  hidden_units: {int: [1, 1000]}\n  hidden_layers: {int: [1, 101]}\n")
    )
    with pytest.raises(TooManyTrials, match="101,000 trials, over the limit of 100,000"):
        expand(loaded)


def test_widths_must_match_depth_per_trial() -> None:
    loaded = load_spec(spec("model:\n  hidden_layers: [2, 3]\n  hidden_units: {value: [64, 32]}\n"))
    with pytest.raises(SpecError) as info:
        expand(loaded)
    (problem,) = info.value.problems
    assert problem.path == "model.hidden_units"
    assert "lists 2 widths but model.hidden_layers is 3" in problem.message


def test_seeds_come_from_params_fixed_or_the_id() -> None:
    from_params = expand(load_spec(spec("training:\n  seed: [4, 5]\n")))
    assert [t.seed for t in from_params] == [4, 5]
    fixed = expand(load_spec(spec("training:\n  seed: 9\n  lr: [0.1, 0.2]\n")))
    assert [t.seed for t in fixed] == [9, 9]
    derived = expand(load_spec(spec("training:\n  lr: [0.1, 0.2]\n")))
    assert derived[0].seed != derived[1].seed
    assert derived[0].seed == int(derived[0].id[:8], 16) % 2**31


def test_with_config_resolves_every_trial() -> None:
    trials = expand(load_spec_file(CONFIGS / "quickstart.yaml"), with_config=True)
    config = trials[0].config
    assert config["model"]["hidden_units"] == trials[0].params["model.hidden_units"]
    assert config["training"]["epochs"] == 8 and config["training"]["seed"] == 0
    assert config["dataset"] == {"name": "digits"}


def test_huge_int_dimension_is_never_listed() -> None:
    random_spec = load_spec(
        spec("training:\n  seed: {int: [0, 2147483647]}\nsearch: {algorithm: random, trials: 5}\n")
    )
    seeds = [t.seed for t in expand(random_spec)]
    assert len(set(seeds)) == 5 and all(0 <= s <= 2147483647 for s in seeds)
    grid_spec = load_spec(spec("training:\n  seed: {int: [0, 2147483647]}\n"))
    assert tally(grid_spec).count == 2147483648
    with pytest.raises(TooManyTrials):
        expand(grid_spec)


def test_huge_range_dimension_is_refused() -> None:
    with pytest.raises(SpecError, match=r"model.dropout.range: lists more than 1,000,000 values"):
        load_spec(spec("model:\n  dropout: {range: [0, 0.9, 0.0000001]}\n"))


TAU_SWEEP = """\
name: tau-sweep
dataset: {name: digits}
training: {optimizer: sgd, lr: 0.1, epochs: 3}
execution:
  parallel:
    world_size: 2
    strategy: local_sgd
    tau: [1, 5, 20, 50]
"""


def test_a_sub_section_leaf_expands_like_any_parameter() -> None:
    trials = expand(load_spec(TAU_SWEEP), with_config=True)
    assert [t.params for t in trials] == [{"execution.parallel.tau": v} for v in (1, 5, 20, 50)]
    assert trials[1].id == trial_id("tau-sweep", {"execution.parallel.tau": 5})
    assert trials[1].config["execution"] == {
        "parallel": {"world_size": 2, "strategy": "local_sgd", "tau": 5}
    }
    assert trials[1].config["training"]["seed"] == trials[1].seed


def test_two_level_ids_are_unchanged() -> None:
    # Pinned (ids before sub-sections existed): they must not change any existing trial id.
    trials = expand(load_spec_file(CONFIGS / "quickstart.yaml"))
    assert trial_id("a", {"model.hidden_units": 16}) == "8d05d543e2ae82c3"
    assert (trials[0].id, trials[-1].id) == ("3e456a6707675ec1", "9765825d494631be")


def test_conditions_inside_a_sub_section() -> None:
    loaded = load_spec(
        spec(
            "execution:\n  parallel:\n    world_size: 4\n"
            "    strategy: [allreduce, local_sgd, easgd]\n"
            "    tau: {choice: [5, 20], when: {strategy: [local_sgd, easgd]}}\n"
            "    asynchronous: {choice: [false, true], when: {strategy: easgd}}\n"
        )
    )
    trials = expand(loaded)
    assert tally(loaded).count == len(trials) == 1 + 2 + 2 * 2
    assert trials[0].params == {"execution.parallel.strategy": "allreduce"}
    easgd = [t.params for t in trials if t.params["execution.parallel.strategy"] == "easgd"]
    assert {(p["execution.parallel.tau"], p["execution.parallel.asynchronous"]) for p in easgd} == {
        (5, False),
        (5, True),
        (20, False),
        (20, True),
    }
    random_spec = load_spec(
        spec(
            "execution:\n  parallel:\n    strategy: {choice: [allreduce, easgd]}\n"
            "    asynchronous: {choice: [false, true], when: {strategy: easgd}}\n"
            "search: {algorithm: random, trials: 3, seed: 1}\n"
        )
    )
    for t in expand(random_spec):
        easgd_trial = t.params["execution.parallel.strategy"] == "easgd"
        assert ("execution.parallel.asynchronous" in t.params) == easgd_trial


def test_a_condition_elsewhere_on_a_sub_section_default_and_value() -> None:
    body = "training:\n  lr: {choice: [0.1, 0.2], when: {execution.parallel.strategy: %s}}\n"
    assert len(expand(load_spec(spec(body % "allreduce")))) == 2  # the default
    assert len(expand(load_spec(spec(body % "easgd")))) == 1
    varied = spec(body % "easgd" + "execution:\n  parallel: {strategy: [allreduce, easgd]}\n")
    assert len(expand(load_spec(varied))) == 1 + 2


@pytest.mark.parametrize(
    ("body", "path", "message"),
    [
        (
            "execution:\n  parallel: {asynchronous: true}\n",
            "execution.parallel",
            "asynchronous is only for strategy easgd, but strategy is 'allreduce'; "
            "set asynchronous: false",
        ),
        (
            "execution:\n  parallel:\n    strategy: [easgd, local_sgd]\n    asynchronous: true\n",
            "execution.parallel",
            "asynchronous is only for strategy easgd, but strategy is 'local_sgd'; set "
            'asynchronous: false (when execution.parallel.strategy="local_sgd")',
        ),
        (
            "execution:\n  parallel:\n    strategy: easgd\n    world_size: [2, 4]\n"
            "    alpha: 0.4\n",
            "execution.parallel",
            "alpha * world_size must be <= 1 for synchronous easgd (the centre moves by alpha "
            "times the sum of 4 differences), got alpha=0.4 "
            "(when execution.parallel.world_size=4)",
        ),
        (
            "execution:\n  device: cpu\n  parallel: {backend: [gloo, nccl]}\n",
            "execution",
            "parallel.backend nccl needs a CUDA device, but device is cpu; use gloo or auto "
            '(when execution.parallel.backend="nccl")',
        ),
        (
            "execution:\n  device: [cuda, cpu]\n  parallel: {backend: nccl}\n",
            "execution",
            "parallel.backend nccl needs a CUDA device, but device is cpu; use gloo or auto "
            '(when execution.device="cpu")',
        ),
        (
            "execution:\n  device: [cuda, cuda:1]\n  parallel: {world_size: 2}\n",
            "execution",
            "device cuda:1 pins one GPU, but a parallel trial takes one GPU per rank "
            '(parallel.world_size 2); use cuda or auto (when execution.device="cuda:1")',
        ),
    ],
)
def test_sub_section_rules_are_checked_per_combination(body: str, path: str, message: str) -> None:
    loaded = load_spec(spec(body))
    with pytest.raises(SpecError) as info:
        expand(loaded)
    (problem,) = info.value.problems
    assert (problem.path, problem.message) == (path, message)


def test_each_broken_rule_is_reported_once() -> None:
    loaded = load_spec(
        spec("execution:\n  device: cpu\n  parallel: {backend: nccl, asynchronous: true}\n")
    )
    with pytest.raises(SpecError) as info:
        expand(loaded)
    assert [p.path for p in info.value.problems] == ["execution.parallel", "execution"]


def test_valid_parallel_combinations_expand() -> None:
    loaded = load_spec(
        spec(
            "execution:\n  device: [cpu, cuda]\n  parallel:\n    world_size: [2, 8]\n"
            "    strategy: easgd\n    alpha: 0.1\n    asynchronous: [false, true]\n"
            "    backend: gloo\n"
        )
    )
    assert len(expand(loaded)) == 8


# -- counting: by groups of values, never past the limit ------------------------------------


def test_an_inactive_controller_keeps_its_default_for_the_conditions_after_it() -> None:
    # optimizer is inactive when lr_schedule is none: it keeps its default, adam, and the
    # momentum that asks for adam is active there, whichever branch is walked first.
    loaded = load_spec(
        spec(
            "training:\n  lr_schedule: [step, none]\n"
            "  optimizer: {choice: [sgd, rmsprop], when: {lr_schedule: step}}\n"
            "  momentum: {choice: [0.1, 0.2], when: {optimizer: adam}}\n"
        )
    )
    trials = expand(loaded)
    assert tally(loaded).count == len(trials) == 4
    assert [t.params for t in trials if t.params["training.lr_schedule"] == "none"] == [
        {"training.lr_schedule": "none", "training.momentum": 0.1},
        {"training.lr_schedule": "none", "training.momentum": 0.2},
    ]
