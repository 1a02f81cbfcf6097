"""Caffe's shape rules, one per layer type: the tops' shapes and the blobs' shapes.

A rule gets a `Ctx` (the layer's resolved ``*_param`` values, its bottoms' shapes, batch
first, and how many tops it has) and gives a `Shaped`: the tops' shapes and the learnable
blobs' shapes in Caffe's blob order (weights, then bias), or raises `LayerError` saying what
is wrong and what to change; `core.spec.caffe.net` adds the layer's name and type to the message.
Rules are registered by type in `core.spec.caffe.layers`.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

from core.spec.caffe.geometry import GeometryError, canonical_axis, conv_window, pool_window
from core.spec.caffe.prototxt import Message

Shape = tuple[int, ...]


class LayerError(ValueError):
    """A layer that cannot be built as written; the message says what to change."""


@dataclass
class Ctx:
    """What a shape rule sees: the layer's resolved params, its bottoms' shapes, its tops."""

    type: str
    message: Message
    params: dict[str, dict[str, Any]]
    bottoms: list[Shape]
    tops: int
    input_shape: Shape = ()
    num_classes: int | None = None

    def p(self, name: str) -> dict[str, Any]:
        """One ``*_param`` message's values, Caffe's defaults filled in."""
        return self.params[name]


@dataclass
class Shaped:
    """A shape rule's answer: the tops' shapes and the learnable blobs' shapes."""

    tops: list[Shape]
    params: list[Shape] = field(default_factory=list)
    #: blobs Caffe keeps that no solver updates (BatchNorm's mean, variance, scale factor).
    stats: list[Shape] = field(default_factory=list)


def count(shape: Shape) -> int:
    """How many values a blob of `shape` holds (1 for a scalar, as Caffe's count())."""
    return math.prod(shape)


def dims(shape: Shape) -> str:
    """A shape as errors write it: ``2x3x8x8``."""
    return "x".join(str(d) for d in shape) if shape else "a scalar"


def _axis(ctx: Ctx, axis: int, shape: Shape, what: str = "axis") -> int:
    try:
        return canonical_axis(axis, len(shape), what)
    except GeometryError as exc:
        raise LayerError(str(exc)) from None


def same(ctx: Ctx) -> Shaped:
    """The rule of element-wise layers: every top has the bottom's shape."""
    return Shaped([ctx.bottoms[0]] * max(ctx.tops, 1))


def _filler_ok(filler: Message | None, what: str) -> None:
    if filler is None:
        return
    kind = str(filler.get("type", "constant"))
    if filler.has("sparse") and kind != "gaussian" and filler.get("sparse") != -1:
        raise LayerError(f"{what}.sparse applies to the gaussian filler only, not {kind!r}")


def convolution(ctx: Ctx) -> Shaped:
    p = ctx.p("convolution_param")
    (shape,) = ctx.bottoms
    if p["axis"] != 1:
        raise LayerError("convolution_param.axis other than 1 is not supported; use axis: 1")
    if not 3 <= len(shape) <= 5:
        raise LayerError(
            f"the input {dims(shape)} must have 1 to 3 spatial axes after batch and channels"
        )
    if not p["num_output"]:
        raise LayerError("convolution_param.num_output is required (at least 1)")
    channels, group = shape[1], p["group"]
    if group < 1 or channels % group or p["num_output"] % group:
        raise LayerError(
            f"group {group} must divide both the input's {channels} channels and "
            f"num_output {p['num_output']}"
        )
    for name in ("weight_filler", "bias_filler"):
        _filler_ok(p[name], f"convolution_param.{name}")
    try:
        window = conv_window(p, shape[2:])
    except GeometryError as exc:
        raise LayerError(f"convolution_param: {exc}") from None
    weight = (p["num_output"], channels // group, *window.kernel)
    params = [weight] + ([(p["num_output"],)] if p["bias_term"] else [])
    return Shaped([(shape[0], p["num_output"], *window.out)], params)


def pooling(ctx: Ctx) -> Shaped:
    p = ctx.p("pooling_param")
    (shape,) = ctx.bottoms
    if p["pool"] == "STOCHASTIC":
        raise LayerError("pool: STOCHASTIC is not supported; use MAX or AVE")
    if len(shape) != 4:
        raise LayerError(f"Pooling needs a 4-axis input (N, C, H, W), not {dims(shape)}")
    try:
        window = pool_window(p, shape[2:])
    except GeometryError as exc:
        raise LayerError(f"pooling_param: {exc}") from None
    tops = [(shape[0], shape[1], *window.out)] * ctx.tops
    return Shaped(tops)


def inner_product(ctx: Ctx) -> Shaped:
    p = ctx.p("inner_product_param")
    (shape,) = ctx.bottoms
    if not p["num_output"]:
        raise LayerError("inner_product_param.num_output is required (at least 1)")
    axis = _axis(ctx, p["axis"], shape, "inner_product_param.axis")
    for name in ("weight_filler", "bias_filler"):
        _filler_ok(p[name], f"inner_product_param.{name}")
    k, n = count(shape[axis:]), p["num_output"]
    weight = (k, n) if p["transpose"] else (n, k)
    params = [weight] + ([(n,)] if p["bias_term"] else [])
    return Shaped([(*shape[:axis], n)], params)


def prelu(ctx: Ctx) -> Shaped:
    p = ctx.p("prelu_param")
    (shape,) = ctx.bottoms
    if len(shape) < 2:
        raise LayerError(f"PReLU needs an input of at least 2 axes, not {dims(shape)}")
    _filler_ok(p["filler"], "prelu_param.filler")
    return Shaped([shape], [() if p["channel_shared"] else (shape[1],)])


def _base_check(base: float, name: str) -> None:
    if base != -1 and base <= 0:
        raise LayerError(f"{name}.base must be positive or -1 (for e), not {base}")


def exp(ctx: Ctx) -> Shaped:
    _base_check(ctx.p("exp_param")["base"], "exp_param")
    return same(ctx)


def log(ctx: Ctx) -> Shaped:
    _base_check(ctx.p("log_param")["base"], "log_param")
    return same(ctx)


def dropout(ctx: Ctx) -> Shaped:
    ratio = ctx.p("dropout_param")["dropout_ratio"]
    if not 0.0 <= ratio < 1.0:
        raise LayerError(f"dropout_param.dropout_ratio must lie in [0, 1), not {ratio}")
    return same(ctx)


def batch_norm(ctx: Ctx) -> Shaped:
    (shape,) = ctx.bottoms
    channels = 1 if len(shape) == 1 else shape[1]
    if ctx.p("batch_norm_param")["eps"] < 0:
        raise LayerError("batch_norm_param.eps must not be negative")
    return Shaped([shape], [], [(channels,), (channels,), (1,)])


def scale(ctx: Ctx) -> Shaped:
    p = ctx.p("scale_param")
    shape = ctx.bottoms[0]
    _filler_ok(p["filler"], "scale_param.filler")
    _filler_ok(p["bias_filler"], "scale_param.bias_filler")
    if len(ctx.bottoms) == 2:
        other = ctx.bottoms[1]
        axis = 0 if not other else _axis(ctx, p["axis"], shape, "scale_param.axis")
        if tuple(shape[axis : axis + len(other)]) != tuple(other):
            raise LayerError(
                f"the scale input {dims(other)} must match the input {dims(shape)} from axis {axis}"
            )
        return Shaped([shape], [other] if p["bias_term"] else [])
    axis = _axis(ctx, p["axis"], shape, "scale_param.axis") if shape else 0
    num_axes = p["num_axes"]
    if num_axes < -1 or (num_axes >= 0 and axis + num_axes > len(shape)):
        raise LayerError(
            f"scale_param.num_axes {num_axes} does not fit an input of {len(shape)} axes from "
            f"axis {axis}; use -1 (every axis from axis) or a smaller number"
        )
    blob = tuple(shape[axis:]) if num_axes == -1 else tuple(shape[axis : axis + num_axes])
    return Shaped([shape], [blob, blob] if p["bias_term"] else [blob])


def lrn(ctx: Ctx) -> Shaped:
    p = ctx.p("lrn_param")
    (shape,) = ctx.bottoms
    if len(shape) != 4:
        raise LayerError(f"LRN needs a 4-axis input (N, C, H, W), not {dims(shape)}")
    if p["local_size"] < 1 or p["local_size"] % 2 == 0:
        raise LayerError(f"lrn_param.local_size must be odd, not {p['local_size']}")
    if p["norm_region"] == "WITHIN_CHANNEL" and p["local_size"] > min(shape[2:]) + 2 * (
        (p["local_size"] - 1) // 2
    ):
        raise LayerError("lrn_param.local_size is larger than the padded input")
    return same(ctx)


def flatten(ctx: Ctx) -> Shaped:
    p = ctx.p("flatten_param")
    (shape,) = ctx.bottoms
    start = _axis(ctx, p["axis"], shape, "flatten_param.axis")
    end = _axis(ctx, p["end_axis"], shape, "flatten_param.end_axis")
    if end < start:
        raise LayerError(f"flatten_param.end_axis {end} comes before axis {start}")
    return Shaped([(*shape[:start], count(shape[start : end + 1]), *shape[end + 1 :])])


def reshape(ctx: Ctx) -> Shaped:
    p = ctx.p("reshape_param")
    (shape,) = ctx.bottoms
    wanted = [int(d) for d in (p["shape"].getall("dim") if p["shape"] is not None else [])]
    axis = p["axis"]
    start = axis if axis >= 0 else len(shape) + axis + 1
    if not 0 <= start <= len(shape):
        raise LayerError(f"reshape_param.axis {axis} is out of range for {dims(shape)}")
    num_axes = p["num_axes"]
    end = len(shape) if num_axes == -1 else start + num_axes
    if num_axes < -1 or end > len(shape):
        raise LayerError(f"reshape_param.num_axes {num_axes} is out of range for {dims(shape)}")
    if wanted.count(-1) > 1 or any(d < -1 for d in wanted):
        raise LayerError("reshape_param.shape may hold one -1 (inferred) and no other negative")
    new = []
    for i, d in enumerate(wanted):
        if d == 0:
            if start + i >= len(shape):
                raise LayerError(
                    f"reshape_param.shape dim {i} is 0 but the input has no axis there"
                )
            d = shape[start + i]
        new.append(d)
    out = [*shape[:start], *new, *shape[end:]]
    known = count(tuple(d for d in out if d != -1))
    if -1 in out:
        if known == 0 or count(shape) % known:
            raise LayerError(f"reshape_param.shape {wanted} cannot hold the input {dims(shape)}")
        out[out.index(-1)] = count(shape) // known
    if count(tuple(out)) != count(shape):
        raise LayerError(
            f"reshape_param.shape gives {dims(tuple(out))} ({count(tuple(out))} values) from "
            f"the input {dims(shape)} ({count(shape)} values)"
        )
    return Shaped([tuple(out)])


def _old_axis(p: dict[str, Any], message: Message | None, old: str, where: str) -> int:
    if p[old] is not None:
        if message is not None and message.has("axis"):
            raise LayerError(f"{where}: give either axis or {old}, not both")
        return int(p[old])
    return int(p["axis"])


def concat(ctx: Ctx) -> Shaped:
    p = ctx.p("concat_param")
    first = ctx.bottoms[0]
    axis = _axis(
        ctx,
        _old_axis(p, ctx.message.get("concat_param"), "concat_dim", "concat_param"),
        first,
        "concat_param.axis",
    )
    for other in ctx.bottoms[1:]:
        if len(other) != len(first) or any(
            a != b for i, (a, b) in enumerate(zip(first, other, strict=True)) if i != axis
        ):
            raise LayerError(
                f"inputs {dims(first)} and {dims(other)} must agree on every axis but {axis}"
            )
    total = sum(b[axis] for b in ctx.bottoms)
    return Shaped([(*first[:axis], total, *first[axis + 1 :])])


def slice(ctx: Ctx) -> Shaped:
    p = ctx.p("slice_param")
    (shape,) = ctx.bottoms
    axis = _axis(
        ctx,
        _old_axis(p, ctx.message.get("slice_param"), "slice_dim", "slice_param"),
        shape,
        "slice_param.axis",
    )
    size, points = shape[axis], list(p["slice_point"])
    if points:
        if len(points) != ctx.tops - 1:
            raise LayerError(
                f"slice_param.slice_point has {len(points)} values for {ctx.tops} tops; "
                "give one fewer than the tops"
            )
        bounds = [0, *points, size]
        if any(b <= a for a, b in itertools.pairwise(bounds)):
            raise LayerError(
                f"slice_param.slice_point {points} must increase strictly inside (0, {size})"
            )
        sizes = [b - a for a, b in itertools.pairwise(bounds)]
    else:
        if size % ctx.tops:
            raise LayerError(
                f"axis {axis} of size {size} does not split evenly into {ctx.tops} tops; "
                "give slice_point"
            )
        sizes = [size // ctx.tops] * ctx.tops
    return Shaped([(*shape[:axis], s, *shape[axis + 1 :]) for s in sizes])


def eltwise(ctx: Ctx) -> Shaped:
    p = ctx.p("eltwise_param")
    first = ctx.bottoms[0]
    for other in ctx.bottoms[1:]:
        if other != first:
            raise LayerError(f"inputs {dims(first)} and {dims(other)} must have one shape")
    if p["coeff"]:
        if p["operation"] != "SUM":
            raise LayerError("eltwise_param.coeff applies to operation: SUM only")
        if len(p["coeff"]) != len(ctx.bottoms):
            raise LayerError(
                f"eltwise_param.coeff has {len(p['coeff'])} values for {len(ctx.bottoms)} "
                "bottoms; give one per bottom"
            )
    return Shaped([first])


def softmax(ctx: Ctx) -> Shaped:
    _axis(ctx, ctx.p("softmax_param")["axis"], ctx.bottoms[0], "softmax_param.axis")
    return same(ctx)


def _labels(ctx: Ctx, axis: int, kind: str) -> None:
    scores, labels = ctx.bottoms
    outer, inner = count(scores[:axis]), count(scores[axis + 1 :])
    if count(labels) != outer * inner:
        raise LayerError(
            f"the labels {dims(labels)} must hold one label per prediction: {outer * inner} "
            f"for scores {dims(scores)} along axis {axis}"
        )
    if ctx.num_classes is not None and scores[axis] < ctx.num_classes:
        raise LayerError(
            f"the scores have {scores[axis]} classes along axis {axis} but the data set has "
            f"{ctx.num_classes}; give the layer feeding it num_output {ctx.num_classes}"
        )


def softmax_loss(ctx: Ctx) -> Shaped:
    scores = ctx.bottoms[0]
    axis = _axis(ctx, ctx.p("softmax_param")["axis"], scores, "softmax_param.axis")
    _labels(ctx, axis, "softmax")
    return Shaped([(), scores][: ctx.tops])


def pairwise_loss(ctx: Ctx) -> Shaped:
    a, b = ctx.bottoms
    if not a or not b or a[0] != b[0] or count(a) != count(b):
        raise LayerError(
            f"the two inputs {dims(a)} and {dims(b)} must have the same batch size and the "
            "same number of values"
        )
    return Shaped([()])


def accuracy(ctx: Ctx) -> Shaped:
    p = ctx.p("accuracy_param")
    scores = ctx.bottoms[0]
    axis = _axis(ctx, p["axis"], scores, "accuracy_param.axis")
    _labels(ctx, axis, "accuracy")
    if not 1 <= p["top_k"] <= scores[axis]:
        raise LayerError(
            f"accuracy_param.top_k {p['top_k']} must lie in [1, {scores[axis]}] (the classes)"
        )
    return Shaped([(), (scores[axis],)][: ctx.tops])


def split(ctx: Ctx) -> Shaped:
    return Shaped([ctx.bottoms[0]] * ctx.tops)
