"""CaffeSolver against a hand-written Caffe update in NumPy, float64, over 20 iterations.

The reference (`reference.ReferenceSolver`) is written from Caffe's solver semantics, apart
from `CaffeSolver`: clip on the global norm of the accumulated gradients, then per blob
divide by iter_size, add the decay (L2 or L1, weight_decay * decay_mult), and update at
rate * lr_mult. Both train the same small net (two Linear layers and a tanh, Euclidean loss)
from the same weights on the same batches; losses and weights must agree to 1e-9.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pytest
import torch

from core.spec.caffe.solver import SOLVER_TYPES, SolverConfig
from tests.workers.training.caffe.reference import (
    POLICY_SETTINGS,
    ReferenceSolver,
    reference_rate,
)
from tests.workers.training.caffe.reference import config_for as reference_config
from workers.training.caffe.solver import CaffeSolver

ITERATIONS = 20


@dataclass
class Info:
    """The fields of `workers.training.caffe.model.ParamInfo`, which the solver reads."""

    param: torch.nn.Parameter
    layer: str
    index: int
    lr_mult: float
    decay_mult: float


# (lr_mult, decay_mult) of fc1.weight, fc1.bias, fc2.weight, fc2.bias.
MULTS = [(1.0, 1.0), (2.0, 0.0), (1.0, 2.0), (2.0, 1.0)]

_rng = np.random.RandomState(7)
WEIGHTS = [_rng.randn(5, 4) * 0.5, _rng.randn(5) * 0.1, _rng.randn(3, 5) * 0.5, _rng.randn(3) * 0.1]
BATCHES = [(_rng.randn(6, 4), _rng.randn(6, 3)) for _ in range(3)]


def euclidean(w1, b1, w2, b2, x, y):
    """Caffe's EuclideanLoss of a Linear-tanh-Linear net: sum of squares over 2N."""
    out = torch.tanh(x @ w1.T + b1) @ w2.T + b2
    return ((out - y) ** 2).sum() / (2 * x.shape[0])


def batches_of(it: int, iter_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    picked = [BATCHES[(it * iter_size + k) % len(BATCHES)] for k in range(iter_size)]
    return [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in picked]


def run_solver(config: SolverConfig) -> tuple[list[float], list[np.ndarray]]:
    fc1, fc2 = torch.nn.Linear(4, 5).double(), torch.nn.Linear(5, 3).double()
    params = [fc1.weight, fc1.bias, fc2.weight, fc2.bias]
    with torch.no_grad():
        for param, value in zip(params, WEIGHTS, strict=True):
            param.copy_(torch.from_numpy(value))
    infos = [
        Info(p, "fc1" if i < 2 else "fc2", i % 2, lr, decay)
        for i, (p, (lr, decay)) in enumerate(zip(params, MULTS, strict=True))
    ]
    solver = CaffeSolver(infos, config)  # type: ignore[arg-type]
    losses = []
    for it in range(ITERATIONS):
        solver.zero_grad()
        for x, y in batches_of(it, config.iter_size):
            loss = euclidean(fc1.weight, fc1.bias, fc2.weight, fc2.bias, x, y)
            loss.backward()
            losses.append(loss.item())
        assert solver.step(it) == pytest.approx(reference_rate(config, it), rel=1e-12)
    return losses, [p.detach().numpy().copy() for p in params]


def run_reference(config: SolverConfig) -> tuple[list[float], list[np.ndarray], int]:
    reference = ReferenceSolver(WEIGHTS, MULTS, config)
    losses = []
    for it in range(ITERATIONS):
        grads = [np.zeros_like(v) for v in WEIGHTS]
        for x, y in batches_of(it, config.iter_size):
            tensors = [torch.tensor(v, requires_grad=True) for v in reference.weights]
            loss = euclidean(*tensors, x, y)
            loss.backward()
            losses.append(loss.item())
            grads = [g + t.grad.numpy() for g, t in zip(grads, tensors, strict=True)]
        reference.step(grads, it)
    return losses, reference.weights, reference.clipped


def config_for(kind: str, policy: str, **changes: object) -> SolverConfig:
    return reference_config(kind, policy, ITERATIONS, **changes)


def assert_same(config: SolverConfig, expect_clipping: bool = True) -> None:
    losses, weights = run_solver(config)
    ref_losses, ref_weights, clipped = run_reference(config)
    assert len(losses) == ITERATIONS * config.iter_size
    np.testing.assert_allclose(losses, ref_losses, rtol=0, atol=1e-9)
    for got, want in zip(weights, ref_weights, strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)
    # The run must have moved the weights, and clipped some iterations and not others.
    assert max(float(np.abs(a - b).max()) for a, b in zip(weights, WEIGHTS, strict=True)) > 1e-3
    if expect_clipping:
        assert 0 < clipped < ITERATIONS
    else:
        assert clipped == 0


@pytest.mark.parametrize("policy", list(POLICY_SETTINGS))
@pytest.mark.parametrize("kind", SOLVER_TYPES)
def test_every_type_and_policy_matches_the_reference(kind: str, policy: str) -> None:
    assert_same(config_for(kind, policy))


@pytest.mark.parametrize("kind", SOLVER_TYPES)
def test_l1_without_clipping_or_accumulation(kind: str) -> None:
    config = config_for(kind, "step", regularization_type="L1", clip_gradients=-1.0, iter_size=1)
    assert_same(config, expect_clipping=False)


def scalar_solver(config: SolverConfig, value: float = 1.0) -> tuple[CaffeSolver, Info]:
    info = Info(torch.nn.Parameter(torch.tensor([value], dtype=torch.float64)), "l", 0, 1, 1)
    return CaffeSolver([info], config), info  # type: ignore[list-item]


def set_grad(info: Info, value: float) -> None:
    info.param.grad = torch.tensor([value], dtype=torch.float64)


def test_sgd_puts_the_rate_inside_the_velocity() -> None:
    config = SolverConfig(base_lr=0.1, lr_policy="step", gamma=0.5, stepsize=1, max_iter=9,
                          momentum=0.9)  # fmt: skip
    solver, info = scalar_solver(config)
    set_grad(info, 2.0)
    solver.step(0)  # v = 0.1 * 2 = 0.2
    set_grad(info, 2.0)
    solver.step(1)  # v = 0.9 * 0.2 + 0.05 * 2 = 0.28 (torch's SGD would give 0.05 * 3.8)
    assert info.param.item() == pytest.approx(1.0 - 0.2 - 0.28, abs=1e-15)
    assert solver.lr == 0.05


def test_clipping_comes_before_normalisation_and_decay() -> None:
    # Accumulated gradient 4 over iter_size 2, clip 1: Caffe clips 4 to 1, then halves it
    # (0.5), then adds the decay 0.1 * w = 0.1. Normalising first would clip 2 to 1 (-> 1.1).
    config = SolverConfig(base_lr=1.0, lr_policy="fixed", max_iter=9, iter_size=2,
                          clip_gradients=1.0, weight_decay=0.1)  # fmt: skip
    solver, info = scalar_solver(config)
    set_grad(info, 4.0)
    solver.step(0)
    assert info.param.item() == pytest.approx(1.0 - 0.6, abs=1e-15)


def test_a_shared_blob_is_updated_once_and_missing_grads_count_as_zero() -> None:
    config = SolverConfig(base_lr=0.5, lr_policy="fixed", max_iter=9, weight_decay=0.2)
    solver, info = scalar_solver(config)
    other = Info(torch.nn.Parameter(torch.tensor([3.0], dtype=torch.float64)), "m", 0, 1, 0)
    shared = replace(info, layer="copy", lr_mult=10.0)
    solver = CaffeSolver([info, other, shared], config)  # type: ignore[list-item]
    assert len(solver.params) == 2
    set_grad(info, 1.0)
    solver.step(0)  # other has no gradient and no decay: it stays
    assert info.param.item() == pytest.approx(1.0 - 0.5 * (1.0 + 0.2), abs=1e-15)
    assert other.param.item() == 3.0
    solver.zero_grad()
    assert info.param.grad is None
