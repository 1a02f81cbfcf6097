"""The sweep spec: a YAML or JSON document describing a search space over trial configs.

``load_spec`` parses and validates a document into a `SweepSpec`, or raises `SpecError`
listing every problem with its dotted path and the rule it broke, e.g.
``model.hidden_units[2]: must be > 0, got -5``. Nothing is expanded here; see
``scheduler.expand``.

A section may hold a sub-section (``execution.parallel``, see `core.spec.fields`): written as a
mapping of its own keys, whose leaves are parameters like any other at their full path
(``execution.parallel.tau: [1, 5, 20]`` is written ``execution: {parallel: {tau: [1, 5, 20]}}``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError

from core.errors import Problem, SpecError
from core.spec.config import REGRESSION_DATASETS, SECTIONS
from core.spec.documents import SpecLoader, number_error, value_problems
from core.spec.fields import field_adapter, section_model, set_in, sub_model
from core.spec.search import Pruning, Search, check_search, deprecated_option_problems
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
from core.spec.suggest import name_known_keys, unknown_key

METRICS = ("val_accuracy", "val_loss", "val_rmse", "train_loss")
_DIRECTION_ALIASES = {"min": "minimize", "max": "maximize"}
DEFAULT_MAX_TRIALS = 100_000
HARD_MAX_TRIALS = 1_000_000


def _direction(value: Any) -> Any:
    return _DIRECTION_ALIASES.get(value, value) if isinstance(value, str) else value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Objective(_Strict):
    """Which metric ranks trials, and whether lower or higher is better."""

    metric: Literal[METRICS] = "val_loss"  # type: ignore[valid-type]
    direction: Annotated[Literal["minimize", "maximize"], BeforeValidator(_direction)] = "minimize"


class Limits(_Strict):
    """Guards against accidental giant sweeps."""

    max_trials: Annotated[int, Field(gt=0, le=HARD_MAX_TRIALS)] = DEFAULT_MAX_TRIALS


class SweepSpec(_Strict):
    """A validated sweep spec. `space` maps every given leaf path to its dimension."""

    name: Annotated[str, Field(min_length=1, max_length=200)]
    description: str = ""
    space: dict[str, Dimension]
    objective: Objective = Objective()
    search: Search = Search()
    pruning: Pruning = Pruning()
    limits: Limits = Limits()
    document: dict[str, Any] = {}

    @property
    def dimensions(self) -> list[Dimension]:
        """The leaves that vary from trial to trial, in the order the spec gives them."""
        return [d for d in self.space.values() if d.varies]

    def base_config(self) -> dict[str, dict[str, Any]]:
        """Defaults overlaid with every unconditional fixed value, as nested dicts
        (``execution.parallel.tau`` under ``{"execution": {"parallel": {...}}}``)."""
        base: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
        for path, dim in self.space.items():
            if isinstance(dim, Fixed) and not dim.when:
                set_in(base, path, dim.value)
        return base

    def resolve(self, params: dict[str, Any], base: dict | None = None) -> dict[str, Any]:
        """The full config of the trial with these params: fixed values, then params."""
        base = base if base is not None else self.base_config()
        # The mappings are copied: params replace values, they never mutate `base`.
        config = _copy_tree(base)
        for path, value in params.items():
            set_in(config, path, value)
        return config

    def seeded_config(
        self, params: dict[str, Any], seed: int, base: dict | None = None
    ) -> dict[str, Any]:
        """The full config of the trial with these params, with its own `seed` as
        ``training.seed``: what the store keeps and a worker trains."""
        config = self.resolve(params, base)
        config["training"]["seed"] = seed
        return config

    def check_trials(self, points: list[dict[str, Any]]) -> None:
        """Raise `SpecError` if some of these trials' params cannot train (a Caffe spec
        builds each distinct net, `core.spec.caffe.spec`); the built-in rules need nothing more."""

    def config_model(self, section: str) -> type[BaseModel] | None:
        """The model that validates a section of this spec's trials (a rule across its
        fields, `scheduler.expand`); a Caffe spec has its own ``dataset``."""
        return section_model(section)


def _copy_tree(tree: dict[str, Any]) -> dict[str, Any]:
    return {k: _copy_tree(v) if isinstance(v, dict) else v for k, v in tree.items()}


def _fmt(value: Any) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, str):
        return repr(value)
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


_RULES = {
    "greater_than": "must be > {gt}",
    "greater_than_equal": "must be >= {ge}",
    "less_than": "must be < {lt}",
    "less_than_equal": "must be <= {le}",
    "literal_error": "must be one of {expected}",
    "missing": "is required",
    "extra_forbidden": "unknown key",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "string_too_short": "must not be empty",
    "string_too_long": "must be at most {max_length} characters",
    "too_short": "must have at least {min_length} items",
    "finite_number": "must be a finite number",
}


def problems_from(error: ValidationError, prefix: str, value: Any = None) -> list[Problem]:
    """Turn pydantic's errors into Problems: dotted path, rule, and the offending value."""
    errors = error.errors()
    # For a field typed `int | list[int]`, keep only the branch that matches the input's shape.
    branches = {
        e["loc"][0]
        for e in errors
        if e["loc"] and isinstance(e["loc"][0], str) and ("[" in e["loc"][0] or "-" in e["loc"][0])
    }
    if len(branches) > 1:
        want_list = isinstance(value, list)
        errors = [e for e in errors if str(e["loc"][0]).startswith("list[") == want_list]
        errors = [{**e, "loc": e["loc"][1:]} for e in errors]
    out = []
    for e in errors:
        path = prefix
        for part in e["loc"]:
            if isinstance(part, int):
                path += f"[{part}]"
            elif isinstance(part, str) and ("[" in part or "-" in part):
                continue  # a union branch tag, not a location
            else:
                path = f"{path}.{part}" if path else str(part)
        template = _RULES.get(e["type"])
        if e["type"] == "value_error":
            rule = str(e["ctx"]["error"]) if e.get("ctx") else e["msg"]
        elif template:
            ctx = {
                k: _fmt(v) if isinstance(v, float) else v for k, v in (e.get("ctx") or {}).items()
            }
            rule = template.format(**ctx)
        else:
            rule = e["msg"][0].lower() + e["msg"][1:]
        model_level = e["type"] == "value_error" and not e["loc"]
        if e["type"] not in ("missing", "extra_forbidden") and not model_level:
            rule += f", got {_fmt(e['input'])}"
        out.append(Problem(path, rule))
    return out


def _parse_document(source: str | Path | dict[str, Any], filename: str) -> dict[str, Any]:
    if isinstance(source, dict):
        return source
    if isinstance(source, Path):
        filename = str(source)
        try:
            source = source.read_text(encoding="utf-8")
        except OSError as exc:
            raise SpecError([Problem("", f"{filename}: cannot read: {exc.strerror}")]) from exc
    try:
        data = yaml.load(source, Loader=SpecLoader)  # a SafeLoader subclass
    except ValueError as exc:  # an integer past Python's 4,300-digit conversion limit
        raise SpecError([Problem("", f"{filename}: {number_error(exc)}")]) from exc
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{filename}:{mark.line + 1}:{mark.column + 1}" if mark else filename
        what = exc.problem or exc.context or "invalid syntax"
        raise SpecError([Problem("", f"{where}: YAML syntax error: {what}")]) from exc
    except yaml.YAMLError as exc:
        raise SpecError([Problem("", f"{filename}: YAML error: {exc}")]) from exc
    if not isinstance(data, dict):
        raise SpecError([Problem("", f"{filename}: a spec must be a mapping, got {_fmt(data)}")])
    return data


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
        problems.append(Problem(section, f"must be a mapping, got {_fmt(raw)}"))
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
                rule = f"is a section: give its keys ({known}) as a mapping, got {_fmt(leaf)}"
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
    spec_space: dict[str, Dimension], objective: Objective, problems: list[Problem]
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
                "objective.metric",
                "val_accuracy needs a classification "
                "dataset, but the sweep includes a regression one",
            )
        )
    if objective.metric == "val_rmse" and "classification" in tasks:
        problems.append(
            Problem(
                "objective.metric",
                "val_rmse needs a regression dataset, but the sweep includes a classification one",
            )
        )


def load_spec(source: str | Path | dict[str, Any], filename: str = "<spec>") -> SweepSpec:
    """Parse and validate a sweep spec from YAML/JSON text, a file path, or a dict.

    A spec that names ``trainable`` runs a user's training function: its own rules are in
    `core.spec.trainable`, and it gives a `TrainableSpec`. One with a ``caffe`` section
    trains a Caffe net (`core.spec.caffe.spec`, a `CaffeSpec`); read from a file, its ``net`` and
    ``solver`` paths are read (relative to the file) into the texts it stores.
    """
    data = _parse_document(source, filename)
    if "trainable" in data:
        from core.spec.trainable import load_trainable_spec  # it builds on this module

        return load_trainable_spec(data)
    if "caffe" in data:
        from core.spec.caffe.files import read_caffe_files
        from core.spec.caffe.spec import load_caffe_spec  # it builds on this module

        if isinstance(source, Path):
            data = read_caffe_files(data, source)
        return load_caffe_spec(data)
    # Checked first: these values would break the rules below (math on NaN) or the store.
    if bad := value_problems(data):
        raise SpecError(bad)
    problems: list[Problem] = []
    meta: dict[str, Any] = {}
    space: dict[str, Dimension] = {}
    for key, raw in data.items():
        if key in SECTIONS:
            space.update(parse_section(key, raw, problems))
        elif key in ("name", "description", "objective", "search", "pruning", "limits"):
            meta[key] = raw
        else:
            known = ["name", "description", *SECTIONS, "objective", "search", "pruning", "limits"]
            problems.append(Problem(str(key), unknown_key(key, known)))
    if "dataset" not in data:
        problems.append(Problem("dataset", "is required"))

    parts: dict[str, Any] = {}
    models = (
        ("objective", Objective),
        ("search", Search),
        ("pruning", Pruning),
        ("limits", Limits),
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
    _check_objective(space, parts.get("objective", Objective()), problems)

    if problems:
        raise SpecError(problems)
    try:
        return SweepSpec(space=space, document=data, **parts)
    except ValidationError as exc:
        raise SpecError(problems_from(exc, "")) from exc


def load_spec_file(path: str | Path) -> SweepSpec:
    """Read a spec from a .yaml, .yml or .json file."""
    return load_spec(Path(path))
