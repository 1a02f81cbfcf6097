"""Window geometry of Caffe's Convolution and Pooling, and its axis rule, shared by the graph
(`core.spec.caffe.layers`, for shapes and refusals) and the PyTorch module (`workers`), so that
both read ``kernel_size`` / ``kernel_h`` / ``pad`` ... the one way Caffe does.

Caffe's rules, kept here: a convolution's output is ``(in + 2·pad - (dilation·(k-1)+1)) //
stride + 1`` (rounded down); a pooling's is ``ceil((in + 2·pad - k) / stride) + 1`` (rounded
up; ``round_mode: FLOOR`` rounds down), less one when padding makes the last window start at
or past ``in + pad``. Geometry errors raise `GeometryError` with the field and what to change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


class GeometryError(ValueError):
    """A window that cannot be laid out: the message names the field and what to change."""


@dataclass(frozen=True)
class Window:
    """Per spatial axis: kernel, stride, pad, dilation, and the output size Caffe gives."""

    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    pad: tuple[int, ...]
    dilation: tuple[int, ...]
    out: tuple[int, ...]


def canonical_axis(axis: int, num_axes: int, field: str = "axis") -> int:
    """Caffe's CanonicalAxisIndex: -1 is the last axis; out of range is an error."""
    if not -num_axes <= axis < num_axes:
        raise GeometryError(
            f"{field} {axis} is out of range for an input of {num_axes} axes "
            f"(it must lie in [{-num_axes}, {num_axes - 1}])"
        )
    return axis + num_axes if axis < 0 else axis


def _per_axis(
    p: dict[str, Any],
    name: str,
    n: int,
    default: int,
    h: str,
    w: str,
    both: bool,
    exclusive: bool = True,
) -> tuple[int, ...]:
    """One value per spatial axis from ``name`` (one value, or one per axis) or ``h``/``w``.

    ``both``: whether ``h`` and ``w`` must come together (kernel, stride); a lone ``pad_h``
    leaves ``pad_w`` at 0, as Caffe does. ``exclusive``: whether giving ``name`` too is an
    error (Convolution's fields, Pooling's kernel) or ``h``/``w`` simply win (Pooling's
    pad and stride).
    """
    values = p.get(name)
    repeated = isinstance(values, list)
    if p.get(h) is not None or p.get(w) is not None:
        if n != 2:
            raise GeometryError(f"{h}/{w} apply to 2-D inputs only; give {name} instead")
        if both and (p.get(h) is None or p.get(w) is None):
            raise GeometryError(f"give both {h} and {w}, or {name}")
        if exclusive and ((repeated and values) or (not repeated and values is not None)):
            raise GeometryError(f"give either {name} or {h}/{w}, not both")
        return (int(p.get(h) or 0), int(p.get(w) or 0))
    if not repeated:
        return (default if values is None else int(values),) * n
    if not values:
        return (default,) * n
    if len(values) not in (1, n):
        raise GeometryError(
            f"{name} has {len(values)} values; give one, or one per spatial axis ({n})"
        )
    return tuple(int(v) for v in values) * (n if len(values) == 1 else 1)


def _too_large(k: int, extent: int, size: int, q: int) -> GeometryError:
    dilated = f" (dilated to {extent})" if extent != k else ""
    return GeometryError(
        f"the kernel {k}{dilated} is larger than its padded input {size + 2 * q} "
        f"({size} + 2*pad {q}); lower kernel_size, raise pad, or feed a larger input "
        "(caffe.resize)"
    )


def conv_window(p: dict[str, Any], spatial: tuple[int, ...]) -> Window:
    """The geometry of a Convolution (resolved `convolution_param`) over inputs `spatial`."""
    n = len(spatial)
    if not p.get("kernel_size") and p.get("kernel_h") is None and p.get("kernel_w") is None:
        raise GeometryError("kernel_size is required (or kernel_h and kernel_w)")
    kernel = _per_axis(p, "kernel_size", n, 0, "kernel_h", "kernel_w", True)
    stride = _per_axis(p, "stride", n, 1, "stride_h", "stride_w", True)
    pad = _per_axis(p, "pad", n, 0, "pad_h", "pad_w", False)
    dilation = _per_axis(p, "dilation", n, 1, "", "", True)
    _at_least_one(kernel, stride, dilation)
    out = []
    for size, k, s, q, d in zip(spatial, kernel, stride, pad, dilation, strict=True):
        extent = d * (k - 1) + 1
        if extent > size + 2 * q:
            raise _too_large(k, extent, size, q)
        out.append((size + 2 * q - extent) // s + 1)
    return Window(kernel, stride, pad, dilation, tuple(out))


def _at_least_one(
    kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...]
) -> None:
    for name, values in (("kernel_size", kernel), ("stride", stride), ("dilation", dilation)):
        if min(values) < 1:
            raise GeometryError(f"{name} must be at least 1, not {min(values)}")


def pool_window(p: dict[str, Any], spatial: tuple[int, ...]) -> Window:
    """The geometry of a Pooling (resolved `pooling_param`) over a 2-D input `spatial`."""
    pad = _per_axis(p, "pad", 2, 0, "pad_h", "pad_w", False, exclusive=False)
    stride = _per_axis(p, "stride", 2, 1, "stride_h", "stride_w", True, exclusive=False)
    if p.get("global_pooling"):
        if p.get("kernel_size") is not None or p.get("kernel_h") is not None:
            raise GeometryError(
                "global_pooling takes its kernel from the input; remove kernel_size"
            )
        if max(pad) != 0 or max(stride) != 1:
            raise GeometryError("global_pooling needs pad 0 and stride 1; remove pad and stride")
        return Window(tuple(spatial), (1, 1), (0, 0), (1, 1), (1, 1))
    if p.get("kernel_size") is None and p.get("kernel_h") is None and p.get("kernel_w") is None:
        raise GeometryError("kernel_size is required (or kernel_h and kernel_w, or global_pooling)")
    kernel = _per_axis(p, "kernel_size", 2, 0, "kernel_h", "kernel_w", True)
    _at_least_one(kernel, stride, (1,))
    out = []
    for size, k, s, q in zip(spatial, kernel, stride, pad, strict=True):
        if q >= k:
            raise GeometryError(f"pad {q} must be smaller than the kernel {k}")
        if k > size + 2 * q:
            raise _too_large(k, k, size, q)
        span = (size + 2 * q - k) / s
        count = (math.floor(span) if p.get("round_mode") == "FLOOR" else math.ceil(span)) + 1
        if q and (count - 1) * s >= size + q:
            count -= 1
        if (count - 1) * s - q >= size:
            raise GeometryError(
                f"the last window (stride {s}) would start past the input of size {size}; "
                f"lower stride to at most the kernel {k}, or set round_mode: FLOOR"
            )
        out.append(count)
    return Window(kernel, stride, pad, (1, 1), tuple(out))
