"""Issue #17's equivalence: a net built from prototxt and trained by `CaffeSolver` gives the
losses of the same net written by hand in PyTorch, with the same initial weights, trained
by the NumPy reference update: float64, 20 iterations, 1e-9, every solver type and policy.

The prototxt net is Data -> InnerProduct(5) -> TanH (in place) -> InnerProduct(3) ->
SoftmaxWithLoss, with lr_mult/decay_mult 1 and 2 on its blobs; the solvers use L2 decay,
clip_gradients and iter_size 2.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.spec.caffe import net as net_module
from core.spec.caffe.prototxt import parse
from core.spec.caffe.solver import SOLVER_TYPES, SolverConfig
from tests.workers.training.caffe.reference import POLICY_SETTINGS, ReferenceSolver, config_for
from workers.training.caffe import model
from workers.training.caffe.solver import CaffeSolver

ITERATIONS = 20
BATCH = 6
NET = """
name: "tiny"
layer { name: "data" type: "Data" top: "data" top: "label"
        data_param { source: "unused_lmdb" batch_size: 6 backend: LMDB } }
layer { name: "ip1" type: "InnerProduct" bottom: "data" top: "ip1"
        param { lr_mult: 1 decay_mult: 1 } param { lr_mult: 2 decay_mult: 0 }
        inner_product_param { num_output: 5 } }
layer { name: "act" type: "TanH" bottom: "ip1" top: "ip1" }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
        param { lr_mult: 1 decay_mult: 2 } param { lr_mult: 2 decay_mult: 1 }
        inner_product_param { num_output: 3 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }
"""
MULTS = [(1.0, 1.0), (2.0, 0.0), (1.0, 2.0), (2.0, 1.0)]

_rng = np.random.RandomState(11)
WEIGHTS = [_rng.randn(5, 4) * 0.5, _rng.randn(5) * 0.1, _rng.randn(3, 5) * 0.5, _rng.randn(3) * 0.1]
BATCHES = [(_rng.randn(BATCH, 4), _rng.randint(0, 3, BATCH)) for _ in range(3)]


def batches_of(it: int, iter_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    picked = [BATCHES[(it * iter_size + k) % len(BATCHES)] for k in range(iter_size)]
    return [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in picked]


def by_hand(weights: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The net written directly: Linear, tanh, Linear, mean softmax cross-entropy."""
    w1, b1, w2, b2 = weights
    return torch.nn.functional.cross_entropy(torch.tanh(x @ w1.T + b1) @ w2.T + b2, y)


def train_prototxt(config: SolverConfig) -> list[float]:
    graph = net_module.build_graph(parse(NET, "tiny.prototxt"), "TRAIN", (4, 1, 1), 3)
    net = model.CaffeNet(graph, None, torch.Generator().manual_seed(0), dtype=torch.float64)
    infos = net.param_infos()
    assert [(i.layer, i.index, i.lr_mult, i.decay_mult) for i in infos] == [
        ("ip1", 0, 1.0, 1.0),
        ("ip1", 1, 2.0, 0.0),
        ("ip2", 0, 1.0, 2.0),
        ("ip2", 1, 2.0, 1.0),
    ]
    with torch.no_grad():
        for info, value in zip(infos, WEIGHTS, strict=True):
            info.param.copy_(torch.from_numpy(value))
    solver = CaffeSolver(infos, config)
    losses = []
    for it in range(ITERATIONS):
        solver.zero_grad()
        for x, y in batches_of(it, config.iter_size):
            blobs = net({"data": x.reshape(BATCH, 4, 1, 1), "label": y}, "TRAIN")
            loss = net.loss(blobs, "TRAIN")
            loss.backward()
            losses.append(loss.item())
        solver.step(it)
    return losses


def train_by_hand(config: SolverConfig) -> tuple[list[float], int]:
    reference = ReferenceSolver(WEIGHTS, MULTS, config)
    losses = []
    for it in range(ITERATIONS):
        grads = [np.zeros_like(w) for w in WEIGHTS]
        for x, y in batches_of(it, config.iter_size):
            tensors = [torch.tensor(w, requires_grad=True) for w in reference.weights]
            loss = by_hand(tensors, x, y)
            loss.backward()
            losses.append(loss.item())
            grads = [g + t.grad.numpy() for g, t in zip(grads, tensors, strict=True)]
        reference.step(grads, it)
    return losses, reference.clipped


@pytest.mark.parametrize("policy", list(POLICY_SETTINGS))
@pytest.mark.parametrize("kind", SOLVER_TYPES)
def test_prototxt_net_trains_as_the_net_written_by_hand(kind: str, policy: str) -> None:
    config = config_for(kind, policy, ITERATIONS, clip_gradients=0.8)
    got = train_prototxt(config)
    expected, clipped = train_by_hand(config)
    assert 0 < clipped < ITERATIONS  # clipping acts on some iterations, not all
    assert abs(expected[-1] - expected[0]) > 1e-4  # the run trains
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-9)


def test_l1_decay_too() -> None:
    config = config_for("SGD", "fixed", ITERATIONS, regularization_type="L1")
    np.testing.assert_allclose(train_prototxt(config), train_by_hand(config)[0], rtol=0, atol=1e-9)
