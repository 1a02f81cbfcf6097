"""What a fused group shares, and how many of its models fit on the device at once.

`GroupData` is the device, the dtypes and the data set on the device, loaded once for
the whole group. `fit_count` says how many of the group's models fit in one fused run:
on a CPU from an estimate (weights, gradients and two optimiser buffers at the padded
widths, plus a batch's activations) against `MEMORY_FRACTION` of the RAM available; on
CUDA from a dry run (one training step of one model at the padded widths, measured by
the allocator) against `MEMORY_FRACTION` of the free GPU memory. A group larger than
that trains in `chunks` of nearly equal size, one after another, in the group's order
(which `scheduler.grouping` sorts by width, so each chunk pads as little as it can).
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import torch

from core.spec.config import ModelConfig, TrialConfig
from workers.training.datasets import Dataset, load_dataset
from workers.training.device import parameter_dtype, select_device, select_dtype
from workers.training.fused_model import FusedMLP
from workers.training.fused_optim import FusedOptimizer
from workers.training.models import available_memory, build_mlp

#: The share of the free memory a fused group may plan to use.
MEMORY_FRACTION = 0.5


class GroupData:
    """What a group shares: device, dtypes and the data set on the device."""

    def __init__(self, config: TrialConfig, data_dir: Path | None) -> None:
        self.device = select_device(config.execution)
        self.dtype = select_dtype(config.execution, self.device)
        self.param_dtype = parameter_dtype(self.dtype)
        self.metric_dtype = torch.float64 if self.param_dtype == torch.float64 else torch.float32
        self.data: Dataset = load_dataset(config.dataset, data_dir)
        self.classification = self.data.task == "classification"
        y_dtype = torch.int64 if self.classification else self.param_dtype
        self.x_train, self.y_train, self.x_val, self.y_val = (
            torch.tensor(array, dtype=dtype, device=self.device)
            for array, dtype in (
                (self.data.x_train, self.param_dtype),
                (self.data.y_train, y_dtype),
                (self.data.x_val, self.param_dtype),
                (self.data.y_val, y_dtype),
            )
        )


def chunks(count: int, size: int) -> list[list[int]]:
    """Positions 0..count-1 in consecutive runs of at most `size`, as even as can be."""
    parts = math.ceil(count / max(size, 1))
    bounds = [round(i * count / parts) for i in range(parts + 1)]
    return [list(range(a, b)) for a, b in itertools.pairwise(bounds)]


def _padded_model(configs: list[TrialConfig]) -> ModelConfig:
    first = configs[0].model
    widths = [max(c.model.widths[layer] for c in configs) for layer in range(first.hidden_layers)]
    return first.model_copy(update={"hidden_units": widths, "dropout": 0.0, "init": "default"})


def fit_count(configs: list[TrialConfig], shared: GroupData) -> int:
    """How many of these models fit in one fused run on `shared.device` (module docstring)."""
    model = _padded_model(configs)
    n_in, n_out = shared.data.n_features, shared.data.out_features
    free = available_memory(shared.device)
    if free is None:
        return len(configs)
    if shared.device.type == "cuda":
        per_model = _dry_run_bytes(configs[0], model, shared)
    else:
        item = torch.empty((), dtype=shared.param_dtype).element_size()
        sizes = [n_in, *model.widths, n_out]
        params = sum((a + 1) * b for a, b in itertools.pairwise(sizes))
        batch = min(configs[0].training.batch_size, shared.data.n_train)
        activations = batch * (sum(model.widths) + n_out + n_in) * 4
        per_model = (params * 4 + activations) * item
    return max(1, min(len(configs), int(free * MEMORY_FRACTION // max(per_model, 1))))


def _dry_run_bytes(config: TrialConfig, model: ModelConfig, shared: GroupData) -> int:
    """Peak GPU bytes of one training step of one model at the padded widths."""
    device = shared.device
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    n_in, n_out = shared.data.n_features, shared.data.out_features
    net = build_mlp(model, n_in, n_out, device=device, dtype=shared.param_dtype)
    fused = FusedMLP([net], [model], [None])
    optimizer = FusedOptimizer(config.training.optimizer, [config.training])
    batch = min(config.training.batch_size, shared.data.n_train)
    index = torch.arange(batch, device=device).unsqueeze(0)
    out = fused(shared.x_train[index], train=True)
    out.float().square().mean().backward()
    optimizer.step(fused.parameters(), [0.0])
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - base
    del net, fused, optimizer, out
    torch.cuda.empty_cache()
    return int(peak)
