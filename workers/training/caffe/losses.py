"""Caffe's loss and accuracy layers, with Caffe's normalisation rather than PyTorch's means.

- SoftmaxWithLoss: ``-Σ log max(p[label], FLT_MIN) / normalizer``, labels equal to
  ``ignore_label`` left out; the normalizer is ``loss_param.normalization`` (VALID by default:
  the labels not ignored; FULL: every label; BATCH_SIZE: the outer count; NONE: 1; at least
  1); ``normalize: false`` means BATCH_SIZE when no ``normalization`` is given, as Caffe
  reads it. The FLT_MIN clamp acts on the value only: the gradient stays ``p - 1[label]``.
- SigmoidCrossEntropyLoss: the stable ``max(x, 0) - x·t + log(1 + e^-|x|)`` summed, divided
  by BATCH_SIZE by default (Caffe's own default for this layer), ignore_label honoured.
- EuclideanLoss: ``Σ (a - b)² / (2·N)``, N the batch size.
- Accuracy: a prediction counts when fewer than ``top_k`` classes score at least as high as
  the label's (ties count against it, as in Caffe); ignored labels count for nothing; the
  optional second top holds each class's accuracy.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from core.errors import TrainingError
from core.spec.caffe.fields import given, resolve
from core.spec.caffe.prototxt import Message

FLT_MIN = 1.17549435e-38
_LOG_FLT_MIN = math.log(FLT_MIN)


def normalization(loss_param: Message | None, default: str) -> str:
    """The normalisation mode Caffe uses for a loss layer's loss_param (None: absent):
    ``normalization`` if given, else ``normalize`` (VALID / BATCH_SIZE), else `default`."""
    p = resolve(loss_param, "LossParameter")
    if given(loss_param, "normalization"):
        return str(p["normalization"])
    if p["normalize"] is not None:
        return "VALID" if p["normalize"] else "BATCH_SIZE"
    return default


def _normalizer(
    mode: str, outer: int, inner: int, valid: torch.Tensor | int
) -> torch.Tensor | float:
    if mode == "FULL":
        return float(max(outer * inner, 1))
    if mode == "BATCH_SIZE":
        return float(max(outer, 1))
    if mode == "NONE":
        return 1.0
    if isinstance(valid, torch.Tensor):
        return valid.clamp_min(1)
    return float(max(valid, 1))


def _flat_labels(
    scores: torch.Tensor, labels: torch.Tensor, axis: int
) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    classes = scores.shape[axis]
    outer = math.prod(scores.shape[:axis])
    inner = math.prod(scores.shape[axis + 1 :])
    flat = scores.movedim(axis, -1).reshape(-1, classes)
    flat_labels = labels.reshape(-1).to(torch.long)
    if flat_labels.numel() != flat.shape[0]:
        raise TrainingError(
            f"{flat_labels.numel()} labels for {flat.shape[0]} predictions of shape "
            f"{list(scores.shape)}"
        )
    return flat, flat_labels, outer, inner


def _valid(labels: torch.Tensor, ignore: int | None, classes: int) -> torch.Tensor:
    valid = torch.ones_like(labels, dtype=torch.bool) if ignore is None else labels != ignore
    kept = labels[valid]
    if kept.numel() and (int(kept.min()) < 0 or int(kept.max()) >= classes):
        raise TrainingError(
            f"a label lies outside [0, {classes}) (found {int(kept.min())}..{int(kept.max())}); "
            "give the classifier num_output equal to the number of classes"
        )
    return valid


def softmax_loss(
    scores: torch.Tensor, labels: torch.Tensor, axis: int, ignore: int | None, mode: str
) -> torch.Tensor:
    flat, flat_labels, outer, inner = _flat_labels(scores, labels, axis)
    valid = _valid(flat_labels, ignore, flat.shape[1])
    logp = F.log_softmax(flat, dim=1)
    picked = logp.gather(1, torch.where(valid, flat_labels, 0).unsqueeze(1)).squeeze(1)
    picked = picked + (picked.clamp_min(_LOG_FLT_MIN) - picked).detach()
    total = -(picked * valid.to(picked.dtype)).sum()
    count = valid.sum() if ignore is not None else outer * inner
    return total / _normalizer(mode, outer, inner, count)


def sigmoid_cross_entropy(
    x: torch.Tensor, target: torch.Tensor, ignore: int | None, mode: str
) -> torch.Tensor:
    target = target.reshape(x.shape).to(x.dtype)
    per = x.clamp_min(0) - x * target + torch.log1p(torch.exp(-x.abs()))
    outer = x.shape[0]
    inner = x.numel() // max(outer, 1)
    if ignore is not None:
        valid = target != ignore
        per = per * valid.to(per.dtype)
        count: torch.Tensor | int = valid.sum()
    else:
        count = x.numel()
    return per.sum() / _normalizer(mode, outer, inner, count)


def euclidean(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    diff = a - b.reshape(a.shape).to(a.dtype)
    return (diff * diff).sum() / (2.0 * a.shape[0])


def accuracy(
    scores: torch.Tensor, labels: torch.Tensor, axis: int, top_k: int, ignore: int | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The accuracy and each class's accuracy (0 for a class without labels)."""
    with torch.no_grad():
        flat, flat_labels, _, _ = _flat_labels(scores, labels, axis)
        classes = flat.shape[1]
        valid = _valid(flat_labels, ignore, classes)
        safe = torch.where(valid, flat_labels, 0)
        truth = flat.gather(1, safe.unsqueeze(1))
        correct = ((flat >= truth).sum(dim=1) <= top_k) & valid
        count = valid.sum()
        overall = correct.sum().to(scores.dtype) / count.clamp_min(1).to(scores.dtype)
        per_class_n = torch.zeros(classes, dtype=scores.dtype, device=scores.device)
        per_class_ok = torch.zeros_like(per_class_n)
        per_class_n.index_add_(0, safe[valid], torch.ones_like(safe[valid], dtype=scores.dtype))
        per_class_ok.index_add_(
            0, safe[correct], torch.ones_like(safe[correct], dtype=scores.dtype)
        )
        per_class = torch.where(per_class_n > 0, per_class_ok / per_class_n.clamp_min(1), 0.0)
        return overall, per_class
