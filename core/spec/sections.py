"""A built-in section of a spec document (``dataset``, ``model``, ``training``,
``execution``) read into dimensions, by leaf path: `parse_section`.

Every kind reads the built-in sections it keeps through it (`core.spec.kinds`), so a leaf
is checked against the same field rule (`core.spec.config`) whichever kind's spec holds it.
A section may hold a sub-section (``execution.parallel``, see `core.spec.fields`): written
as a mapping of its own keys, whose leaves are parameters like any other at their full
path (``execution.parallel.tau: [1, 5, 20]`` is written
``execution: {parallel: {tau: [1, 5, 20]}}``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import TypeAdapter, ValidationError

from core.errors import Problem
from core.spec.fields import field_adapter, section_model, sub_model
from core.spec.problems import problems_from, show_value
from core.spec.space import (
    DIMENSION_KEYS,
    Categorical,
    Dimension,
    Fixed,
    IntRange,
    Uniform,
    dedupe,
    parse_dimension,
)
from core.spec.suggest import unknown_key


def parse_section(
    section: str,
    raw: Any,
    problems: list[Problem],
    adapters: Mapping[str, TypeAdapter] | None = None,
) -> dict[str, Dimension]:
    """The dimensions of a section or sub-section (``execution.parallel``), by leaf path.

    `adapters` replaces the validators of some leaves by path: a Caffe spec's
    ``dataset.path`` also names folders (`core.spec.caffe.trial.CaffeDataset`)."""
    space: dict[str, Dimension] = {}
    if raw is None:
        return space
    if not isinstance(raw, dict):
        problems.append(Problem(section, f"must be a mapping, got {show_value(raw)}"))
        return space
    model = section_model(section)
    if model is None:
        raise ValueError(f"{section} is not a section of the config")
    for key, leaf in raw.items():
        path = f"{section}.{key}"
        info = model.model_fields.get(key) if isinstance(key, str) else None
        inner = sub_model(info) if info is not None else None
        if inner is not None:
            if isinstance(leaf, dict) and not any(k in leaf for k in DIMENSION_KEYS):
                space.update(parse_section(path, leaf, problems, adapters))
            else:
                # A whole sub-section is never one value: its keys are the parameters.
                known = ", ".join(inner.model_fields)
                rule = f"is a section: give its keys ({known}) as a mapping, got {show_value(leaf)}"
                problems.append(Problem(path, rule))
            continue
        adapter = (adapters or {}).get(path) or field_adapter(path)
        if adapter is None:
            problems.append(Problem(path, unknown_key(key, list(model.model_fields))))
            continue
        dim, suffixes = parse_dimension(leaf, path, problems)
        if isinstance(dim, Uniform | IntRange):
            candidates: list[Any] = [dim.low, dim.high]
        else:
            candidates = dim.values()
        checked = []
        for value, suffix in zip(candidates, suffixes, strict=False):
            try:
                checked.append(adapter.validate_python(value))
            except ValidationError as exc:
                problems.extend(problems_from(exc, path + suffix, value))
                if dim.kind == "range":
                    break  # the rest of a generated sequence fails the same way
        if isinstance(dim, Fixed):
            dim = dim.model_copy(update={"value": checked[0] if checked else dim.value})
        elif isinstance(dim, Categorical):
            dim = dim.model_copy(update={"choices": tuple(dedupe(checked))})
        space[path] = dim
    return space
