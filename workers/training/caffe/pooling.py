"""Caffe's pooling and local response normalisation, which PyTorch's own do not match.

Caffe's pooling (pooling_layer.cpp) lays its windows out with `core.spec.caffe.geometry.
pool_window` (output size rounded up, the last window clipped), which PyTorch's
``ceil_mode`` matches only while ``pad <= kernel / 2``. Here the input is padded explicitly
up to the last window's end and pooled without padding: MAX pads with -inf, so a window
sees only real values; AVE sums zeros but divides each window by its size clipped to the
padded input ``[-pad, in + pad)``, not to the real input and not by the full kernel. LRN
follows lrn_layer.cpp: ACROSS_CHANNELS divides by ``(k + alpha/n · Σ x²)^beta`` over ``n``
neighbouring channels; WITHIN_CHANNEL by ``(1 + alpha · avg x²)^beta`` over an ``n x n``
window (Caffe's AVE pooling with pad ``(n-1)/2``; ``k`` is not used there, as in Caffe).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from core.spec.caffe.geometry import Window, pool_window


def _right_pads(x: torch.Tensor, window: Window) -> tuple[int, int]:
    """How far past the input (and its left pad) the last window reaches, per axis."""
    out = []
    for size, k, s, q, n in zip(
        x.shape[2:], window.kernel, window.stride, window.pad, window.out, strict=True
    ):
        out.append((n - 1) * s + k - size - q)
    return out[0], out[1]


def pool(x: torch.Tensor, window: Window, method: str) -> torch.Tensor:
    """Caffe's MAX or AVE pooling of an (N, C, H, W) tensor with a laid-out `window`."""
    (ph, pw), (kh, kw), stride = window.pad, window.kernel, window.stride
    rh, rw = _right_pads(x, window)
    if method == "MAX":
        padded = F.pad(x, (pw, rw, ph, rh), value=float("-inf"))
        return F.max_pool2d(padded, (kh, kw), stride)
    padded = F.pad(x, (pw, rw, ph, rh))
    # 1 over [-pad, in + pad) (Caffe's divisor counts the pad, not what lies past it), 0 beyond.
    ones = torch.ones((1, 1, *x.shape[2:]), dtype=x.dtype, device=x.device)
    mask = F.pad(ones, (pw, pw, ph, ph), value=1.0)
    mask = F.pad(mask, (0, rw - pw, 0, rh - ph))
    return F.avg_pool2d(padded, (kh, kw), stride) / F.avg_pool2d(mask, (kh, kw), stride)


def lrn(
    x: torch.Tensor, size: int, alpha: float, beta: float, k: float, region: str
) -> torch.Tensor:
    """Caffe's LRN of an (N, C, H, W) tensor (`size` odd)."""
    pre = (size - 1) // 2
    squares = x * x
    if region == "WITHIN_CHANNEL":
        window = pool_window({"kernel_size": size, "pad": pre, "stride": 1}, x.shape[2:])
        scale = 1.0 + alpha * pool(squares, window, "AVE")
    else:
        padded = F.pad(squares.unsqueeze(1), (0, 0, 0, 0, pre, size - 1 - pre))
        summed = F.avg_pool3d(padded, (size, 1, 1), stride=1).squeeze(1) * size
        scale = k + (alpha / size) * summed
    return x * scale.pow(-beta)
