"""Group compatible trials for fused training: which trials may train as one model.

`execution.fuse` says how: ``off`` (each trial alone, one `workers.run_trial` message),
``auto`` (the default: groups as large as the memory estimate below allows, at most
`AUTO_CAP`), or an integer K (groups of at most K; 1 is the same as ``off``). At submit,
`group_trials` splits a sweep's trials into groups; each group of two or more becomes one
`workers.run_group` message carrying its trial ids (`scheduler.submit`), and the worker
trains the group as one stacked model (`workers.training.fused`). Pure logic: no torch,
no broker, no store.

**Compatible** trials share every field that changes the computation graph, the data or
the order rules: the whole ``dataset`` section; ``model.hidden_layers``, ``activation``,
``batch_norm`` and ``kind``; ``training.optimizer``, ``batch_size`` and ``epochs``;
``execution.device``, ``dtype`` and ``fuse``. Each member keeps its own value of the
fields in `MAY_DIFFER`: learning rate, its schedule, weight decay, momentum and betas (the
fused optimisers take them per model), the seed (each model's own initial weights,
dropout stream and data order), the dropout rate, the init scheme (each model is
initialised by the unfused builder and copied in), the time limit, and the widths within
one padding bucket.

**Widths** are bucketed layer by layer: every width up to `MIN_BUCKET` shares one bucket
(such layers cost less than the per-step overhead that fusing removes), above it the
buckets end at 2^j and 1.5 * 2^j (96, 128, 192, 256, 384, 512, 768, 1024, ...), so a layer
is padded by at most half its width. The fused trainer pads each layer to the widest
member of its group and masks the padding out exactly.

**Never fused** (a group of one): ``fuse: off`` or 1; ``training.epochs: 0`` (nothing to
train, so nothing to gain: the trial is one evaluation); ``execution.dtype: float16``
(its `GradScaler` skips a step for all parameters at once when any gradient overflows,
and a per-model scaler is not implemented); ``execution.parallel.world_size`` above 1 (a
data-parallel trial trains on several processes, a fused group in one); and a trial that
sets a field this module does not know (one added after it was written) to anything but
its default, since it cannot tell whether the fused trainer honours that field. The other
``execution.parallel`` fields do nothing on one process, so they neither keep a trial
apart nor make it a key.

**Group size.** K caps a group. For ``auto``, K is sized from memory: the training state
of one member, estimated from its bucketed widths (weights, gradients and two optimiser
buffers, plus a batch's activations), divided into `DEFAULT_MEMORY_BUDGET`, capped at
`AUTO_CAP`. On ``execution.device: cpu`` it is also sized from compute: fusing pays off
while a step is mostly per-step overhead (~1 ms of Python and dispatch on a CPU), so a
group's multiply-adds per step (about 6 x batch x parameters per member) stay under
`CPU_STEP_FLOPS`. Past that a model is compute-bound: fusing it gains nothing (measured:
three 5 x 1024 models fused train in the time of three alone), and a big group only
makes the work units coarser, so that the last of them can leave workers idle. So on a
CPU a 5 x 1024 member trains alone, a 5 x 256 one in pairs and a 2 x 64 one with up to
63 others. On ``auto`` and ``cuda`` devices, where a GPU wants large work, memory alone
decides. The scheduler cannot see the worker's memory, so the worker checks again
against what it really has (RAM, or a GPU dry run) and trains a group in smaller chunks
if it must. A class of n compatible trials becomes ceil(n / K) groups of nearly equal
size (so 70 trials with K = 64 make groups of 35 and 35, not 64 and 6), members sorted by
widths so that each group pads as little as it can.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from core.config import SECTIONS
from core.fields import leaf_defaults

#: The largest group `auto` makes; past a few dozen models a group gains little on a CPU.
AUTO_CAP = 64
#: The memory one group's training state may take, as `auto` estimates it.
DEFAULT_MEMORY_BUDGET = 2 * 1024**3
#: A fused step's multiply-adds on a CPU beyond which fusing gains nothing (module docstring).
CPU_STEP_FLOPS = 300_000_000
#: Widths up to this share one bucket.
MIN_BUCKET = 64
#: Weights, gradients and an optimiser's two buffers (as `workers.training.models`).
TRAINING_COPIES = 4
#: Pre-activation, activation, mask product and gradient of each hidden unit of a batch.
ACTIVATION_COPIES = 4

#: Fields whose value each member of a group keeps for itself.
MAY_DIFFER = frozenset(
    {
        "model.hidden_units",
        "model.dropout",
        "model.init",
        "training.lr",
        "training.weight_decay",
        "training.momentum",
        "training.beta1",
        "training.beta2",
        "training.seed",
        "training.lr_schedule",
        "training.lr_step_size",
        "training.lr_gamma",
        "execution.time_limit",
    }
)
#: Fields every member of a group shares (with `dataset.*`, all of that section).
KEY_FIELDS = (
    "model.kind",
    "model.hidden_layers",
    "model.activation",
    "model.batch_norm",
    "training.optimizer",
    "training.batch_size",
    "training.epochs",
    "execution.device",
    "execution.dtype",
    "execution.fuse",
)
#: Features and outputs of the built-in sets, for the memory estimate.
_BUILTIN_SHAPES = {"digits": (64, 10), "iris": (4, 3), "wine": (13, 3), "breast_cancer": (30, 2)}
#: What the estimate assumes for a user's file, which the scheduler does not read.
_FILE_SHAPE = (1000, 100)

#: Data-parallel settings: above one process never fused, on one process inert (docstring).
_PARALLEL = "execution.parallel."

_DEFAULTS: dict[str, Any] = leaf_defaults()
_KNOWN = frozenset(MAY_DIFFER | set(KEY_FIELDS)) | {
    path for path in _DEFAULTS if path.startswith(("dataset.", _PARALLEL))
}
_UNKNOWN = tuple(sorted(set(_DEFAULTS) - _KNOWN))


def bucket(width: int) -> int:
    """The padded width of `width`'s bucket: `MIN_BUCKET`, else the next 2^j or 1.5 * 2^j."""
    if width <= MIN_BUCKET:
        return MIN_BUCKET
    power = 1 << (width - 1).bit_length()  # the next power of two >= width
    half_step = power // 4 * 3
    return half_step if width <= half_step else power


def _get(config: Mapping[str, Any], path: str) -> Any:
    values: Any = config
    *parents, key = path.split(".")
    for part in parents:
        values = values.get(part) or {}
    return values[key] if key in values else _DEFAULTS.get(path)


def widths(config: Mapping[str, Any]) -> list[int]:
    """One width per hidden layer, from a resolved config (defaults filled in)."""
    units = _get(config, "model.hidden_units")
    if isinstance(units, list):
        return [int(u) for u in units]
    return [int(units)] * int(_get(config, "model.hidden_layers"))


def group_limit(config: Mapping[str, Any]) -> int:
    """The most trials this one may train with: 1 when it is never fused (module docstring)."""
    fuse = _get(config, "execution.fuse")
    if fuse is False or fuse == "off" or fuse == 1:
        return 1
    if _get(config, "training.epochs") == 0 or _get(config, "execution.dtype") == "float16":
        return 1
    if _get(config, "model.kind") != "mlp":
        return 1
    if _get(config, f"{_PARALLEL}world_size") > 1:
        return 1
    if any(_get(config, path) != _DEFAULTS[path] for path in _UNKNOWN):
        return 1
    if fuse == "auto":
        limit = min(AUTO_CAP, DEFAULT_MEMORY_BUDGET // model_bytes(config))
        if _get(config, "execution.device") == "cpu":
            limit = min(limit, CPU_STEP_FLOPS // step_flops(config))
        return max(1, limit)
    return int(fuse)


def _fusion(config: Mapping[str, Any]) -> tuple[str | None, int, list[int]]:
    """(fusion key or None, group limit, widths) of one trial, each worked out once."""
    limit = group_limit(config)
    if limit == 1:
        return None, 1, []
    layer_widths = widths(config)
    dataset = {k: _get(config, f"dataset.{k}") for k in SECTIONS["dataset"].model_fields}
    shared = {path: _get(config, path) for path in KEY_FIELDS}
    key = {"dataset": dataset, **shared, "buckets": [bucket(w) for w in layer_widths]}
    return json.dumps(key, sort_keys=True, default=str), limit, layer_widths


def _data_shape(config: Mapping[str, Any]) -> tuple[int, int]:
    name = _get(config, "dataset.name")
    if name in _BUILTIN_SHAPES:
        return _BUILTIN_SHAPES[name]
    if name == "synthetic_classification":
        return int(_get(config, "dataset.features")), int(_get(config, "dataset.classes"))
    if name == "synthetic_regression":
        return int(_get(config, "dataset.features")), 1
    return _FILE_SHAPE


def _parameters(config: Mapping[str, Any]) -> tuple[int, list[int], int]:
    """(parameters, bucketed widths, outputs) of one member at its bucketed widths."""
    features, outputs = _data_shape(config)
    padded = [bucket(w) for w in widths(config)]
    sizes = [features, *padded, outputs]
    params = sum((fan_in + 1) * fan_out for fan_in, fan_out in itertools.pairwise(sizes))
    if _get(config, "model.batch_norm"):
        params += 2 * sum(padded)
    return params, padded, outputs


def step_flops(config: Mapping[str, Any]) -> int:
    """Multiply-adds of one training step of one member (forward and backward): 6 B P."""
    params, _, _ = _parameters(config)
    return max(1, 6 * int(_get(config, "training.batch_size")) * params)


def model_bytes(config: Mapping[str, Any]) -> int:
    """An estimate of one member's training memory at its bucketed widths (docstring)."""
    params, padded, outputs = _parameters(config)
    item = 8 if _get(config, "execution.dtype") == "float64" else 4
    batch = int(_get(config, "training.batch_size"))
    activations = batch * (sum(padded) + outputs) * ACTIVATION_COPIES
    return max(1, (params * TRAINING_COPIES + activations) * item)


def _balanced(members: list[str], limit: int) -> list[list[str]]:
    count = math.ceil(len(members) / limit)
    size, extra = divmod(len(members), count)
    out, start = [], 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        out.append(members[start:end])
        start = end
    return out


def group_trials(trials: Iterable[tuple[str, Mapping[str, Any]]]) -> list[list[str]]:
    """Split (trial id, resolved config) pairs into groups of ids; a lone trial is a group of one.

    Groups come in the order of their first trial, so a sweep still starts where its
    expansion does.
    """
    classes: dict[str, list[tuple[list[int], int, str]]] = {}
    limits: dict[str, int] = {}
    singles: list[tuple[int, list[str]]] = []
    for position, (trial_id, config) in enumerate(trials):
        key, limit, layer_widths = _fusion(config)
        if key is None:
            singles.append((position, [trial_id]))
            continue
        classes.setdefault(key, []).append((layer_widths, position, trial_id))
        limits[key] = limit
    groups = list(singles)
    for key, members in classes.items():
        members.sort()
        by_position = {trial_id: position for _, position, trial_id in members}
        for group in _balanced([trial_id for _, _, trial_id in members], limits[key]):
            groups.append((min(by_position[t] for t in group), group))
    groups.sort(key=lambda item: item[0])
    return [group for _, group in groups]
