"""Where a trial runs and in which precision: `execution.device` and `execution.dtype`.

float32 and float64 are true precisions: the model and the data are cast to them. float16
and bfloat16 are mixed precision, as PyTorch users know it from `torch.autocast`: the
weights and the optimiser state stay float32 and the forward pass runs in the half type.
Casting the weights themselves to float16 makes Adam divide by an `eps` that rounds to zero,
so every float16 Adam trial on digits turned to NaN in its first epoch.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from core.errors import TrainingError
from core.spec.config import ExecutionConfig

logger = logging.getLogger(__name__)

_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
MIXED_DTYPES = (torch.float16, torch.bfloat16)


def seed_torch(seed: int, device: torch.device) -> None:
    """Seed the random streams a trial on `device` draws from, as ``torch.manual_seed`` does.

    On the CPU that is the default generator alone. ``torch.manual_seed`` also queues a seed
    for every CUDA, MPS and XPU device, and while CUDA is not initialised each queued call
    records a stack trace: about 0.4 ms, a third of a zero-epoch trial, for streams a CPU
    trial never reads. On any other device the full call, so results stay what they were.
    """
    if device.type == "cpu":
        torch.default_generator.manual_seed(seed)
    else:
        torch.manual_seed(seed)


def select_device(execution: ExecutionConfig) -> torch.device:
    """The device `execution.device` names; `auto` is CUDA when there is one, else the CPU.

    A CUDA device that is not there is a `TrainingError`: the trial fails with the reason and
    the worker goes on.
    """
    name = execution.device
    if name == "cpu":
        return torch.device("cpu")
    available = torch.cuda.is_available()
    if name == "auto":
        return torch.device("cuda") if available else torch.device("cpu")
    if not available:
        raise TrainingError(f"execution.device {name} requested but CUDA is not available")
    device = torch.device(name)
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        raise TrainingError(
            f"execution.device {name} requested but only {count} CUDA device(s) are visible "
            f"(indices 0..{count - 1})"
        )
    return device


def select_dtype(execution: ExecutionConfig, device: torch.device) -> torch.dtype:
    """The compute dtype `execution.dtype` names, checked against what `device` supports."""
    dtype = _DTYPES[execution.dtype]
    if (
        dtype == torch.bfloat16
        and device.type == "cuda"
        and not torch.cuda.is_bf16_supported(including_emulation=False)
    ):
        raise TrainingError(
            f"execution.dtype bfloat16 is not supported on {device_name(device)}; "
            "use float16 or float32"
        )
    return dtype


def parameter_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of weights and optimiser state: float32 under mixed precision."""
    return torch.float32 if dtype in MIXED_DTYPES else dtype


def device_name(device: torch.device) -> str:
    """A readable name: the GPU's model for CUDA, `cpu` otherwise."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


def describe(device: torch.device, dtype: torch.dtype) -> dict[str, Any]:
    """What the trial record keeps about where it ran, for reproducibility."""
    return {
        "device": str(device),
        "device_name": device_name(device),
        "dtype": str(dtype).removeprefix("torch."),
        "mixed_precision": dtype in MIXED_DTYPES,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "threads": torch.get_num_threads(),
    }
