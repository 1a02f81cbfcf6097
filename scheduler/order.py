"""The order a sweep's work goes to the queue: longest first (LPT).

Workers take messages first in, first out. If the biggest networks come last, they start
when the other workers are running out of work, and the sweep ends with one worker
training a large net while the rest idle. Sent longest-processing-time first, the large
ones start at once and the small ones fill the gaps at the end, so the sweep ends close to
total work / workers (Graham's LPT bound: within 4/3 of the best order).

The estimate is relative, not seconds: a training step costs its multiply-adds (forward
and backward, about 6 x batch x parameters; `scheduler.cost.step_flops`) plus a fixed
`STEP_OVERHEAD_FLOPS` for what a step costs whatever its size (Python, dispatch, the
optimiser), times the steps of the whole trial (samples / batch x epochs). A fused group
takes its members' steps together: the steps of one member, each costing the overhead
once and every member's multiply-adds. A trial whose kind counts its own work
(`core.spec.kind.TrialKind.work`) costs that instead of an MLP's (`work_cost`): a Caffe
net's ``max_iter`` x ``iter_size`` steps, and the multiply-accumulates of its Convolution
and InnerProduct layers for every sample its TRAIN and TEST nets see
(`core.spec.caffe.cost`, memoised by net text). Pure logic: no torch, no broker, no store.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from core.spec.fields import config_value
from core.spec.kind import Work
from core.spec.kinds import kind_of
from scheduler.cost import step_flops

T = TypeVar("T")
#: What one training step costs whatever the model's size, in multiply-adds: about 1 ms
#: of Python and dispatch on a CPU core doing ~20 GFLOP/s.
STEP_OVERHEAD_FLOPS = 20_000_000
#: Rows of the built-in data sets (the synthetic ones say theirs in `dataset.samples`).
BUILTIN_SAMPLES = {"digits": 1797, "iris": 150, "wine": 178, "breast_cancer": 569}
#: What the estimate assumes for a user's file, which the scheduler does not read.
FILE_SAMPLES = 10_000


def samples(config: Mapping[str, Any]) -> int:
    """Rows of the trial's data set (training and validation together)."""
    name = config_value(config, "dataset.name")
    if name in BUILTIN_SAMPLES:
        return BUILTIN_SAMPLES[name]
    if isinstance(name, str) and name.startswith("synthetic"):
        return int(config_value(config, "dataset.samples"))
    return FILE_SAMPLES


def steps(config: Mapping[str, Any]) -> int:
    """Training steps of the whole trial; at least one (a zero-epoch trial still evaluates)."""
    batch = max(1, int(config_value(config, "training.batch_size")))
    epochs = int(config_value(config, "training.epochs"))
    return max(1, epochs * math.ceil(samples(config) / batch))


def trial_cost(config: Mapping[str, Any]) -> float:
    """The relative cost of training one trial alone (module docstring)."""
    work = kind_of(config).work(config)
    if work is not None:
        return work_cost(work)
    return float(steps(config) * (STEP_OVERHEAD_FLOPS + step_flops(config)))


def work_cost(work: Work) -> float:
    """The relative cost of a trial whose kind counts its own work (a Caffe net), in the
    MLP's units: its updates, each `STEP_OVERHEAD_FLOPS`, plus two flops per
    multiply-accumulate (for a Caffe net, of its graph's Convolution and InnerProduct
    layers over every TRAIN and TEST pass, `core.spec.caffe.cost`)."""
    return float(work.steps * STEP_OVERHEAD_FLOPS + 2 * work.macs)


def group_cost(configs: Sequence[Mapping[str, Any]]) -> float:
    """The relative cost of a fused group: its members share steps, and so the overhead."""
    if len(configs) == 1:
        return trial_cost(configs[0])
    flops = sum(step_flops(config) for config in configs)
    return float(max(steps(c) for c in configs) * (STEP_OVERHEAD_FLOPS + flops))


def order_by_cost(items: Sequence[T], costs: Sequence[float]) -> list[T]:
    """`items` by descending cost; equal costs keep their order (the sort is stable)."""
    if len(items) != len(costs):
        raise ValueError(f"need one cost per item, got {len(costs)} costs for {len(items)} items")
    ranked = sorted(range(len(items)), key=lambda i: -costs[i])
    return [items[i] for i in ranked]
