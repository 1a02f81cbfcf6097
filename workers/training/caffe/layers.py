"""Each Caffe layer type as PyTorch computes it, with Caffe's semantics where they differ.

`make_forward(layer)` turns a `LayerDef` into a function ``(blobs, bottoms, train) -> tops``;
`make_blobs(layer, generator, dtype)` draws the layer's learnable blobs with its fillers
(`fillers`) and makes its kept statistics (BatchNorm's mean, variance and factor). Where
Caffe and PyTorch part ways: InnerProduct flattens every axis from ``axis`` (weights
``(num_output, K)``, or ``(K, num_output)`` with ``transpose``); pooling and LRN are Caffe's
(`pooling`); BatchNorm keeps Caffe's three blobs, running sums scaled by a factor,
``moving_average_fraction`` and the unbiased variance ``m/(m-1)``, and uses them when
``use_global_stats`` (default: in TEST); Scale is a separate layer (``bias_term`` adds a
bias); Eltwise MAX sends the gradient to the first input that holds the maximum; Dropout
scales by ``1/(1-ratio)`` in TRAIN and is the identity in TEST; the losses are `losses`'.
Nothing runs in place: an in-place layer's top replaces its bottom's name in the blob map.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from core.errors import TrainingError
from core.spec.caffe.geometry import canonical_axis, conv_window, pool_window
from core.spec.caffe.net import LayerDef
from core.spec.caffe.prototxt import Message
from core.spec.caffe.shapes import Ctx, LayerError, reshape
from workers.training.caffe import losses
from workers.training.caffe.fillers import values
from workers.training.caffe.pooling import lrn, pool

#: (learnable blobs, kept statistics) of one layer, in Caffe's blob order.
Blobs = tuple[list[Tensor], list[Tensor]]
Forward = Callable[[Blobs, list[Tensor], bool], list[Tensor]]

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def make_blobs(layer: LayerDef, generator: torch.Generator, dtype: torch.dtype) -> Blobs:
    """The layer's learnable blobs drawn by its fillers, and its statistics (zeros)."""
    shapes = layer.param_shapes
    drawn: list[Tensor] = []
    if layer.type in ("Convolution", "InnerProduct"):
        p = layer.param(
            "convolution_param" if layer.type == "Convolution" else "inner_product_param"
        )
        drawn.append(values(shapes[0], p["weight_filler"], generator, dtype))
        if len(shapes) > 1:
            drawn.append(values(shapes[1], p["bias_filler"], generator, dtype))
    elif layer.type == "PReLU":
        p = layer.param("prelu_param")
        drawn.append(values(shapes[0], p["filler"], generator, dtype, "constant", 0.25))
    elif layer.type == "Scale":
        p = layer.param("scale_param")
        if len(layer.bottoms) == 1:
            drawn.append(values(shapes[0], p["filler"], generator, dtype, "constant", 1.0))
        if p["bias_term"]:
            drawn.append(values(shapes[-1], p["bias_filler"], generator, dtype))
    elif shapes:
        raise TrainingError(f"layer '{layer.name}' ({layer.type}) has blobs but no filler rule")
    stats = [torch.zeros(s, dtype=dtype) for s in layer.stat_shapes]
    return drawn, stats


def _channel_view(blob: Tensor, x: Tensor, axis: int) -> Tensor:
    """`blob` (shape x.shape[axis:axis+k]) shaped to broadcast against `x`."""
    return blob.reshape((1,) * axis + tuple(blob.shape) + (1,) * (x.dim() - axis - blob.dim()))


def _convolution(layer: LayerDef) -> Forward:
    p = layer.param("convolution_param")
    spatial = layer.bottom_shapes[0][2:]
    window = conv_window(p, spatial)
    conv, group = _CONV[len(spatial)], p["group"]

    def forward(blobs: Blobs, bottoms: list[Tensor], train: bool) -> list[Tensor]:
        params = blobs[0]
        bias = params[1] if len(params) > 1 else None
        return [
            conv(bottoms[0], params[0], bias, window.stride, window.pad, window.dilation, group)
        ]

    return forward


def _inner_product(layer: LayerDef) -> Forward:
    p = layer.param("inner_product_param")
    axis = canonical_axis(p["axis"], len(layer.bottom_shapes[0]))
    transpose = p["transpose"]

    def forward(blobs: Blobs, bottoms: list[Tensor], train: bool) -> list[Tensor]:
        params = blobs[0]
        x = bottoms[0].flatten(axis) if axis < bottoms[0].dim() - 1 else bottoms[0]
        weight = params[0].t() if transpose else params[0]
        return [F.linear(x, weight, params[1] if len(params) > 1 else None)]

    return forward


def _pooling(layer: LayerDef) -> Forward:
    p = layer.param("pooling_param")
    method = p["pool"]

    def forward(blobs: Blobs, bottoms: list[Tensor], train: bool) -> list[Tensor]:
        x = bottoms[0]
        return [pool(x, pool_window(p, tuple(x.shape[2:])), method)]

    return forward


def _batch_norm(layer: LayerDef) -> Forward:
    p = layer.param("batch_norm_param")
    fraction, eps, fixed = p["moving_average_fraction"], p["eps"], p["use_global_stats"]

    def forward(blobs: Blobs, bottoms: list[Tensor], train: bool) -> list[Tensor]:
        x = bottoms[0]
        mean_sum, var_sum, factor = blobs[1]
        flat = x.reshape(x.shape[0], x.shape[1] if x.dim() > 1 else 1, -1)
        use_global = (not train) if fixed is None else fixed
        if use_global:
            # Caffe's 1 / factor, or 0 before any batch was seen (no device sync here)
            scale = torch.where(factor == 0, torch.zeros_like(factor), 1.0 / factor)
            mean, var = mean_sum * scale, var_sum * scale
        else:
            mean = flat.mean(dim=(0, 2))
            var = (flat - mean[None, :, None]).pow(2).mean(dim=(0, 2))
            m = flat.numel() // flat.shape[1]
            with torch.no_grad():
                factor.mul_(fraction).add_(1.0)
                mean_sum.mul_(fraction).add_(mean.detach())
                var_sum.mul_(fraction).add_(var.detach() * (m / (m - 1) if m > 1 else 1.0))
        normed = (flat - mean[None, :, None]) / torch.sqrt(var[None, :, None] + eps)
        return [normed.reshape(x.shape)]

    return forward


def _scale(layer: LayerDef) -> Forward:
    p = layer.param("scale_param")
    shape = layer.bottom_shapes[0]
    two = len(layer.bottoms) == 2
    other = layer.bottom_shapes[1] if two else ()
    axis = canonical_axis(p["axis"], len(shape)) if shape and (not two or other) else 0
    bias = p["bias_term"]

    def forward(blobs: Blobs, bottoms: list[Tensor], train: bool) -> list[Tensor]:
        x, params = bottoms[0], blobs[0]
        factor = bottoms[1] if two else params[0]
        out = x * _channel_view(factor, x, axis)
        if bias:
            out = out + _channel_view(params[-1], x, axis)
        return [out]

    return forward


def _prelu(layer: LayerDef) -> Forward:
    def forward(blobs: Blobs, bottoms: list[Tensor], train: bool) -> list[Tensor]:
        x, slope = bottoms[0], blobs[0][0]
        slope = slope if slope.dim() == 0 else _channel_view(slope, x, 1)
        return [x.clamp_min(0) + slope * x.clamp_max(0)]

    return forward


def _eltwise(layer: LayerDef) -> Forward:
    p = layer.param("eltwise_param")
    op, coeffs = p["operation"], p["coeff"] or [1.0] * len(layer.bottoms)

    def forward(blobs: Blobs, bottoms: list[Tensor], train: bool) -> list[Tensor]:
        if op == "SUM":
            out = bottoms[0] * coeffs[0] if coeffs[0] != 1.0 else bottoms[0]
            for c, b in zip(coeffs[1:], bottoms[1:], strict=True):
                out = out + (b * c if c != 1.0 else b)
            return [out]
        if op == "PROD":
            out = bottoms[0]
            for b in bottoms[1:]:
                out = out * b
            return [out]
        # max(dim=0) sends the gradient to the first input holding the maximum, as Caffe does.
        return [torch.stack(bottoms).max(dim=0).values]

    return forward


def _elementwise(fn: Callable[[Tensor], Tensor]) -> Forward:
    def forward(blobs: Blobs, bottoms: list[Tensor], train: bool) -> list[Tensor]:
        return [fn(bottoms[0])]

    return forward


def _unary(layer: LayerDef) -> Forward:
    kind = layer.type
    if kind == "ReLU":
        slope = layer.param("relu_param")["negative_slope"]
        return _elementwise(F.relu if slope == 0 else lambda x: F.leaky_relu(x, slope))
    if kind == "ELU":
        alpha = layer.param("elu_param")["alpha"]
        return _elementwise(lambda x: F.elu(x, alpha))
    if kind == "Power":
        p = layer.param("power_param")
        return _elementwise(lambda x: (p["shift"] + p["scale"] * x).pow(p["power"]))
    if kind in ("Exp", "Log"):
        p = layer.param("exp_param" if kind == "Exp" else "log_param")
        ln_base = 1.0 if p["base"] == -1 else math.log(p["base"])
        if kind == "Exp":
            return _elementwise(lambda x: torch.exp(ln_base * (p["shift"] + p["scale"] * x)))
        return _elementwise(lambda x: torch.log(p["shift"] + p["scale"] * x) / ln_base)
    if kind == "LRN":
        p = layer.param("lrn_param")
        return _elementwise(
            lambda x: lrn(x, p["local_size"], p["alpha"], p["beta"], p["k"], p["norm_region"])
        )
    if kind == "Softmax":
        axis = canonical_axis(layer.param("softmax_param")["axis"], len(layer.bottom_shapes[0]))
        return _elementwise(lambda x: F.softmax(x, dim=axis))
    simple: dict[str, Callable[[Tensor], Tensor]] = {
        "Sigmoid": torch.sigmoid,
        "TanH": torch.tanh,
        "AbsVal": torch.abs,
    }
    return _elementwise(simple[kind])


def _dropout(layer: LayerDef) -> Forward:
    ratio = layer.param("dropout_param")["dropout_ratio"]

    def forward(blobs: Blobs, bottoms: list[Tensor], train: bool) -> list[Tensor]:
        return [F.dropout(bottoms[0], ratio, training=train) if ratio else bottoms[0]]

    return forward


def _flatten(layer: LayerDef) -> Forward:
    p = layer.param("flatten_param")

    def forward(blobs: Blobs, bottoms: list[Tensor], train: bool) -> list[Tensor]:
        x = bottoms[0]
        start = canonical_axis(p["axis"], x.dim())
        return [x.flatten(start, canonical_axis(p["end_axis"], x.dim()))]

    return forward


def _reshape(layer: LayerDef) -> Forward:
    params = {"reshape_param": layer.param("reshape_param")}

    def forward(blobs: Blobs, bottoms: list[Tensor], train: bool) -> list[Tensor]:
        x = bottoms[0]
        try:
            (shape,) = reshape(Ctx(layer.type, layer.message, params, [tuple(x.shape)], 1)).tops
        except LayerError as exc:
            raise TrainingError(f"layer '{layer.name}' (Reshape): {exc}") from None
        return [x.reshape(shape)]

    return forward


def _axis_of(layer: LayerDef, name: str, old: str) -> int:
    p = layer.param(name)
    return canonical_axis(p[old] if p[old] is not None else p["axis"], len(layer.bottom_shapes[0]))


def _concat(layer: LayerDef) -> Forward:
    axis = _axis_of(layer, "concat_param", "concat_dim")
    return lambda blobs, bottoms, train: [torch.cat(bottoms, dim=axis)]


def _slice(layer: LayerDef) -> Forward:
    axis = _axis_of(layer, "slice_param", "slice_dim")
    sizes = [s[axis] for s in layer.top_shapes]
    return lambda blobs, bottoms, train: list(torch.split(bottoms[0], sizes, dim=axis))


def _split(layer: LayerDef) -> Forward:
    n = len(layer.tops)
    return lambda blobs, bottoms, train: [bottoms[0]] * n


def _loss_mode(layer: LayerDef, default: str) -> tuple[int | None, str]:
    msg = layer.message.get("loss_param")
    ignore = layer.param("loss_param")["ignore_label"]
    return ignore, losses.normalization(msg if isinstance(msg, Message) else None, default)


def _softmax_with_loss(layer: LayerDef) -> Forward:
    axis = canonical_axis(layer.param("softmax_param")["axis"], len(layer.bottom_shapes[0]))
    ignore, mode = _loss_mode(layer, "VALID")
    prob = len(layer.tops) > 1

    def forward(blobs: Blobs, bottoms: list[Tensor], train: bool) -> list[Tensor]:
        scores, labels = bottoms
        out = [losses.softmax_loss(scores, labels, axis, ignore, mode)]
        return out + ([F.softmax(scores, dim=axis)] if prob else [])

    return forward


def _sigmoid_cross_entropy(layer: LayerDef) -> Forward:
    ignore, mode = _loss_mode(layer, "BATCH_SIZE")
    return lambda blobs, bottoms, train: [
        losses.sigmoid_cross_entropy(bottoms[0], bottoms[1], ignore, mode)
    ]


def _accuracy(layer: LayerDef) -> Forward:
    p = layer.param("accuracy_param")
    axis = canonical_axis(p["axis"], len(layer.bottom_shapes[0]))
    n = len(layer.tops)

    def forward(blobs: Blobs, bottoms: list[Tensor], train: bool) -> list[Tensor]:
        overall, per_class = losses.accuracy(*bottoms, axis, p["top_k"], p["ignore_label"])
        return [overall, per_class][:n]

    return forward


_BUILDERS: dict[str, Callable[[LayerDef], Forward]] = {
    "Convolution": _convolution,
    "InnerProduct": _inner_product,
    "Pooling": _pooling,
    "BatchNorm": _batch_norm,
    "Scale": _scale,
    "PReLU": _prelu,
    "Eltwise": _eltwise,
    "Dropout": _dropout,
    "Flatten": _flatten,
    "Reshape": _reshape,
    "Concat": _concat,
    "Slice": _slice,
    "Split": _split,
    "SoftmaxWithLoss": _softmax_with_loss,
    "SigmoidCrossEntropyLoss": _sigmoid_cross_entropy,
    "EuclideanLoss": lambda layer: lambda blobs, bottoms, train: [losses.euclidean(*bottoms)],
    "Accuracy": _accuracy,
    **{
        kind: _unary
        for kind in (
            "ReLU",
            "ELU",
            "Power",
            "Exp",
            "Log",
            "LRN",
            "Softmax",
            "Sigmoid",
            "TanH",
            "AbsVal",
        )
    },
}


def make_forward(layer: LayerDef) -> Forward:
    """The function computing `layer`'s tops from its blobs and bottoms."""
    builder = _BUILDERS.get(layer.type)
    if builder is None:
        raise TrainingError(f"layer '{layer.name}' ({layer.type}) has no PyTorch form")
    return builder(layer)
