"""Group compatible trials for fused training: which trials may train as one model.

`execution.fuse` says how: ``off`` (each trial alone, one `workers.run_trial` message),
``auto`` (the default: groups as large as the memory estimate allows, at most
`AUTO_CAP`), or an integer K (groups of at most K; 1 is the same as ``off``). At submit,
`group_trials` splits a sweep's trials into groups; each group of two or more becomes one
`workers.run_group` message carrying its trial ids (`scheduler.messages`), and the worker
trains the group as one stacked model (`workers.training.fused`). What a trial or a group
costs, in seconds and memory, is `scheduler.cost`'s to say. Pure logic: no torch, no
broker, no store.

**Compatible** trials share every field that changes the computation graph, the data or
the order rules: the whole ``dataset`` section; ``model.hidden_layers``, ``activation``,
``batch_norm`` and ``kind``; ``training.optimizer``, ``batch_size`` and ``epochs``;
``execution.device``, ``dtype`` and ``fuse``. Each member keeps its own value of the
fields in `MAY_DIFFER`: learning rate, its schedule, weight decay, momentum and betas (the
fused optimisers take them per model), the seed (each model's own initial weights,
dropout stream and data order), the dropout rate, the init scheme (each model is
initialised by the unfused builder and copied in), the time limit, and the widths within
one padding bucket.

**Widths** are bucketed layer by layer (`scheduler.cost.bucket`: every width up to
`scheduler.cost.MIN_BUCKET` shares one bucket, above it a layer is padded by at most half
its width); a group's members share every bucket, and the fused trainer pads each layer to
the widest member of its group and masks the padding out exactly.

**Never fused** (a group of one): a trial of a kind that does not fuse
(`core.spec.kind.TrialKind.fuses`): a user's training function (``trainable``), a Caffe
net (``caffe``: its layer graph has no stacked form yet; its seconds, which the makespan
below weighs, come from its graph, `core.spec.caffe.cost`); ``fuse:
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
first capped from memory: `scheduler.cost.DEFAULT_MEMORY_BUDGET` divided by the training
state of one member (`scheduler.cost.model_bytes`), capped at `AUTO_CAP`. On
``execution.device: cuda`` that is all (a GPU wants large work). On ``cpu`` and ``auto``
(which is a CPU wherever no GPU is; set ``cuda`` to fuse for a GPU) the **cost model**
(`scheduler.cost`: the seconds of a trial alone or of a fused group) then decides, so
that ``auto`` never loses to ``off``. The size of each class's groups is chosen, among a
few candidates K <= the cap, to minimise the **estimated makespan** of the whole sweep on
its workers: for a set of granularities (a cap on the seconds of the longest unit), each
class takes its cheapest K whose units fit, a class fuses only when that is at least
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
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from core.spec.config import SECTIONS
from core.spec.fields import config_value, leaf_defaults
from core.spec.kinds import kind_of
from core.spec.space import Dimension, Fixed
from scheduler.cost import (
    DEFAULT_MEMORY_BUDGET,
    UnitCost,
    bucket,
    estimate_seconds,
    model_bytes,
    widths,
)

#: The largest group `auto` makes; past a few dozen models a group gains little on a CPU.
AUTO_CAP = 64
#: A class fuses only when its groups are estimated this many times cheaper than alone.
MIN_GAIN = 1.2
#: Workers assumed when the caller does not say (more is safer: finer units, less fusion).
DEFAULT_WORKERS = 4
#: Group sizes `auto` weighs (with the memory cap and the class's own size).
CANDIDATE_SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
#: How many granularities (caps on the longest unit) `auto` weighs at most.
GRANULARITIES = 48

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

#: Data-parallel settings: above one process never fused, on one process inert (docstring).
_PARALLEL = "execution.parallel."

_DEFAULTS: dict[str, Any] = leaf_defaults()
_KNOWN = frozenset(MAY_DIFFER | set(KEY_FIELDS)) | {
    path for path in _DEFAULTS if path.startswith(("dataset.", _PARALLEL))
}
_UNKNOWN = tuple(sorted(set(_DEFAULTS) - _KNOWN))


def group_limit(config: Mapping[str, Any]) -> int:
    """The most trials this one may train with: 1 when it is never fused (module docstring)."""
    if not kind_of(config).fuses:
        return 1  # a user's own function or a Caffe net: nothing to stack
    fuse = config_value(config, "execution.fuse")
    if fuse is False or fuse == "off" or fuse == 1:
        return 1
    if (
        config_value(config, "training.epochs") == 0
        or config_value(config, "execution.dtype") == "float16"
    ):
        return 1
    if config_value(config, "model.kind") != "mlp":
        return 1
    if config_value(config, f"{_PARALLEL}world_size") > 1:
        return 1
    if any(config_value(config, path) != _DEFAULTS[path] for path in _UNKNOWN):
        return 1
    if fuse == "auto":
        return max(1, min(AUTO_CAP, DEFAULT_MEMORY_BUDGET // model_bytes(config)))
    return int(fuse)


def costed(config: Mapping[str, Any]) -> bool:
    """Whether `auto` sizes this trial's groups with the cost model (module docstring)."""
    return (
        config_value(config, "execution.fuse") == "auto"
        and config_value(config, "execution.device") != "cuda"
    )


def _fusion(config: Mapping[str, Any]) -> tuple[str | None, int, list[int]]:
    """(fusion key or None, group limit, widths) of one trial, each worked out once."""
    limit = group_limit(config)
    if limit == 1:
        return None, 1, []
    layer_widths = widths(config)
    dataset = {k: config_value(config, f"dataset.{k}") for k in SECTIONS["dataset"].model_fields}
    shared = {path: config_value(config, path) for path in KEY_FIELDS}
    key = {"dataset": dataset, **shared, "buckets": [bucket(w) for w in layer_widths]}
    return json.dumps(key, sort_keys=True, default=str), limit, layer_widths


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
        work = UnitCost(self.config)
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
            single_costs.append(estimate_seconds([config]))
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


# --- groups of an adaptive search, asked together ------------------------------------------


def shared_dimensions(space: Mapping[str, Dimension]) -> frozenset[str]:
    """The dimensions of a search space on which every member of one fused group agrees:
    each field not in `MAY_DIFFER`, and the widths when their values fall in more than
    one bucket. An adaptive search fixes them when it asks a group's other points
    (`scheduler.feed`), so that the points it asks together can train together."""
    shared = set()
    for path, dim in space.items():
        if isinstance(dim, Fixed):
            continue
        if path not in MAY_DIFFER or (path == "model.hidden_units" and not _one_bucket(dim)):
            shared.add(path)
    return frozenset(shared)


def _one_bucket(dim: Dimension) -> bool:
    if not dim.finite:
        return False
    buckets = {
        tuple(bucket(int(w)) for w in (value if isinstance(value, list) else [value]))
        for value in dim.values()
    }
    return len(buckets) == 1


def fused_size(config: Mapping[str, Any], cap: int) -> int:
    """How many trials like this one an adaptive search asks to train as one fused group:
    the largest of `CANDIDATE_SIZES` up to `cap` (and `group_limit`) at which, by the cost
    model, the group costs at most 1 / `MIN_GAIN` of its members trained alone (an
    integer ``fuse`` or a GPU: the limit itself); 1 when the trial never fuses or gains
    nothing by it (a compute-bound net on a CPU)."""
    limit = min(cap, group_limit(config))
    if limit <= 1 or not costed(config):
        return max(1, limit)
    work = UnitCost(config)
    padded = [bucket(w) for w in widths(config)]
    alone = work.seconds([padded])
    size = 1
    for k in CANDIDATE_SIZES:
        if 1 < k <= limit and work.seconds([padded] * k) * MIN_GAIN <= k * alone:
            size = k
    return size


def fused_alone(config: Mapping[str, Any]) -> bool:
    """Whether a trial left alone still trains on the fused path, as a group of one: a net
    that may fuse, sized by the cost model (``fuse: auto`` on a CPU), whose layers all fall
    in the smallest width bucket. There it trains as fast as alone and to the same result
    (measured on digits: 2 x 32 units, 0.0044 s an epoch fused, 0.0049 alone, metrics equal
    to 1e-6; wider nets were slower fused, 2 x 256 by 14 %, or rounded differently, 4 x 1024,
    so they stay on the plain loop), and a worker process that has trained only fused groups
    so far need not pay torch.optim's first use (its lazy import of torch._dynamo: 0.9 s of
    CPU, once per process, for a net that trains in 0.1 s)."""
    if group_limit(config) <= 1 or not costed(config):
        return False
    return max(widths(config), default=0) <= bucket(1)
