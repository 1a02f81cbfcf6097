"""The trial config's fields by dotted path, at any depth: sections, sub-sections and leaves.

A section (`core.spec.config.SECTIONS`) holds leaves and may hold sub-sections, fields typed as a
pydantic model (``execution.parallel``, a `ParallelConfig`). The spec, a trial's params and
every reader of them name a leaf by its full path (``model.hidden_units``,
``execution.parallel.tau``). A sub-section is never a leaf itself, so a parameter's value is
never a mapping, and params stored nested by path (`core.store.records`) flatten back unambiguously.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from types import MappingProxyType
from typing import Annotated, Any

from pydantic import BaseModel, TypeAdapter
from pydantic.fields import FieldInfo

from core.spec.config import SECTIONS


def sub_model(info: FieldInfo) -> type[BaseModel] | None:
    """The model of a field typed as one pydantic model (a sub-section), else None."""
    annotation = info.annotation
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def section_model(path: str) -> type[BaseModel] | None:
    """The model of a section or sub-section (``execution``, ``execution.parallel``), or None."""
    head, *rest = path.split(".")
    model: type[BaseModel] | None = SECTIONS.get(head)
    for part in rest:
        if model is None or part not in model.model_fields:
            return None
        model = sub_model(model.model_fields[part])
    return model


def leaf_info(path: str) -> FieldInfo | None:
    """The field of a leaf path, or None if it names no field or a sub-section."""
    parent, _, key = path.rpartition(".")
    model = section_model(parent) if parent else None
    if model is None or key not in model.model_fields:
        return None
    info = model.model_fields[key]
    return None if sub_model(info) is not None else info


def _leaves(prefix: str, model: type[BaseModel]) -> dict[str, FieldInfo]:
    out: dict[str, FieldInfo] = {}
    for key, info in model.model_fields.items():
        inner = sub_model(info)
        if inner is None:
            out[f"{prefix}.{key}"] = info
        else:
            out.update(_leaves(f"{prefix}.{key}", inner))
    return out


@cache
def leaf_fields() -> Mapping[str, FieldInfo]:
    """Every leaf of the config by path, sections and their sub-sections in model order."""
    out: dict[str, FieldInfo] = {}
    for section, model in SECTIONS.items():
        out.update(_leaves(section, model))
    return MappingProxyType(out)


def leaf_defaults() -> dict[str, Any]:
    """The default of every leaf that has one (``dataset.name``'s is None), a new dict."""
    return {path: info.default for path, info in leaf_fields().items() if not info.is_required()}


@cache
def _defaults() -> Mapping[str, Any]:
    return MappingProxyType(leaf_defaults())


def config_value(config: Mapping[str, Any], path: str) -> Any:
    """A leaf of a resolved trial config (``section.key``, ``section.sub.key``) as the spec
    gave it, else its default (None for a leaf without one): what the scheduler's cost,
    grouping, ordering and chunking rules read, once per trial at submit."""
    values: Any = config
    *parents, key = path.split(".")
    for part in parents:
        values = values.get(part) or {}
    return values[key] if key in values else _defaults().get(path)


_ADAPTERS: dict[str, TypeAdapter] = {}


def field_adapter(path: str) -> TypeAdapter | None:
    """The validator of one leaf (``section.key``, ``section.sub.key``), or None if no such
    leaf exists (a sub-section such as ``execution.parallel`` is not a leaf)."""
    # Only real leaves are cached: paths from a request must not grow the cache.
    if path not in _ADAPTERS:
        info = leaf_info(path)
        if info is None:
            return None
        annotation = (
            Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
        )
        _ADAPTERS[path] = TypeAdapter(annotation)
    return _ADAPTERS[path]


def get_in(tree: Mapping[str, Any], path: str, default: Any = None) -> Any:
    """The value at a dotted path of nested mappings, or `default` where the path stops."""
    value: Any = tree
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return default
        value = value[part]
    return value


def set_in(tree: dict[str, Any], path: str, value: Any) -> None:
    """Set the value at a dotted path, making the mappings on the way as needed."""
    *parents, key = path.split(".")
    for part in parents:
        tree = tree.setdefault(part, {})
    tree[key] = value
