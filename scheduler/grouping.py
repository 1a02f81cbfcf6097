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

**Never fused** (a group of one): a user's training function (``trainable``); a Caffe net
(``caffe``: its layer graph has no stacked form yet; its seconds, which the makespan below
weighs, come from its graph, `core.caffe.cost`); ``fuse:
off`` or 1; ``training.epochs: 0`` (nothing to train, so nothing to gain: the trial is one
evaluation); ``execution.dtype: float16``
(its `GradScaler` skips a step for all parameters at once when any gradient overflows,
and a per-model scaler is not implemented); ``execution.parallel.world_size`` above 1 (a
data-parallel trial trains on several processes, a fused group in one); and a trial that
sets a field this module does not know (one added after it was written) to anything but
its default, since it cannot tell whether the fused trainer honours that field. The other
``execution.parallel`` fields do nothing on one process, so they neither keep a trial
apart nor make it a key.

**Group size.** K caps a group. An integer ``fuse`` is taken as it is. For ``auto``, K is
first capped from memory: the training state of one member, estimated from its bucketed
widths (weights, gradients and two optimiser buffers, plus a batch's activations),
divided into `DEFAULT_MEMORY_BUDGET`, capped at `AUTO_CAP`. On ``execution.device: cuda``
that is all (a GPU wants large work). On ``cpu`` and ``auto`` (which is a CPU wherever
no GPU is; set ``cuda`` to fuse for a GPU) a **cost model** then decides, so that
``auto`` never loses to ``off``:

- *One step* of L layers (hidden + output) of one model alone costs
  ``L * LAYER_STEP_SECONDS + flops / FLOPS_PER_SECOND``; of a fused group of K,
  ``L * (FUSED_LAYER_STEP_SECONDS + K * MEMBER_LAYER_STEP_SECONDS) + K * padded flops /
  FUSED_FLOPS_PER_SECOND`` (`step_seconds`; flops: `step_flops`, at the widest member's
  widths). Fusing pays the per-step overhead once instead of K times, but its batched
  kernels on small matrices run slower per flop, so a compute-bound model (3 x 256 and
  up on digits) gains nothing and stays
  alone, while 2 x 64 ones gain 4-6x at K = 16-32. A unit of work (a trial, or a group)
  costs its epochs x (training steps + the validation pass) plus `TRIAL_SECONDS` of
  platform cost per trial (`estimate_seconds`). The constants were measured on this
  project's 2-core machine with one torch thread per worker (``python -m
  bench.bench_fused --calibrate`` prints them again).
- *The size* of each class's groups is chosen, among a few candidates K <= the cap, to
  minimise the **estimated makespan** of the whole sweep on its workers: for a set of
  granularities (a cap on the seconds of the longest unit), each class takes its
  cheapest K whose units fit, a class fuses only when that is at least
  `MIN_GAIN` times cheaper than its members alone, and the units are laid out
  longest-first on the workers; the layout that ends first wins (fewer messages on a
  tie). So a sweep of a few large groups is cut finer when that keeps every worker busy
  to the end, and a group of one is always a candidate. The worker count comes from the
  caller (`sweepstack run --workers N`); without it `DEFAULT_WORKERS` is assumed.

The scheduler cannot see the worker's memory, so the worker checks again against what it
really has (RAM, or a GPU dry run) and trains a group in smaller chunks if it must. A
class of n compatible trials becomes ceil(n / K) groups of nearly equal size (so 70
trials with K = 64 make groups of 35 and 35, not 64 and 6), members sorted by widths so
that each group pads as little as it can.
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.config import SECTIONS
from core.fields import leaf_defaults

#: The largest group `auto` makes; past a few dozen models a group gains little on a CPU.
AUTO_CAP = 64
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
#: A class fuses only when its groups are estimated this many times cheaper than alone.
MIN_GAIN = 1.2
#: Workers assumed when the caller does not say (more is safer: finer units, less fusion).
DEFAULT_WORKERS = 4
#: Group sizes `auto` weighs (with the memory cap and the class's own size).
CANDIDATE_SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
#: How many granularities (caps on the longest unit) `auto` weighs at most.
GRANULARITIES = 48
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
#: Rows of the built-in sets, and what the estimate assumes for a file, for the step count.
_BUILTIN_ROWS = {"digits": 1797, "iris": 150, "wine": 178, "breast_cancer": 569}
_FILE_ROWS = 10_000

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
    if "trainable" in config or "caffe" in config:
        return 1  # a user's own function or a Caffe net (`core.caffe.spec`): nothing to stack
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
        return max(1, min(AUTO_CAP, DEFAULT_MEMORY_BUDGET // model_bytes(config)))
    return int(fuse)


def costed(config: Mapping[str, Any]) -> bool:
    """Whether `auto` sizes this trial's groups with the cost model (module docstring)."""
    return _get(config, "execution.fuse") == "auto" and _get(config, "execution.device") != "cuda"


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


def _parameters(
    config: Mapping[str, Any], layer_widths: Sequence[int] | None = None
) -> tuple[int, list[int], int]:
    """(parameters, widths, outputs) of one member at `layer_widths` (default: bucketed)."""
    features, outputs = _data_shape(config)
    padded = list(layer_widths) if layer_widths is not None else [bucket(w) for w in widths(config)]
    sizes = [features, *padded, outputs]
    params = sum((fan_in + 1) * fan_out for fan_in, fan_out in itertools.pairwise(sizes))
    if _get(config, "model.batch_norm"):
        params += 2 * sum(padded)
    return params, padded, outputs


def step_flops(config: Mapping[str, Any], layer_widths: Sequence[int] | None = None) -> int:
    """Multiply-adds of one training step of one member (forward and backward): 6 B P, at
    `layer_widths` (default: its bucketed widths)."""
    params, _, _ = _parameters(config, layer_widths)
    return max(1, 6 * int(_get(config, "training.batch_size")) * params)


def _rows(config: Mapping[str, Any]) -> tuple[int, int]:
    """(training rows, validation rows) the trial will see, as the estimate assumes them."""
    name = _get(config, "dataset.name")
    if name in _BUILTIN_ROWS:
        total = _BUILTIN_ROWS[name]
    elif name in ("synthetic_classification", "synthetic_regression"):
        total = int(_get(config, "dataset.samples"))
    else:
        total = _FILE_ROWS
    val = max(1, round(total * float(_get(config, "dataset.validation_fraction"))))
    return max(1, total - val), val


def step_seconds(hidden_layers: int, flops: float, count: int) -> float:
    """Estimated seconds of one training step of `count` models of `flops` multiply-adds
    each: alone (count 1) or fused (module docstring)."""
    layers = hidden_layers + 1
    if count == 1:
        return layers * LAYER_STEP_SECONDS + flops / FLOPS_PER_SECOND
    overhead = layers * (FUSED_LAYER_STEP_SECONDS + count * MEMBER_LAYER_STEP_SECONDS)
    return overhead + count * flops / FUSED_FLOPS_PER_SECOND


class _Work:
    """What the cost of a unit of work depends on besides its widths, read once per class."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.epochs = int(_get(config, "training.epochs"))
        n_train, n_val = _rows(config)
        self.batch = max(1, min(int(_get(config, "training.batch_size")), n_train))
        self.steps = math.ceil(n_train / self.batch)
        self.evaluation = n_val / (3 * self.batch)  # a forward pass: a third of a step's flops
        self.features, self.outputs = _data_shape(config)
        self.batch_norm = bool(_get(config, "model.batch_norm"))

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
    a Caffe trial (never fused) from its graph (`core.caffe.cost`), not an MLP's widths."""
    if "caffe" in config:
        from core.caffe.cost import config_work  # the layer graph loads only for Caffe sweeps

        work = config_work(config)
        arithmetic = 2 * work.macs / FLOPS_PER_SECOND  # two flops a multiply-accumulate
        return work.steps * work.layers * LAYER_STEP_SECONDS + arithmetic + TRIAL_SECONDS
    return _Work(config).seconds(members)


def estimate_seconds(configs: Sequence[Mapping[str, Any]]) -> float:
    """Estimated seconds to train these trials on a CPU as one unit (one trial, or a fused
    group of compatible ones): the cost model of the module docstring."""
    if not configs:
        return 0.0
    return _unit_seconds(configs[0], [widths(c) for c in configs])


def model_bytes(config: Mapping[str, Any]) -> int:
    """An estimate of one member's training memory at its bucketed widths (docstring)."""
    params, padded, outputs = _parameters(config)
    item = 8 if _get(config, "execution.dtype") == "float64" else 4
    batch = int(_get(config, "training.batch_size"))
    activations = batch * (sum(padded) + outputs) * ACTIVATION_COPIES
    return max(1, (params * TRAINING_COPIES + activations) * item)


def _balanced(members: list[Any], limit: int) -> list[list[Any]]:
    """`members` in ceil(n / limit) consecutive runs of nearly equal size."""
    count = math.ceil(len(members) / limit)
    size, extra = divmod(len(members), count)
    out, start = [], 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        out.append(members[start:end])
        start = end
    return out


@dataclass
class _Class:
    """The compatible trials of one fusion key and the group sizes it may take."""

    config: Mapping[str, Any]
    limit: int
    members: list[tuple[list[int], int, str]] = field(default_factory=list)
    #: K -> (groups of member positions, each group's estimated seconds)
    options: dict[int, tuple[list[list[int]], list[float]]] = field(default_factory=dict)

    def weigh(self, costed: bool) -> None:
        """Work out the groups and their costs for every size this class may take."""
        self.members.sort()
        count = len(self.members)
        sizes = {min(self.limit, count)}
        if costed:
            sizes |= {k for k in CANDIDATE_SIZES if k < min(self.limit, count)} | {1}
        work = _Work(self.config)
        for k in sorted(sizes):
            groups = _balanced(list(range(count)), k)
            costs = [work.seconds([self.members[i][0] for i in group]) for group in groups]
            self.options[k] = (groups, costs)

    def choose(self, longest: float) -> int:
        """The cheapest size whose units fit in `longest` seconds, if it gains `MIN_GAIN`."""
        if len(self.options) == 1:
            return next(iter(self.options))
        alone = sum(self.options[1][1])
        fitting = [
            (sum(costs), k) for k, (_, costs) in self.options.items() if max(costs) <= longest
        ]
        total, k = min(fitting, default=(alone, 1))
        return k if total * MIN_GAIN <= alone else 1


def _makespan(costs: list[float], workers: int) -> float:
    """When the last of `workers` ends, given these units longest first (LPT)."""
    loads = [0.0] * max(1, workers)
    for cost in sorted(costs, reverse=True):
        heapq.heapreplace(loads, loads[0] + cost)
    return max(loads)


def _sizes(classes: list[_Class], single_costs: list[float], workers: int) -> list[int]:
    """Each class's group size, for the shortest estimated makespan (module docstring)."""
    # Every distinct longest unit an option has is a granularity worth weighing (at most
    # `GRANULARITIES` of them, spread evenly), and no cap at all.
    caps = sorted({max(costs) for c in classes for _, costs in c.options.values()})
    if len(caps) > GRANULARITIES:
        caps = [
            caps[round(i * (len(caps) - 1) / (GRANULARITIES - 1))] for i in range(GRANULARITIES)
        ]
    best: tuple[float, int, list[int]] | None = None
    for longest in (*caps, math.inf):
        sizes = [c.choose(longest) for c in classes]
        costs = list(single_costs)
        for c, k in zip(classes, sizes, strict=True):
            costs += c.options[k][1]
        span = _makespan(costs, workers)
        # Within 2% the estimate cannot tell; then fewer units (more fusion) win, as long
        # as there are enough to give every worker one.
        enough = min(workers, len(costs))
        if (
            best is None
            or span < best[0] * 0.98
            or (best[1] < enough and len(costs) > best[1] and span <= best[0] * 1.02)
            or (enough <= len(costs) < best[1] and span <= best[0] * 1.02)
        ):
            best = (span, len(costs), sizes)
    assert best is not None
    return best[2]


def group_trials(
    trials: Iterable[tuple[str, Mapping[str, Any]]], workers: int | None = None
) -> list[list[str]]:
    """Split (trial id, resolved config) pairs into groups of ids; a lone trial is a group of one.

    `workers` is how many training processes will share the sweep (default
    `DEFAULT_WORKERS`): `auto` sizes groups so that they keep that many busy. Groups come
    in the order of their first trial, so a sweep still starts where its expansion does.
    """
    workers = max(1, workers or DEFAULT_WORKERS)
    classes: dict[str, _Class] = {}
    singles: list[tuple[int, list[str]]] = []
    single_costs: list[float] = []
    for position, (trial_id, config) in enumerate(trials):
        key, limit, layer_widths = _fusion(config)
        if key is None:
            singles.append((position, [trial_id]))
            single_costs.append(_unit_seconds(config, [widths(config)]))
            continue
        if key not in classes:
            classes[key] = _Class(config, limit)
        classes[key].members.append((layer_widths, position, trial_id))
    for one in classes.values():
        one.weigh(costed(one.config))
    ordered = list(classes.values())
    groups = list(singles)
    for one, k in zip(ordered, _sizes(ordered, single_costs, workers), strict=True):
        for group in one.options[k][0]:
            members = [one.members[i] for i in group]
            groups.append((min(p for _, p, _ in members), [t for _, _, t in members]))
    groups.sort(key=lambda item: item[0])
    return [group for _, group in groups]
