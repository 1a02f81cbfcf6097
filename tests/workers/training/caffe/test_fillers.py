"""Caffe's fillers, checked against values worked out by hand from filler.hpp."""

from __future__ import annotations

import math

import pytest
import torch

from core.errors import TrainingError
from core.spec.caffe.prototxt import parse
from workers.training.caffe.fillers import fill, values


def draw(text: str | None, shape: tuple[int, ...], seed: int = 0, **kw: object) -> torch.Tensor:
    filler = parse(text) if text is not None else None
    gen = torch.Generator().manual_seed(seed)
    return values(shape, filler, gen, torch.float64, **kw)  # type: ignore[arg-type]


def test_constant_and_the_layer_defaults_when_no_filler_is_given() -> None:
    def full(shape: tuple[int, ...], value: float) -> torch.Tensor:
        return torch.full(shape, value, dtype=torch.float64)

    assert torch.equal(draw('type: "constant" value: 0.5', (2, 3)), full((2, 3), 0.5))
    assert torch.equal(draw(None, (3,)), full((3,), 0.0))  # Caffe's default: constant 0
    assert torch.equal(draw(None, (2,), default_value=0.25), full((2,), 0.25))  # PReLU's
    # A message without a type is Caffe's default filler, constant, whatever the layer's default.
    assert torch.equal(draw("value: 3", (1,), default_value=0.25), full((1,), 3.0))


def test_uniform_and_gaussian() -> None:
    u = draw('type: "uniform" min: -2 max: -1', (1000,))
    assert u.min() >= -2 and u.max() < -1 and abs(float(u.mean()) + 1.5) < 0.05
    g = draw('type: "gaussian" mean: 3 std: 0.5', (200, 200))
    assert abs(float(g.mean()) - 3) < 0.01 and abs(float(g.std()) - 0.5) < 0.01


def test_sparse_gaussian_keeps_sparse_over_outputs_of_the_values() -> None:
    w = draw('type: "gaussian" std: 1 sparse: 2', (10, 5000))  # keep with p = 2 / 10
    assert abs(float((w != 0).double().mean()) - 0.2) < 0.01
    assert int((draw('type: "gaussian" sparse: 0', (4, 4)) != 0).sum()) == 0


@pytest.mark.parametrize(
    ("norm", "n"),
    [
        ("", 25.0),
        ("variance_norm: FAN_OUT", 20 * 25 / 1),
        ("variance_norm: AVERAGE", (25 + 500) / 2),
    ],
)
def test_xavier_bounds_follow_variance_norm(norm: str, n: float) -> None:
    w = draw(f'type: "xavier" {norm}', (20, 1, 5, 5))  # fan_in = 25, fan_out = 500 / 1
    bound = math.sqrt(3.0 / n)
    assert float(w.abs().max()) <= bound and float(w.abs().max()) > 0.95 * bound


def test_msra_std_is_sqrt_2_over_fan_in() -> None:
    w = draw('type: "msra"', (64, 32, 3, 3))  # fan_in = 288
    assert abs(float(w.std()) / math.sqrt(2 / 288) - 1) < 0.02
    out = draw('type: "msra" variance_norm: FAN_OUT', (64, 32, 3, 3))  # fan_out = 64 * 9
    assert abs(float(out.std()) / math.sqrt(2 / 576) - 1) < 0.02
    bias = draw('type: "xavier"', (10,))  # one axis: fan_in = 10 / 10 = 1
    assert float(bias.abs().max()) > 1.0


def test_positive_unitball_rows_sum_to_one() -> None:
    w = draw('type: "positive_unitball"', (4, 3, 2))
    assert w.min() >= 0
    assert torch.allclose(w.reshape(4, -1).sum(1), torch.ones(4, dtype=torch.float64))


def test_bilinear_kernel() -> None:
    w = draw('type: "bilinear"', (2, 1, 4, 4))
    # f = ceil(4 / 2) = 2, c = (4 - 1) / (2 f) = 0.75: 1 - |x / 2 - 0.75| for x = 0..3
    axis = torch.tensor([0.25, 0.75, 0.75, 0.25], dtype=torch.float64)
    assert torch.allclose(w[1, 0], axis[:, None] * axis[None, :])
    three = draw('type: "bilinear"', (1, 1, 3, 3))[0, 0]  # f = 2, c = 0.5
    assert torch.allclose(three[1], torch.tensor([0.5, 1.0, 0.5], dtype=torch.float64))
    with pytest.raises(TrainingError, match="square kernel"):
        draw('type: "bilinear"', (1, 1, 3, 2))


def test_the_generator_decides_and_fill_works_in_place() -> None:
    first = draw('type: "gaussian"', (5,), seed=3)
    assert torch.equal(first, draw('type: "gaussian"', (5,), seed=3))
    assert not torch.equal(first, draw('type: "gaussian"', (5,), seed=4))
    tensor = torch.empty(3, 2, dtype=torch.float32)
    out = fill(tensor, parse('type: "uniform" min: 1 max: 2'), torch.Generator().manual_seed(0))
    assert out is tensor and tensor.dtype == torch.float32 and tensor.min() >= 1


def test_sparse_on_another_filler_is_refused() -> None:
    with pytest.raises(TrainingError, match="sparse applies to the gaussian filler only"):
        draw('type: "xavier" sparse: 3', (2, 2))
