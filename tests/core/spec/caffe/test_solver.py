"""solver.prototxt read into a SolverConfig: Caffe's defaults, its rules, its lr policies."""

from __future__ import annotations

import dataclasses
import math

import pytest

from core.errors import SpecError
from core.spec.caffe.prototxt import parse
from core.spec.caffe.solver import (
    MAX_ITER_LIMIT,
    SOLVER_TYPES,
    SolverConfig,
    evaluation_iterations,
    learning_rate,
    parse_solver,
)

LENET_SOLVER = """
# The train/test net protocol buffer definition
net: "examples/mnist/lenet_train_test.prototxt"
test_iter: 100
test_interval: 500
base_lr: 0.01
momentum: 0.9
weight_decay: 0.0005
lr_policy: "inv"
gamma: 0.0001
power: 0.75
display: 100
max_iter: 10000
snapshot: 5000
snapshot_prefix: "examples/mnist/lenet"
solver_mode: GPU
"""


def solver(text: str) -> SolverConfig:
    return parse_solver(parse(text, "s.prototxt"), "s.prototxt")


def problems(text: str) -> dict[str, str]:
    with pytest.raises(SpecError) as info:
        solver(text)
    return {p.path: p.message for p in info.value.problems}


BASE = 'base_lr: 0.1 max_iter: 100 lr_policy: "fixed"\n'


def test_lenet_solver_reads_with_caffe_defaults() -> None:
    config = solver(LENET_SOLVER)
    assert config.net == "examples/mnist/lenet_train_test.prototxt"
    assert (config.test_iter, config.test_interval, config.max_iter) == (100, 500, 10000)
    assert (config.base_lr, config.momentum, config.weight_decay) == (0.01, 0.9, 0.0005)
    assert (config.lr_policy, config.gamma, config.power) == ("inv", 0.0001, 0.75)
    assert config.type == "SGD"
    assert (config.momentum2, config.delta, config.rms_decay) == (0.999, 1e-8, 0.99)
    assert (config.regularization_type, config.iter_size, config.clip_gradients) == ("L2", 1, -1)
    assert config.test_initialization is True and config.random_seed == -1
    assert config.source == "s.prototxt"
    assert config.hyperparameters()["lr_policy"] == "inv"


@pytest.mark.parametrize("kind", SOLVER_TYPES)
def test_type_and_the_old_solver_type_enum(kind: str) -> None:
    assert solver(BASE + f'type: "{kind}"').type == kind
    assert solver(BASE + f"solver_type: {kind.upper()}").type == kind
    assert solver(BASE + f"solver_type: {SOLVER_TYPES.index(kind)}").type == kind


def test_solver_type_refusals() -> None:
    assert (
        "both given"
        in problems(BASE + 'type: "Adam" solver_type: ADAM')["caffe.solver.solver_type"]
    )
    assert "spells it Adam" in problems(BASE + 'type: "adam"')["caffe.solver.type"]
    assert "got Ident('FANCY')" in problems(BASE + "solver_type: FANCY")["caffe.solver.solver_type"]


def test_required_fields_and_where_problems_are() -> None:
    found = problems("momentum: 0.9\n")
    for name in ("base_lr", "max_iter", "lr_policy"):
        assert "is required" in found[f"caffe.solver.{name}"]
    found = problems('base_lr: -0.1\nmax_iter: 100 lr_policy: "fixed"')
    assert found["caffe.solver.base_lr"] == "s.prototxt:1:1: must be a finite number > 0, got -0.1"


@pytest.mark.parametrize(
    ("extra", "field", "words"),
    [
        ("momentum: 1.0", "momentum", "[0, 1)"),
        ("momentum: -0.1", "momentum", "[0, 1)"),
        ('type: "AdaGrad" momentum: 0.9', "momentum", "must be 0 with type AdaGrad"),
        ('type: "RMSProp" momentum: 0.5', "momentum", "must be 0 with type RMSProp"),
        ('type: "RMSProp" rms_decay: 1.0', "rms_decay", "[0, 1)"),
        ('type: "Adam" momentum2: 1.0', "momentum2", "[0, 1)"),
        ('type: "Adam" delta: 0', "delta", "> 0"),
        ("weight_decay: -1", "weight_decay", ">= 0"),
        ('regularization_type: "l2"', "regularization_type", "L2 or L1"),
        ("iter_size: 0", "iter_size", "[1, 1024]"),
        ("test_interval: 10", "test_iter", "required"),
        ("test_interval: -1", "test_interval", ">= 0"),
        ("test_iter: 5 test_iter: 5", "test_iter", "one test net"),
        ("random_seed: -2", "random_seed", ">= 0"),
        ("lrpolicy: 1", "lrpolicy", "did you mean lr_policy"),
        ('weights: "a.caffemodel"', "weights", "not supported"),
        ("test_state { stage: 'x' } test_state { stage: 'y' }", "test_state", "one test net"),
        ("test_state { phase: TRAIN }", "test_state", "builds the TEST net; remove the phase"),
        ("train_state { stages: 'x' }", "train_state", "not a field of Caffe's NetState"),
        ("train_state: 3", "train_state", "must be a message"),
        ("base_lr: 0.2", "base_lr", "written 2 times"),
        ('net: "a" train_net: "b"', "train_net", "second train net"),
        ('max_iter: "many"', "max_iter", "must be an integer"),
        ("gamma: true", "gamma", "must be a number"),
        ("test_initialization: 2", "test_initialization", "true or false"),
    ],
)
def test_rules_name_the_field_and_the_value(extra: str, field: str, words: str) -> None:
    text = (
        BASE + extra
        if not extra.startswith("max_iter")
        else extra + ' base_lr: 1 lr_policy: "fixed"'
    )
    assert words in problems(text)[f"caffe.solver.{field}"]


def test_max_iter_ceiling_and_evaluations_ceiling() -> None:
    big = f'base_lr: 1 lr_policy: "fixed" max_iter: {MAX_ITER_LIMIT + 1}'
    assert "1,000,000" in problems(big)["caffe.solver.max_iter"]
    many = 'base_lr: 1 lr_policy: "fixed" max_iter: 100000 test_interval: 1 test_iter: 1'
    assert "over the limit" in problems(many)["caffe.solver.test_interval"]


@pytest.mark.parametrize(
    ("policy", "extra", "field", "words"),
    [
        ("step", "gamma: 0.1", "stepsize", "required by lr_policy step"),
        ("step", "gamma: 0.1 stepsize: 0", "stepsize", "> 0"),
        ("step", "stepsize: 10", "gamma", "required by lr_policy step"),
        ("exp", "gamma: 0", "gamma", "> 0"),
        ("inv", "gamma: 0.1", "power", "required by lr_policy inv"),
        ("inv", "gamma: -0.1 power: 1", "gamma", ">= 0"),
        ("poly", "power: -1", "power", ">= 0"),
        ("multistep", "gamma: 0.1", "stepvalue", "required"),
        ("multistep", "gamma: 0.1 stepvalue: 20 stepvalue: 20", "stepvalue", "strictly increasing"),
        ("sigmoid", "stepsize: 5", "gamma", "required"),
        ("exp", "gamma: 1e10", "lr_policy", "inf"),
        ("cosine", "", "lr_policy", "must be one of fixed, step"),
    ],
)
def test_policy_rules(policy: str, extra: str, field: str, words: str) -> None:
    text = f'base_lr: 0.1 max_iter: 100 lr_policy: "{policy}" {extra}'
    assert words in problems(text)[f"caffe.solver.{field}"]


def test_fields_a_policy_does_not_use_are_not_checked() -> None:
    # A sweep over lr_policy sets every policy's fields; fixed ignores them all.
    config = solver(BASE + "gamma: 0 stepsize: 0 stepvalue: 5 stepvalue: 3 power: -1")
    assert learning_rate(config, 50) == 0.1


def test_ignored_fields_are_accepted_and_inline_nets_kept() -> None:
    config = solver(
        BASE + "display: 10 snapshot: 5 snapshot_prefix: 'x' solver_mode: CPU device_id: 1 "
        "debug_info: false test_compute_loss: true average_loss: 20 "
        "net_param { name: 'inline' } test_net: 'b.prototxt' test_iter: 3 test_interval: 10"
    )
    assert config.net_param is not None and config.net_param.get("name") == "inline"
    assert (config.test_net, config.test_iter, config.average_loss) == ("b.prototxt", 3, 20)


def base(**changes: object) -> SolverConfig:
    fields = {"base_lr": 0.5, "lr_policy": "fixed", "max_iter": 100, **changes}
    return SolverConfig(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        # Caffe's formulas, written out by hand for iterations 0, 7, 30.
        (base(), [0.5, 0.5, 0.5]),
        (base(lr_policy="step", gamma=0.1, stepsize=10), [0.5, 0.5, 0.5 * 0.1**3]),
        (base(lr_policy="exp", gamma=0.9), [0.5, 0.5 * 0.9**7, 0.5 * 0.9**30]),
        (
            base(lr_policy="inv", gamma=0.01, power=0.75),
            [0.5, 0.5 * 1.07**-0.75, 0.5 * 1.3**-0.75],
        ),
        (base(lr_policy="multistep", gamma=0.5, stepvalue=(7, 20, 31)), [0.5, 0.25, 0.125]),
        (base(lr_policy="poly", power=2.0), [0.5, 0.5 * 0.93**2, 0.5 * 0.7**2]),
        (
            base(lr_policy="sigmoid", gamma=-0.5, stepsize=10),
            [0.5 / (1 + math.exp(-5)), 0.5 / (1 + math.exp(-1.5)), 0.5 / (1 + math.exp(10))],
        ),
    ],
)
def test_learning_rate_policies(config: SolverConfig, expected: list[float]) -> None:
    got = [learning_rate(config, it) for it in (0, 7, 30)]
    assert got == pytest.approx(expected, rel=1e-12)


def test_learning_rate_overflow_is_inf_and_sigmoid_saturates() -> None:
    assert learning_rate(base(lr_policy="exp", gamma=10.0), 10_000) == math.inf
    assert learning_rate(base(lr_policy="sigmoid", gamma=-1.0, stepsize=0), 10_000) == 0.0
    assert learning_rate(base(lr_policy="sigmoid", gamma=1.0, stepsize=0), 10_000) == 0.5


def test_config_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        base().base_lr = 1.0  # type: ignore[misc]


def test_evaluation_iterations_as_caffe_tests() -> None:
    assert evaluation_iterations(base(test_interval=30, test_iter=2)) == [0, 30, 60, 90]
    # max_iter divisible by test_interval: one more test after the last update.
    assert evaluation_iterations(base(test_interval=25, test_iter=2)) == [0, 25, 50, 75, 100]
    later = base(test_interval=50, test_iter=2, test_initialization=False)
    assert evaluation_iterations(later) == [50, 100]
    assert evaluation_iterations(base(test_interval=0, test_iter=2)) == []
