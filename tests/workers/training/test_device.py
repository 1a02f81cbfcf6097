"""Device and dtype selection and the description a trial record keeps."""

from __future__ import annotations

import pytest
import torch

from core.errors import TrainingError
from core.spec.config import ExecutionConfig
from workers.training.device import describe, parameter_dtype, select_device, select_dtype

HAS_CUDA = torch.cuda.is_available()


def test_cpu_and_auto() -> None:
    assert select_device(ExecutionConfig(device="cpu")) == torch.device("cpu")
    expected = "cuda" if HAS_CUDA else "cpu"
    assert select_device(ExecutionConfig(device="auto")).type == expected


@pytest.mark.parametrize("name", ["cuda", "cuda:0", "cuda:7"])
def test_cuda_without_a_gpu_is_a_training_error(name: str) -> None:
    if HAS_CUDA and name != "cuda:7":
        assert select_device(ExecutionConfig(device=name)).type == "cuda"
        return
    with pytest.raises(TrainingError) as caught:
        select_device(ExecutionConfig(device=name))
    if not HAS_CUDA:
        assert caught.value.reason == (
            f"execution.device {name} requested but CUDA is not available"
        )


@pytest.mark.parametrize(
    ("name", "dtype", "weights"),
    [
        ("float32", torch.float32, torch.float32),
        ("float64", torch.float64, torch.float64),
        ("bfloat16", torch.bfloat16, torch.float32),
        ("float16", torch.float16, torch.float32),
    ],
)
def test_dtypes(name: str, dtype: torch.dtype, weights: torch.dtype) -> None:
    assert select_dtype(ExecutionConfig(dtype=name), torch.device("cpu")) == dtype
    assert parameter_dtype(dtype) == weights


def test_describe() -> None:
    info = describe(torch.device("cpu"), torch.float16)
    assert info == {
        "device": "cpu",
        "device_name": "cpu",
        "dtype": "float16",
        "mixed_precision": True,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "threads": torch.get_num_threads(),
    }
