"""The built-in network's trials (`MlpKind`): a spec of the built-in sections, trained by the
built-in PyTorch trainer.

A spec that names neither ``trainable`` nor ``caffe`` describes the built-in multilayer
perceptron: its sections (``dataset``, ``model``, ``training``, ``execution``,
`core.spec.config`) with any leaf a dimension, and the ``objective``, ``search``,
``pruning`` and ``limits`` every spec has. `load_mlp_spec` validates one into a
`SweepSpec`, every problem named by its path and rule. Its trials may fuse and share
messages (`scheduler.grouping`, `scheduler.chunks`), the scheduler prices them from their
widths, depth, data and epochs (`scheduler.cost`), and a server caps the parameters of the
largest model the spec allows (`limit_problems`).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from core.errors import Problem, SpecError
from core.settings import Settings
from core.spec.artifacts import Artifacts
from core.spec.ceilings import (
    BUILTIN_SHAPES,
    SYNTHETIC,
    candidates,
    data_shape,
    numbers,
    over,
    top,
)
from core.spec.config import REGRESSION_DATASETS, SECTIONS, TrialConfig
from core.spec.documents import value_problems
from core.spec.fields import config_value, field_adapter
from core.spec.kind import TrialKind
from core.spec.objectives import goal_parts, goal_problems, multi_objective_problems
from core.spec.problems import problems_from
from core.spec.search import Pruning, Search, check_search, deprecated_option_problems
from core.spec.sections import parse_section
from core.spec.space import Dimension
from core.spec.spec import OBJECTIVE_METRICS, Limits, Objective, SweepSpec
from core.spec.suggest import name_known_keys, unknown_key

#: The top-level keys of a built-in spec besides its sections.
_META = (
    "name",
    "description",
    "objective",
    "objectives",
    "constraints",
    "search",
    "pruning",
    "limits",
    "artifacts",
)


class MlpKind(TrialKind):
    """The built-in network: every document that names no other kind (asked last)."""

    name = "mlp"
    trainer = "mlp"
    shapes = True
    config_model = TrialConfig
    fuses = True
    chunks = True

    def claims(self, document: Mapping[str, Any]) -> bool:
        """Any document: the built-in network is what a spec is unless it says otherwise."""
        return True

    def load_spec(self, document: dict[str, Any], path: Path | None = None) -> SweepSpec:
        """`load_mlp_spec`; a built-in spec names no files."""
        return load_mlp_spec(document)

    def macs(self, config: Mapping[str, Any], data: Mapping[str, Any]) -> int | None:
        """Each Linear layer's weights (fan in x fan out), at the trial's widths and the
        loaded data's features and outputs (one for a regression)."""
        features = data.get("n_features")
        if not isinstance(features, int):
            return None
        classes = data.get("n_classes")
        outputs = classes if data.get("task") == "classification" and classes else 1
        units = config_value(config, "model.hidden_units")
        widths = (
            [int(u) for u in units]
            if isinstance(units, list)
            else [int(units)] * int(config_value(config, "model.hidden_layers"))
        )
        sizes = [features, *widths, int(outputs)]
        return sum(a * b for a, b in itertools.pairwise(sizes))

    def costs_before_training(self, config: Mapping[str, Any]) -> dict[str, int]:
        """Parameters and multiply-adds of the trial's network where its data's shape is
        known without loading it (a built-in or synthetic set, `BUILTIN_SHAPES`), as the
        worker counts them once the data is loaded (`macs`); nothing for a file."""
        dataset = config.get("dataset") or {}
        name = dataset.get("name")
        if name in BUILTIN_SHAPES:
            _, features, classes = BUILTIN_SHAPES[name]
        elif name in SYNTHETIC and isinstance(dataset.get("features"), int):
            features, classes = dataset["features"], dataset.get("classes")
        else:
            return {}
        regression = name in REGRESSION_DATASETS
        data = {"n_features": features, "n_classes": classes,
                "task": "regression" if regression else "classification"}  # fmt: skip
        macs = self.macs(config, data)
        if macs is None:
            return {}
        units = config_value(config, "model.hidden_units")
        widths = (
            [int(u) for u in units]
            if isinstance(units, list)
            else [int(units)] * int(config_value(config, "model.hidden_layers"))
        )
        outputs = 1 if regression or not classes else int(classes)
        batch_norm = config_value(config, "model.batch_norm") is True
        return {
            "param_count": _mlp_parameters(features, widths, outputs, batch_norm),
            "macs": int(macs),
        }

    def limit_problems(self, spec: SweepSpec, settings: Settings) -> list[Problem]:
        """The largest model the spec allows against ``SWEEPSTACK_MAX_MODEL_PARAMETERS``, and
        its largest batch through it against ``SWEEPSTACK_MAX_ACTIVATION_ELEMENTS``."""
        problems = []
        parameters, how = model_parameters(spec)
        if parameters > settings.max_model_parameters:
            problems.append(
                over("model.hidden_units", "the model's parameters", parameters,
                     settings.max_model_parameters, "SWEEPSTACK_MAX_MODEL_PARAMETERS", how)
            )  # fmt: skip
        activations, how = model_activations(spec)
        if activations > settings.max_activation_elements:
            problems.append(
                over("training.batch_size", "a batch's activations (batch x every layer's "
                     "width)", activations, settings.max_activation_elements,
                     "SWEEPSTACK_MAX_ACTIVATION_ELEMENTS", how)
            )  # fmt: skip
        return problems


def _mlp_parameters(features: int, widths: list[int], outputs: int, batch_norm: bool) -> int:
    sizes = [features, *widths, outputs]
    linear = sum((a + 1) * b for a, b in itertools.pairwise(sizes))
    return linear + (2 * sum(widths) if batch_norm else 0)


def model_parameters(spec: SweepSpec) -> tuple[int, str]:
    """The largest parameter count the spec allows, estimated from its widest and deepest
    model and its data's features and classes, and how it was reached (for the problem)."""
    _, features, outputs = data_shape(spec)
    layers = top(spec, "model.hidden_layers")
    batch_norm = any(v is True for v in candidates(spec, "model.batch_norm"))
    best, how = 0, ""
    for units in candidates(spec, "model.hidden_units"):
        if isinstance(units, list):
            widths = [int(u) for u in numbers(units)]
            shape = f"hidden_units {units}"
        elif isinstance(units, int) and not isinstance(units, bool):
            widths = [units] * layers
            shape = f"hidden_layers {layers} x hidden_units {units}"
        else:
            continue
        count = _mlp_parameters(features, widths, outputs, batch_norm)
        if count > best:
            best, how = count, f"{shape}, {features} features, {outputs} outputs"
    return best, how


def model_activations(spec: SweepSpec) -> tuple[int, str]:
    """The most elements one batch holds at once through the widest and deepest model the
    spec allows (batch x the features, every hidden layer's units and the outputs), and how."""
    _, features, outputs = data_shape(spec)
    layers = top(spec, "model.hidden_layers")
    batch = top(spec, "training.batch_size")
    best, how = 0, ""
    for units in candidates(spec, "model.hidden_units"):
        if isinstance(units, list):
            widths = sum(int(u) for u in numbers(units))
        elif isinstance(units, int) and not isinstance(units, bool):
            widths = units * layers
        else:
            continue
        count = batch * (features + widths + outputs)
        if count > best:
            best, how = count, f"batch {batch:,} x ({features:,} + {widths:,} + {outputs:,})"
    return best, how


def _check_conditions(space: dict[str, Dimension], problems: list[Problem]) -> None:
    for path, dim in space.items():
        for target, accepted in dim.when.items():
            adapter = field_adapter(target)
            if adapter is None:
                rule = "no such field"
                parent = path.rpartition(".")[0]
                if target.rpartition(".")[0] == parent and "." in parent:
                    # A bare key names a field of the leaf's own sub-section.
                    rule += f" in {parent}; name a field elsewhere by its full path"
                problems.append(Problem(f"{path}.when.{target}", rule))
                continue
            if target == path:
                problems.append(Problem(f"{path}.when", "a dimension cannot depend on itself"))
            for value in accepted:
                try:
                    adapter.validate_python(value)
                except ValidationError as exc:
                    problems.extend(problems_from(exc, f"{path}.when.{target}", value))


def _check_objective(
    spec_space: dict[str, Dimension],
    objective: Objective,
    problems: list[Problem],
    at: str = "objective.metric",
) -> None:
    tasks: set[str] = set()
    names = spec_space.get("dataset.name")
    task = spec_space.get("dataset.task")
    task_values = task.values() if task is not None and task.finite else ["auto"]
    for t in task_values:
        if t != "auto":
            tasks.add(t)
        elif names is not None and names.finite:
            for n in names.values():
                tasks.add("regression" if n in REGRESSION_DATASETS else "classification")
    if objective.metric == "val_accuracy" and "regression" in tasks:
        problems.append(
            Problem(
                at,
                "val_accuracy needs a classification "
                "dataset, but the sweep includes a regression one",
            )
        )
    if objective.metric == "val_rmse" and "classification" in tasks:
        problems.append(
            Problem(
                at,
                "val_rmse needs a regression dataset, but the sweep includes a classification one",
            )
        )


def load_mlp_spec(data: dict[str, Any]) -> SweepSpec:
    """Validate a parsed document of the built-in network (`core.spec.sweep.load_spec`)."""
    # Checked first: these values would break the rules below (math on NaN) or the store.
    if bad := value_problems(data):
        raise SpecError(bad)
    problems: list[Problem] = []
    meta: dict[str, Any] = {}
    space: dict[str, Dimension] = {}
    for key, raw in data.items():
        if key in SECTIONS:
            space.update(parse_section(key, raw, problems))
        elif key in _META:
            meta[key] = raw
        else:
            known = ["name", "description", *SECTIONS, *_META[2:]]
            problems.append(Problem(str(key), unknown_key(key, known)))
    if "dataset" not in data:
        problems.append(Problem("dataset", "is required"))

    parts: dict[str, Any] = {}
    parts.update(goal_parts(meta, Objective, OBJECTIVE_METRICS, problems))
    models = (
        ("search", Search),
        ("pruning", Pruning),
        ("limits", Limits),
        ("artifacts", Artifacts),
    )
    deprecated = deprecated_option_problems(meta.get("search"))
    problems.extend(deprecated)
    for key, model in models:
        if key == "search" and deprecated:
            continue  # their rule is clearer than pydantic's "unknown key"
        if key in meta:
            try:
                parts[key] = model.model_validate(meta[key])
            except ValidationError as exc:
                problems.extend(name_known_keys(problems_from(exc, key, meta[key]), key, model))
    for key in ("name", "description"):
        if key in meta:
            parts[key] = meta[key]
    if "name" not in meta:
        problems.append(Problem("name", "is required"))
    _check_conditions(space, problems)

    if "search" in parts or "search" not in meta:
        problems.extend(check_search(space, parts.get("search", Search()), parts.get("pruning")))
    objectives = parts.get("objectives") or (parts.get("objective", Objective()),)
    for i, objective in enumerate(objectives):
        at = f"objectives[{i}].metric" if "objectives" in parts else "objective.metric"
        _check_objective(space, objective, problems, at)
    problems.extend(goal_problems(objectives, parts.get("pruning")))
    problems.extend(multi_objective_problems(objectives, parts.get("search", Search()).algorithm))

    if problems:
        raise SpecError(problems)
    try:
        return SweepSpec(space=space, document=data, **parts)
    except ValidationError as exc:
        raise SpecError(problems_from(exc, "")) from exc
