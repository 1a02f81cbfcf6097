"""The multilayer perceptron a trial trains, built from `ModelConfig`.

Each hidden layer is Linear -> BatchNorm1d (if `batch_norm`) -> activation -> Dropout (if
`dropout` > 0), then one Linear to the outputs; `hidden_layers: 0` is a linear model.
`init` other than `default` sets every Linear's weight with that scheme, using the gain of
the layer's activation (`torch.nn.init.calculate_gain`; elu and gelu take relu's, the output
layer takes 1), and zeroes the biases. `default` keeps PyTorch's own initialisation.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from core.errors import TrainingError
from core.spec.config import ModelConfig, TrialConfig

if TYPE_CHECKING:
    from workers.training.datasets import Dataset

logger = logging.getLogger(__name__)

_ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "sigmoid": nn.Sigmoid,
    "elu": nn.ELU,
    "gelu": nn.GELU,
    "leaky_relu": nn.LeakyReLU,
    "selu": nn.SELU,
}
# calculate_gain's name for each activation; it knows no elu or gelu, which are relu-like.
_NONLINEARITY = {
    "relu": "relu",
    "tanh": "tanh",
    "sigmoid": "sigmoid",
    "elu": "relu",
    "gelu": "relu",
    "leaky_relu": "leaky_relu",
    "selu": "selu",
}
# What the weights, their gradients and an optimiser's two moment buffers take together.
TRAINING_COPIES = 4


def _init_linear(layer: nn.Linear, scheme: str, nonlinearity: str) -> None:
    weight = layer.weight
    slope = 0.01 if nonlinearity == "leaky_relu" else None
    gain = nn.init.calculate_gain(nonlinearity, slope)
    if scheme == "xavier_uniform":
        nn.init.xavier_uniform_(weight, gain=gain)
    elif scheme == "xavier_normal":
        nn.init.xavier_normal_(weight, gain=gain)
    elif scheme == "kaiming_uniform":
        nn.init.kaiming_uniform_(weight, a=slope or 0.0, nonlinearity=nonlinearity)
    elif scheme == "kaiming_normal":
        nn.init.kaiming_normal_(weight, a=slope or 0.0, nonlinearity=nonlinearity)
    elif scheme == "orthogonal":
        nn.init.orthogonal_(weight, gain=gain)
    else:
        raise ValueError(f"unknown init {scheme!r}")
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)


def layer_shapes(in_features: int, widths: list[int], out_features: int) -> list[tuple[int, int]]:
    """(in, out) of every Linear, hidden layers first, the output layer last."""
    sizes = [in_features, *widths, out_features]
    return list(itertools.pairwise(sizes))


def _layer_name(index: int, count: int) -> str:
    return "output layer" if index == count - 1 else f"hidden layer {index + 1}"


def build_mlp(
    config: ModelConfig,
    in_features: int,
    out_features: int,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> nn.Module:
    """An `nn.Sequential` MLP for `config`, built directly on `device` in `dtype`.

    Building in place avoids a CPU copy of a model meant for a GPU. A layer that cannot be
    allocated raises `TrainingError` naming it.
    """
    if config.kind != "mlp":
        raise TrainingError(f"model.kind {config.kind!r} is not supported; only mlp is")
    shapes = layer_shapes(in_features, config.widths, out_features)
    nonlinearity = _NONLINEARITY[config.activation]
    layers: list[nn.Module] = []
    for index, (fan_in, fan_out) in enumerate(shapes):
        hidden = index < len(shapes) - 1
        try:
            linear = nn.Linear(fan_in, fan_out, device=device, dtype=dtype)
            if config.init != "default":
                _init_linear(linear, config.init, nonlinearity if hidden else "linear")
            layers.append(linear)
            if hidden and config.batch_norm:
                layers.append(nn.BatchNorm1d(fan_out, device=device, dtype=dtype))
        except (RuntimeError, MemoryError) as err:  # torch.OutOfMemoryError is a RuntimeError
            text = str(err).strip()
            first_line = text.splitlines()[0] if text else type(err).__name__
            raise TrainingError(
                f"cannot build {_layer_name(index, len(shapes))} "
                f"(Linear {fan_in} -> {fan_out}, {fan_in * fan_out + fan_out:,} parameters): "
                f"{first_line}"
            ) from None
        if hidden:
            layers.append(_ACTIVATIONS[config.activation]())
            if config.dropout > 0:
                layers.append(nn.Dropout(config.dropout))
    return nn.Sequential(*layers)


def count_parameters(model: nn.Module) -> int:
    """The number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def expected_parameters(config: ModelConfig, in_features: int, out_features: int) -> int:
    """The trainable parameter count `build_mlp` will give, without building anything."""
    shapes = layer_shapes(in_features, config.widths, out_features)
    total = sum(fan_in * fan_out + fan_out for fan_in, fan_out in shapes)
    if config.batch_norm:
        total += 2 * sum(config.widths)
    return total


def available_memory(device: torch.device) -> int | None:
    """Free bytes on `device` (total memory where free cannot be told), or None if unknown."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def check_fits(
    config: ModelConfig,
    in_features: int,
    out_features: int,
    device: torch.device,
    dtype: torch.dtype,
) -> None:
    """Refuse a model whose training state cannot fit in `device`'s free memory.

    On Linux a CPU allocation past free memory often succeeds and the kernel later kills the
    whole worker; refusing up front turns that into a failed trial with a reason.
    """
    free = available_memory(device)
    if free is None:
        return
    itemsize = torch.empty((), dtype=dtype).element_size()
    needed = expected_parameters(config, in_features, out_features) * itemsize * TRAINING_COPIES
    if needed <= free:
        return
    shapes = layer_shapes(in_features, config.widths, out_features)
    index, (fan_in, fan_out) = max(enumerate(shapes), key=lambda item: item[1][0] * item[1][1])
    gib = 1024**3
    raise TrainingError(
        f"model too large for {device}: its largest layer, {_layer_name(index, len(shapes))} "
        f"(Linear {fan_in} -> {fan_out}), holds {fan_in * fan_out + fan_out:,} parameters; "
        f"weights, gradients and optimiser state need {needed / gib:.1f} GiB in "
        f"{str(dtype).removeprefix('torch.')} but {free / gib:.1f} GiB is free"
    )


def model_meta(config: TrialConfig, data: Dataset, dtype: torch.dtype) -> dict[str, Any]:
    """What rebuilds a trained MLP from its weights (`workers.models_io`): its trial's
    config, its input and output widths, its task and its parameters' dtype."""
    return {
        "kind": "mlp",
        "config": config.model_dump(mode="json"),
        "n_in": data.n_features,
        "n_out": data.out_features,
        "task": data.task,
        "dtype": str(dtype).removeprefix("torch."),
    }
