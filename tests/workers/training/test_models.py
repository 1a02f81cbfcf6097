"""The MLP builder: shapes, every activation and init, batch norm, dropout, sizes."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from core.errors import TrainingError
from core.spec.config import ACTIVATIONS, INITS, ModelConfig
from workers.training import models
from workers.training.models import (
    build_mlp,
    check_fits,
    count_parameters,
    expected_parameters,
)


@pytest.fixture(autouse=True)
def _seeded() -> None:
    torch.manual_seed(0)


def _linears(model: nn.Module) -> list[nn.Linear]:
    return [m for m in model.modules() if isinstance(m, nn.Linear)]


def test_widths_shape_and_parameter_count() -> None:
    config = ModelConfig(hidden_layers=2, hidden_units=[32, 16])
    model = build_mlp(config, in_features=8, out_features=3)
    assert [(m.in_features, m.out_features) for m in _linears(model)] == [
        (8, 32),
        (32, 16),
        (16, 3),
    ]
    assert model(torch.randn(5, 8)).shape == (5, 3)
    expected = 8 * 32 + 32 + 32 * 16 + 16 + 16 * 3 + 3
    assert count_parameters(model) == expected == expected_parameters(config, 8, 3)


def test_zero_hidden_layers_is_a_linear_model() -> None:
    model = build_mlp(ModelConfig(hidden_layers=0), in_features=4, out_features=2)
    assert len(model) == 1 and isinstance(model[0], nn.Linear)
    assert count_parameters(model) == 4 * 2 + 2


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_every_activation(activation: str) -> None:
    model = build_mlp(ModelConfig(hidden_layers=2, activation=activation), 6, 2)
    kinds = {type(m).__name__.lower() for m in model}
    assert activation.replace("_", "") in kinds
    assert torch.isfinite(model(torch.randn(4, 6))).all()


@pytest.mark.parametrize("init", [i for i in INITS if i != "default"])
def test_every_init_sets_weights_and_zeroes_biases(init: str) -> None:
    config = ModelConfig(hidden_layers=1, hidden_units=256, activation="tanh", init=init)
    model = build_mlp(config, in_features=256, out_features=4)
    hidden = _linears(model)[0]
    for layer in _linears(model):
        assert torch.count_nonzero(layer.bias) == 0
        assert torch.isfinite(layer.weight).all()
    gain = nn.init.calculate_gain("tanh")
    weight = hidden.weight.detach()
    if init == "orthogonal":
        product = weight @ weight.T
        assert torch.allclose(product, gain**2 * torch.eye(256), atol=1e-3)
    elif init == "xavier_uniform":
        assert weight.abs().max() <= gain * (6 / (256 + 256)) ** 0.5 + 1e-6
    else:  # xavier_normal, kaiming_*: std = gain / sqrt(fan_in) here (fan_in == fan_out)
        assert weight.std().item() == pytest.approx(gain / 256**0.5, rel=0.05)


def test_default_init_keeps_torch_biases() -> None:
    model = build_mlp(ModelConfig(hidden_layers=1, hidden_units=32), 8, 2)
    assert all(torch.count_nonzero(layer.bias) > 0 for layer in _linears(model))


def test_output_layer_gets_linear_gain() -> None:
    config = ModelConfig(
        hidden_layers=1, hidden_units=512, activation="relu", init="kaiming_normal"
    )
    output = _linears(build_mlp(config, in_features=16, out_features=512))[-1]
    assert output.weight.std().item() == pytest.approx(1 / 512**0.5, rel=0.05)


def test_batch_norm_and_dropout() -> None:
    config = ModelConfig(hidden_layers=2, hidden_units=16, batch_norm=True, dropout=0.5)
    model = build_mlp(config, 8, 3)
    names = [type(m).__name__ for m in model]
    assert names == [
        "Linear", "BatchNorm1d", "ReLU", "Dropout",
        "Linear", "BatchNorm1d", "ReLU", "Dropout",
        "Linear",
    ]  # fmt: skip
    assert count_parameters(model) == expected_parameters(config, 8, 3)
    x = torch.randn(32, 8)
    model.train()
    assert not torch.equal(model(x), model(x))  # dropout draws a new mask each pass
    model.eval()
    assert torch.equal(model(x), model(x))


def test_no_dropout_layer_when_zero() -> None:
    model = build_mlp(ModelConfig(hidden_layers=2, dropout=0.0), 4, 2)
    assert not any(isinstance(m, nn.Dropout) for m in model)


def test_builds_in_dtype() -> None:
    config = ModelConfig(hidden_layers=1, batch_norm=True)
    model = build_mlp(config, 4, 2, dtype=torch.float64)
    assert {p.dtype for p in model.parameters()} == {torch.float64}


def test_model_too_large_for_memory_names_the_layer() -> None:
    config = ModelConfig(hidden_layers=3, hidden_units=1_000_000)
    with pytest.raises(TrainingError) as caught:
        check_fits(config, 64, 10, torch.device("cpu"), torch.float32)
    assert "hidden layer 2 (Linear 1000000 -> 1000000)" in caught.value.reason
    assert "GiB" in caught.value.reason


def test_small_model_fits() -> None:
    check_fits(ModelConfig(), 64, 10, torch.device("cpu"), torch.float32)


def test_allocation_failure_names_the_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    real_linear = nn.Linear

    def linear(fan_in: int, fan_out: int, **kwargs: object) -> nn.Linear:
        if fan_in * fan_out > 10_000:
            raise RuntimeError("[enforce fail] DefaultCPUAllocator: can't allocate memory\nmore")
        return real_linear(fan_in, fan_out, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(models.nn, "Linear", linear)
    with pytest.raises(TrainingError) as caught:
        build_mlp(ModelConfig(hidden_layers=2, hidden_units=[32, 1000]), 8, 2)
    assert caught.value.reason.startswith("cannot build hidden layer 2 (Linear 32 -> 1000")
    assert "can't allocate memory" in caught.value.reason
    assert "more" not in caught.value.reason
