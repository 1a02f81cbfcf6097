"""A kept model's file back to a ready module, and on to the formats other tools load.

A trial's kept model is one safetensors file (`workers.training.checkpoints.model_file`):
its module's ``state_dict`` by name, and in the file's metadata what rebuilds the module:
the trial kind (``kind``), its config, input and output widths, task and parameter dtype.

- `load_model_bytes(data)` reads such a file with no pickle (safetensors reads raw tensors,
  the metadata is JSON), rebuilds the module from its config (`BUILDERS`: one function per
  kind of model: the built-in MLP's is `workers.training.models.build_mlp`, which a fused
  group's member and a data-parallel trial are too; a Caffe net's,
  `workers.training.caffe.inference.caffe_module`) and loads the weights into it, strictly:
  ready on the CPU, in eval mode. A file that is not ours, cut short, or whose weights do
  not fit its config raises `CheckpointError`.
- `to_torchscript(model, meta)`: the module scripted (``torch.jit.script``; a Caffe net,
  which the compiler does not take, traced) and saved, for ``torch.jit.load`` without
  Sweepstack. PyTorch deprecates TorchScript in favour of ``torch.export``; it still loads
  in C++ and older runtimes, which is why it is offered.
- `to_onnx(model, meta, path)`: ONNX through ``torch.onnx.export``, whose exporter (the
  ``torch.export``-based one, PyTorch's default since 2.9) needs the ``onnx`` and
  ``onnxscript`` packages: the ``onnx`` extra (`MissingExtra` names it when absent). One
  input, ``input`` (rows of features), one output, ``output`` (logits, or the regression
  target on the training split's standardised scale); the batch dimension is dynamic. A
  Caffe net is refused for now (`ExportError`): its TEST phase runs its Accuracy layer,
  whose shapes depend on the data, which ``torch.export`` does not take.

`sweepstack model` (`cli.model`) and `sweepstack.load_model` call these; torch is imported
here and below only.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from pydantic import ValidationError
from torch.nn import Module

from core.errors import SweepstackError
from core.spec.config import TrialConfig
from workers.training.checkpoints import CheckpointError, read_model_file
from workers.training.models import build_mlp

__all__ = [
    "BUILDERS",
    "CheckpointError",
    "ExportError",
    "MissingExtra",
    "Module",
    "example_input",
    "load_model_bytes",
    "to_onnx",
    "to_torchscript",
]

#: The parameter dtypes a model file may name (never looked up on `torch` by name).
DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
#: Past this many bytes of weights an ONNX file keeps them in a file beside it
#: (``FILE.data``): protobuf holds at most 2 GiB in one message.
ONNX_INLINE_BYTES = 1 << 30


class MissingExtra(SweepstackError):
    """A format needs packages of an optional extra that are not installed."""


class ExportError(SweepstackError):
    """PyTorch could not convert the model to the format asked for."""


def _first_line(exc: BaseException) -> str:
    """What went wrong at the bottom of `exc`'s chain, in one line (PyTorch's exporters
    wrap the cause in pages of advice)."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:300]}" if text else type(exc).__name__


def _mlp(weights: dict[str, torch.Tensor], meta: dict[str, Any]) -> Module:
    config = TrialConfig.model_validate(meta["config"])
    model = build_mlp(config.model, int(meta["n_in"]), int(meta["n_out"]), dtype=dtype_of(meta))
    model.load_state_dict(weights, strict=True)
    return model


def _caffe(weights: dict[str, torch.Tensor], meta: dict[str, Any]) -> Module:
    from workers.training.caffe.inference import caffe_module  # the Caffe layers: on use

    return caffe_module(weights, meta)


#: kind (the file's ``meta["kind"]``) -> what builds its module from the file's weights and
#: meta: the built-in MLP (a fused member's and a data-parallel trial's too), a Caffe net's
#: TEST phase (`workers.training.caffe.inference`).
BUILDERS: dict[str, Callable[[dict[str, torch.Tensor], dict[str, Any]], Module]] = {
    "mlp": _mlp,
    "caffe": _caffe,
}


def dtype_of(meta: dict[str, Any]) -> torch.dtype:
    """The parameters' dtype a model file names; `CheckpointError` for any other name."""
    name = meta.get("dtype", "float32")
    if name not in DTYPES:
        raise CheckpointError(f"the model file names an unknown dtype {str(name)[:40]!r}")
    return DTYPES[name]


def load_model_bytes(data: bytes) -> tuple[Module, dict[str, Any]]:
    """The module of a kept model file's bytes, weights loaded, on the CPU, in eval mode;
    and the file's meta (module docstring). `CheckpointError` for anything else."""
    weights, meta = read_model_file(data)
    if not isinstance(meta, dict):
        raise CheckpointError("the model file's meta is not a JSON object")
    kind = meta.get("kind")
    if kind not in BUILDERS:
        raise CheckpointError(
            f"a model of kind {str(kind)[:40]!r} cannot be rebuilt here; kinds known: "
            + ", ".join(sorted(BUILDERS))
        )
    try:
        model = BUILDERS[kind](weights, meta)
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError, ValidationError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"the model file's weights do not fit its config: {first}") from exc
    return model.eval(), meta


def example_input(meta: dict[str, Any], rows: int = 2) -> torch.Tensor:
    """A batch of zeros of the shape and dtype the model takes (for tracing, exporting):
    rows of ``n_in`` features, or of images of ``shape`` (C, H, W: a Caffe net's)."""
    sample = meta["shape"] if "shape" in meta else [meta["n_in"]]
    return torch.zeros(rows, *(int(d) for d in sample), dtype=dtype_of(meta))


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Torch's own deprecation and exporter chatter, which a user cannot act on, kept
    out of the command's output."""
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", FutureWarning)
            yield
    finally:
        logger.setLevel(level)


def to_torchscript(model: Module, meta: dict[str, Any]) -> bytes:
    """The model as a TorchScript file's bytes (``torch.jit.load`` reads them): scripted,
    or, for a module TorchScript's compiler does not take (a Caffe net's Python graph
    walk), traced on a batch of `example_input` (its operations recorded, the batch size
    left free); `ExportError` when neither works."""
    model = model.eval()
    with _quiet():
        try:
            converted = torch.jit.script(model)
        except Exception as script_error:  # the compiler's errors share no base class
            try:
                # The tracer warns of the loss and accuracy layers' Python branches on
                # labels; the scores a traced net returns come before them.
                warnings.simplefilter("ignore", torch.jit.TracerWarning)
                with torch.no_grad():
                    converted = torch.jit.trace(model, example_input(meta), check_trace=False)
            except Exception as exc:
                raise ExportError(
                    f"the model cannot be converted to TorchScript: {_first_line(exc)} "
                    f"(scripting it: {_first_line(script_error)})"
                ) from exc
        buffer = io.BytesIO()
        torch.jit.save(converted, buffer)
    return buffer.getvalue()


def to_onnx(model: Module, meta: dict[str, Any], path: Path) -> list[Path]:
    """Write the model as ONNX to `path` (module docstring); the files written (`path`,
    and ``path.data`` beside it for weights past `ONNX_INLINE_BYTES`)."""
    missing = [name for name in ("onnx", "onnxscript") if not _importable(name)]
    if missing:
        raise MissingExtra(
            f"--format onnx needs the {' and '.join(missing)} package"
            f"{'s' if len(missing) > 1 else ''}: install the onnx extra, "
            "pip install 'sweepstack[onnx]'"
        )
    size = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    external = size > ONNX_INLINE_BYTES
    batch = torch.export.Dim("batch", min=1)
    with _quiet():
        try:
            torch.onnx.export(
                model.eval(),
                (example_input(meta),),
                str(path),
                input_names=["input"],
                output_names=["output"],
                dynamic_shapes=({0: batch},),
                external_data=external,
                verbose=False,
            )
        except Exception as exc:  # torch.export's and the exporter's errors share no base
            path.unlink(missing_ok=True)
            raise ExportError(
                f"the model cannot be exported to ONNX: {_first_line(exc)}"
            ) from exc
    data = path.with_name(path.name + ".data")
    return [path, data] if external and data.exists() else [path]


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None
