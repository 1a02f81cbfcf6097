"""The cost model: estimated seconds and memory of training a trial or a fused group.

`scheduler.grouping` sizes fused groups with it, `scheduler.chunks` finds the cheap trials
it packs, and `scheduler.order` ranks work by `step_flops`. Pure logic: no torch, no
broker, no store.

**Widths** are bucketed layer by layer: every width up to `MIN_BUCKET` shares one bucket
(such layers cost less than the per-step overhead that fusing removes), above it the
buckets end at 2^j and 1.5 * 2^j (96, 128, 192, 256, 384, 512, 768, 1024, ...), so a layer
is padded by at most half its width. The fused trainer pads each layer to the widest
member of its group and masks the padding out exactly, so a member costs what its padded
widths cost.

**Memory** (`model_bytes`): the training state of one member at its bucketed widths
(weights, gradients and two optimiser buffers, plus a batch's activations). `auto` fits
as many members as `DEFAULT_MEMORY_BUDGET` holds (`scheduler.grouping.group_limit`).

**Time**, on a CPU:

- *One step* of L layers (hidden + output) of one model alone costs
  ``L * LAYER_STEP_SECONDS + flops / FLOPS_PER_SECOND``; of a fused group of K,
  ``L * (FUSED_LAYER_STEP_SECONDS + K * MEMBER_LAYER_STEP_SECONDS) + K * padded flops /
  FUSED_FLOPS_PER_SECOND`` (`step_seconds`; flops: `step_flops`, at the widest member's
  widths). Fusing pays the per-step overhead once instead of K times, but its batched
  kernels on small matrices run slower per flop, so a compute-bound model (3 x 256 and
  up on digits) gains nothing and stays alone, while 2 x 64 ones gain 4-6x at K = 16-32.
- *A unit of work* (a trial, or a group) costs its epochs x (training steps + the
  validation pass) plus `TRIAL_SECONDS` of platform cost per trial (`estimate_seconds`);
  a trial whose kind counts its own work (`core.spec.kind.TrialKind.work`: a Caffe net,
  never fused) costs that work's steps and arithmetic (`core.spec.caffe.cost`).

The constants were measured on this project's 2-core machine with one torch thread per
worker (``python -m bench.bench_fused --calibrate`` prints them again).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

from core.spec.fields import config_value
from core.spec.kinds import kind_of

#: The memory one group's training state may take, as `auto` estimates it.
DEFAULT_MEMORY_BUDGET = 2 * 1024**3
#: Cost model (module docstring), measured on a CPU with one torch thread: a training
#: step of one model alone, apart from its arithmetic (Python, dispatch, loss, optimiser),
#: per layer (hidden layers + the output layer).
LAYER_STEP_SECONDS = 0.4e-3
#: One model's multiply-adds per second alone (`step_flops` counts them).
FLOPS_PER_SECOND = 16e9
#: A fused group's step apart from its arithmetic, per layer, whatever its size ...
FUSED_LAYER_STEP_SECONDS = 0.5e-3
#: ... and per layer and member (batched kernels loop over their small matrices).
MEMBER_LAYER_STEP_SECONDS = 0.03e-3
#: A fused group's multiply-adds per second (per member: K x flops).
FUSED_FLOPS_PER_SECOND = 14e9
#: The platform's own cost per trial (claim, epoch rows, finish), fused or not.
TRIAL_SECONDS = 0.1
#: Widths up to this share one bucket.
MIN_BUCKET = 64
#: Weights, gradients and an optimiser's two buffers (as `workers.training.models`).
TRAINING_COPIES = 4
#: Pre-activation, activation, mask product and gradient of each hidden unit of a batch.
ACTIVATION_COPIES = 4

#: Features and outputs of the built-in sets, for the memory estimate.
_BUILTIN_SHAPES = {"digits": (64, 10), "iris": (4, 3), "wine": (13, 3), "breast_cancer": (30, 2)}
#: What the estimate assumes for a user's file, which the scheduler does not read.
_FILE_SHAPE = (1000, 100)
#: Rows of the built-in sets, and what the estimate assumes for a file, for the step count.
_BUILTIN_ROWS = {"digits": 1797, "iris": 150, "wine": 178, "breast_cancer": 569}
_FILE_ROWS = 10_000


def bucket(width: int) -> int:
    """The padded width of `width`'s bucket: `MIN_BUCKET`, else the next 2^j or 1.5 * 2^j."""
    if width <= MIN_BUCKET:
        return MIN_BUCKET
    power = 1 << (width - 1).bit_length()  # the next power of two >= width
    half_step = power // 4 * 3
    return half_step if width <= half_step else power


def widths(config: Mapping[str, Any]) -> list[int]:
    """One width per hidden layer, from a resolved config (defaults filled in)."""
    units = config_value(config, "model.hidden_units")
    if isinstance(units, list):
        return [int(u) for u in units]
    return [int(units)] * int(config_value(config, "model.hidden_layers"))


def _data_shape(config: Mapping[str, Any]) -> tuple[int, int]:
    name = config_value(config, "dataset.name")
    if name in _BUILTIN_SHAPES:
        return _BUILTIN_SHAPES[name]
    if name == "synthetic_classification":
        return int(config_value(config, "dataset.features")), int(
            config_value(config, "dataset.classes")
        )
    if name == "synthetic_regression":
        return int(config_value(config, "dataset.features")), 1
    return _FILE_SHAPE


def _parameters(
    config: Mapping[str, Any], layer_widths: Sequence[int] | None = None
) -> tuple[int, list[int], int]:
    """(parameters, widths, outputs) of one member at `layer_widths` (default: bucketed)."""
    features, outputs = _data_shape(config)
    padded = list(layer_widths) if layer_widths is not None else [bucket(w) for w in widths(config)]
    sizes = [features, *padded, outputs]
    params = sum((fan_in + 1) * fan_out for fan_in, fan_out in itertools.pairwise(sizes))
    if config_value(config, "model.batch_norm"):
        params += 2 * sum(padded)
    return params, padded, outputs


def step_flops(config: Mapping[str, Any], layer_widths: Sequence[int] | None = None) -> int:
    """Multiply-adds of one training step of one member (forward and backward): 6 B P, at
    `layer_widths` (default: its bucketed widths)."""
    params, _, _ = _parameters(config, layer_widths)
    return max(1, 6 * int(config_value(config, "training.batch_size")) * params)


def _rows(config: Mapping[str, Any]) -> tuple[int, int]:
    """(training rows, validation rows) the trial will see, as the estimate assumes them."""
    name = config_value(config, "dataset.name")
    if name in _BUILTIN_ROWS:
        total = _BUILTIN_ROWS[name]
    elif name in ("synthetic_classification", "synthetic_regression"):
        total = int(config_value(config, "dataset.samples"))
    else:
        total = _FILE_ROWS
    val = max(1, round(total * float(config_value(config, "dataset.validation_fraction"))))
    return max(1, total - val), val


def step_seconds(hidden_layers: int, flops: float, count: int) -> float:
    """Estimated seconds of one training step of `count` models of `flops` multiply-adds
    each: alone (count 1) or fused (module docstring)."""
    layers = hidden_layers + 1
    if count == 1:
        return layers * LAYER_STEP_SECONDS + flops / FLOPS_PER_SECOND
    overhead = layers * (FUSED_LAYER_STEP_SECONDS + count * MEMBER_LAYER_STEP_SECONDS)
    return overhead + count * flops / FUSED_FLOPS_PER_SECOND


class UnitCost:
    """What the cost of a unit of work depends on besides its widths, read once per class
    of compatible trials (`scheduler.grouping` prices many groups of one class with it)."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.epochs = int(config_value(config, "training.epochs"))
        n_train, n_val = _rows(config)
        self.batch = max(1, min(int(config_value(config, "training.batch_size")), n_train))
        self.steps = math.ceil(n_train / self.batch)
        self.evaluation = n_val / (3 * self.batch)  # a forward pass: a third of a step's flops
        self.features, self.outputs = _data_shape(config)
        self.batch_norm = bool(config_value(config, "model.batch_norm"))

    def seconds(self, members: Sequence[Sequence[int]]) -> float:
        """Estimated seconds of the trials of these widths, fused if several."""
        count = len(members)
        padded = [max(column) for column in zip(*members, strict=True)] if count > 1 else members[0]
        sizes = [self.features, *padded, self.outputs]
        params = sum((fan_in + 1) * fan_out for fan_in, fan_out in itertools.pairwise(sizes))
        if self.batch_norm:
            params += 2 * sum(padded)
        flops = 6 * self.batch * params
        overhead = step_seconds(len(padded), 0, count)
        compute = step_seconds(len(padded), flops, count) - overhead
        per_epoch = (self.steps + 1) * overhead + (self.steps + self.evaluation) * compute
        return self.epochs * per_epoch + count * TRIAL_SECONDS


def _unit_seconds(config: Mapping[str, Any], members: Sequence[Sequence[int]]) -> float:
    """Estimated seconds of one unit of work: the trials of these widths, fused if several;
    a trial whose kind counts its own work (a Caffe net, never fused: its graph's,
    `core.spec.kind.TrialKind.work`) from that work, not from an MLP's widths."""
    work = kind_of(config).work(config)
    if work is not None:
        arithmetic = 2 * work.macs / FLOPS_PER_SECOND  # two flops a multiply-accumulate
        return work.steps * work.layers * LAYER_STEP_SECONDS + arithmetic + TRIAL_SECONDS
    return UnitCost(config).seconds(members)


def estimate_seconds(configs: Sequence[Mapping[str, Any]]) -> float:
    """Estimated seconds to train these trials on a CPU as one unit (one trial, or a fused
    group of compatible ones): the cost model of the module docstring."""
    if not configs:
        return 0.0
    return _unit_seconds(configs[0], [widths(c) for c in configs])


def model_bytes(config: Mapping[str, Any]) -> int:
    """An estimate of one member's training memory at its bucketed widths (docstring)."""
    params, padded, outputs = _parameters(config)
    item = 8 if config_value(config, "execution.dtype") == "float64" else 4
    batch = int(config_value(config, "training.batch_size"))
    activations = batch * (sum(padded) + outputs) * ACTIVATION_COPIES
    return max(1, (params * TRAINING_COPIES + activations) * item)
