"""Training state as bytes and back, with no pickle: safetensors for the tensors, JSON for the rest.

`pack(state, meta)` takes any tree of dicts, lists and tuples whose leaves are tensors, numbers,
strings, booleans or None (a model's ``state_dict``, an optimiser's, a schedule's, RNG
states) and writes one safetensors file: the tensors by a generated key, the tree's shape
with each tensor replaced by its key as JSON in the file's metadata (``tree``), and `meta`
(JSON too) beside it. `unpack` reads it back to the same tree, the same key types (an
optimiser's integer state keys stay integers), tuples as tuples. Loading runs no code from
the file: safetensors reads raw tensors, and JSON is data.

A file that is cut short, corrupt, or not one of ours raises `CheckpointError`, which the
caller turns into "start again from epoch 0" (`workers.checkpointing`).

`model_file(model, meta)` / `read_model_file(data)` are the same format for a model's
weights alone (what ``sweepstack model`` downloads, `workers.models_io` loads).
"""

from __future__ import annotations

import json
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

FORMAT = "sweepstack-state-1"


class CheckpointError(ValueError):
    """A checkpoint that cannot be read back."""


def _encode(node: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(node, torch.Tensor):
        key = f"t{len(tensors)}"
        # Own, contiguous memory: safetensors refuses views that share storage.
        tensors[key] = node.detach().to("cpu").contiguous().clone()
        return {"$t": key}
    if isinstance(node, dict):
        return {"$d": [[_encode(k, tensors), _encode(v, tensors)] for k, v in node.items()]}
    if isinstance(node, tuple):
        return {"$tuple": [_encode(v, tensors) for v in node]}
    if isinstance(node, list):
        return [_encode(v, tensors) for v in node]
    if node is None or isinstance(node, bool | int | float | str):
        return node
    raise TypeError(f"cannot checkpoint a {type(node).__name__}")


def _decode(node: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(node, list):
        return [_decode(v, tensors) for v in node]
    if isinstance(node, dict):
        if "$t" in node:
            return tensors[node["$t"]]
        if "$tuple" in node:
            return tuple(_decode(v, tensors) for v in node["$tuple"])
        if "$d" in node:
            return {_decode(k, tensors): _decode(v, tensors) for k, v in node["$d"]}
        raise CheckpointError("the checkpoint's tree holds an unknown node")
    return node


def pack(state: Any, meta: dict[str, Any] | None = None) -> bytes:
    """`state` (module docstring) and `meta` as one safetensors file's bytes."""
    tensors: dict[str, torch.Tensor] = {}
    tree = _encode(state, tensors)
    header = {"format": FORMAT, "tree": json.dumps(tree), "meta": json.dumps(meta or {})}
    return st_save(tensors, metadata=header)


def _header(data: bytes) -> dict[str, str]:
    # safetensors' own layout: 8 bytes of header length (little-endian), then the JSON header.
    if len(data) < 8:
        raise CheckpointError("the checkpoint is cut short")
    length = int.from_bytes(data[:8], "little")
    if length > len(data) - 8:
        raise CheckpointError("the checkpoint is cut short")
    try:
        header = json.loads(data[8 : 8 + length])
    except ValueError as exc:
        raise CheckpointError(f"the checkpoint's header is not JSON: {exc}") from exc
    metadata = header.get("__metadata__") if isinstance(header, dict) else None
    if not isinstance(metadata, dict) or metadata.get("format") != FORMAT:
        raise CheckpointError("not a sweepstack checkpoint")
    return metadata


def unpack(data: bytes) -> tuple[Any, dict[str, Any]]:
    """The (state, meta) `pack` wrote; `CheckpointError` for bytes it did not write whole."""
    metadata = _header(data)
    try:
        tensors = st_load(data)
        tree = json.loads(metadata["tree"])
        meta = json.loads(metadata.get("meta", "{}"))
        return _decode(tree, tensors), meta
    except (SafetensorError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"the checkpoint cannot be read: {exc}") from exc


def read_meta(data: bytes) -> dict[str, Any]:
    """Only the `meta` of a packed file (its header), without reading its tensors."""
    try:
        return json.loads(_header(data).get("meta", "{}"))
    except ValueError as exc:
        raise CheckpointError(f"the checkpoint's meta is not JSON: {exc}") from exc


MODEL_FORMAT = "sweepstack-model-1"


def model_file(model: torch.nn.Module, meta: dict[str, Any]) -> bytes:
    """A model's weights as a plain safetensors file (its ``state_dict``'s names, so any
    safetensors reader sees them), with `meta` (the trial's config and shapes: what
    rebuilds the module, `workers.models_io`) as JSON in the file's metadata."""
    weights = {k: v.detach().to("cpu").contiguous().clone() for k, v in model.state_dict().items()}
    return st_save(weights, metadata={"format": MODEL_FORMAT, "meta": json.dumps(meta)})


def read_model_file(data: bytes) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The (weights, meta) of a `model_file`; `CheckpointError` for anything else."""
    if len(data) < 8 or int.from_bytes(data[:8], "little") > len(data) - 8:
        raise CheckpointError("the model file is cut short")
    length = int.from_bytes(data[:8], "little")
    try:
        header = json.loads(data[8 : 8 + length])
        metadata = header.get("__metadata__") or {}
        if metadata.get("format") != MODEL_FORMAT:
            raise CheckpointError("not a sweepstack model file")
        return st_load(data), json.loads(metadata.get("meta", "{}"))
    except (SafetensorError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"the model file cannot be read: {exc}") from exc
