"""Caffe's fillers: how a layer's blobs get their first values, drawn from a torch.Generator.

The semantics are Caffe's (filler.hpp), not PyTorch's ``nn.init``, where they differ:

- ``constant`` (``value``), ``uniform`` (``min``, ``max``), ``gaussian`` (``mean``, ``std``;
  with ``sparse`` >= 0, each value is kept with probability ``sparse / shape[0]`` and zeroed
  otherwise, so that each input feeds ``sparse`` outputs on average);
- ``xavier``: uniform in ``[-sqrt(3/n), sqrt(3/n)]`` and ``msra``: gaussian with std
  ``sqrt(2/n)``, where ``n`` is ``fan_in = count / shape[0]`` by default (``variance_norm:
  FAN_IN``), ``fan_out = count / shape[1]`` (FAN_OUT) or their mean (AVERAGE); a blob with
  fewer than two axes counts its missing axes as 1, as Caffe's legacy shape does;
- ``positive_unitball``: uniform in [0, 1], each of the ``shape[0]`` rows scaled to sum 1;
- ``bilinear``: the interpolation kernel for upsampling, 4-axis square blobs only.

Values are drawn on the CPU in the blob's dtype, then copied to it, so a given generator
state gives the same weights on every device.
"""

from __future__ import annotations

import math

import torch

from core.errors import TrainingError
from core.spec.caffe.fields import resolve
from core.spec.caffe.prototxt import Message


def _legacy(shape: torch.Size, axis: int) -> int:
    return shape[axis] if axis < len(shape) else 1


def _fan(shape: torch.Size, norm: str) -> float:
    total = math.prod(shape)
    fan_in = total / _legacy(shape, 0)
    fan_out = total / _legacy(shape, 1)
    if norm == "AVERAGE":
        return (fan_in + fan_out) / 2.0
    return fan_out if norm == "FAN_OUT" else fan_in


def _bilinear(shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
    if len(shape) != 4 or shape[2] != shape[3]:
        raise TrainingError(
            f"the bilinear filler needs a 4-axis blob with a square kernel, not {list(shape)}"
        )
    width = shape[3]
    f = math.ceil(width / 2.0)
    c = (width - 1) / (2.0 * f)
    axis = 1 - (torch.arange(width, dtype=torch.float64) / f - c).abs()
    kernel = axis[:, None] * axis[None, :]
    return kernel.expand(shape).to(dtype).clone()


def values(
    shape: torch.Size | tuple[int, ...],
    filler: Message | None,
    generator: torch.Generator,
    dtype: torch.dtype = torch.float32,
    default_type: str = "constant",
    default_value: float = 0.0,
) -> torch.Tensor:
    """A new CPU tensor of `shape` filled as `filler` says (absent: `default_type`)."""
    shape = torch.Size(shape)
    p = resolve(filler, "FillerParameter")
    # A message without `type` is Caffe's default filler (constant); no message at all is
    # the layer's own default (PReLU's 0.25, Scale's 1).
    kind = p["type"] if filler is not None else default_type
    if filler is None:
        p["value"] = default_value
    if p["sparse"] != -1 and kind != "gaussian":
        raise TrainingError(f"filler {kind!r}: sparse applies to the gaussian filler only")
    if kind == "constant":
        return torch.full(shape, p["value"], dtype=dtype)
    if kind == "uniform":
        low, high = p["min"], p["max"]
        return torch.rand(shape, generator=generator, dtype=dtype) * (high - low) + low
    if kind == "gaussian":
        out = torch.randn(shape, generator=generator, dtype=dtype) * p["std"] + p["mean"]
        if p["sparse"] >= 0:
            if not len(shape):
                raise TrainingError("a sparse gaussian filler needs a blob of at least 1 axis")
            keep = p["sparse"] / shape[0]
            mask = torch.rand(shape, generator=generator, dtype=torch.float64) < keep
            out = out * mask.to(dtype)
        return out
    if kind == "xavier":
        scale = math.sqrt(3.0 / _fan(shape, p["variance_norm"]))
        return torch.rand(shape, generator=generator, dtype=dtype) * (2 * scale) - scale
    if kind == "msra":
        std = math.sqrt(2.0 / _fan(shape, p["variance_norm"]))
        return torch.randn(shape, generator=generator, dtype=dtype) * std
    if kind == "positive_unitball":
        out = torch.rand(shape, generator=generator, dtype=dtype)
        rows = out.reshape(_legacy(shape, 0), -1)
        return (rows / rows.sum(dim=1, keepdim=True)).reshape(shape)
    if kind == "bilinear":
        return _bilinear(shape, dtype)
    raise TrainingError(f"filler type {kind!r} is not one of Caffe's")


def fill(
    tensor: torch.Tensor,
    filler: Message | None,
    generator: torch.Generator,
    default_type: str = "constant",
    default_value: float = 0.0,
) -> torch.Tensor:
    """Fill `tensor` in place as `filler` says (a FillerParameter message, or None for
    `default_type` with `default_value`); returns it."""
    drawn = values(tensor.shape, filler, generator, tensor.dtype, default_type, default_value)
    with torch.no_grad():
        tensor.copy_(drawn)
    return tensor
