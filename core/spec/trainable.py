"""Specs whose trials run a user's own training function: ``trainable: NAME``.

A spec that names ``trainable`` does not describe a network: it names an entry point of the
``sweepstack.trainables`` group of a package installed on the workers (and, for its metadata
only, wherever specs are validated), and gives the function's settings under ``params``.
A spec never carries code: only installed functions run, and `trainable_problems` refuses a
name that is not installed, listing those that are. It reads the packages' metadata
(``importlib.metadata.entry_points``) and never imports them; only a worker does
(`workers.trainable`).

``params`` is free-form: any mapping whose leaves are values or dimensions, in every form a
built-in section takes (``[16, 32]``, ``{loguniform: [1e-4, 1e-1]}``, ``{int: [1, 4]}``, a
``when:`` condition naming another parameter), nested mappings being groups of parameters
(``params.conv.channels``). A parameter's value is never a mapping. Of the built-in
sections, these still apply, and keep their rules:

- ``dataset`` (optional): the function can ask for it loaded, split and standardised;
- ``training.epochs`` (how many epochs the function is asked to train; pruners count
  steps in epochs) and ``training.seed`` (the trial's seed; drawn per trial when left out);
- ``execution.device`` and ``execution.time_limit``;
- ``objective`` (any metric the function reports; direction as usual), ``search``,
  ``pruning`` (it judges the objective's metric unless it names a built-in one), ``limits``.

Every other built-in setting (``model``, ``training.lr``, ``execution.fuse`` ...) describes the
built-in network and is refused, naming ``params`` as the place for the function's own.

`TrainableKind` is this kind of trial (`core.spec.kind`): its trials train alone, through
`workers.trainable`, and their records show no parameter count. Its function may declare
what its trials cost (`core.spec.trainable_costs`), which the server's ceilings then hold.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from core.errors import Problem, SpecError
from core.spec.artifacts import Artifacts
from core.spec.config import DatasetConfig, ExecutionConfig, TrainingConfig
from core.spec.documents import value_problems
from core.spec.kind import TrialKind
from core.spec.objectives import goal_parts, goal_problems, multi_objective_problems
from core.spec.problems import problems_from
from core.spec.search import Pruning, Search, check_search
from core.spec.sections import parse_section
from core.spec.space import DIMENSION_KEYS, Categorical, Dimension, Fixed, dedupe, parse_dimension
from core.spec.spec import Limits, Objective, SweepSpec

if TYPE_CHECKING:
    from core.settings import Settings

#: The entry-point group a package declares its training functions in.
TRAINABLE_GROUP = "sweepstack.trainables"
#: What an entry point's name may look like in a spec.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$"
#: A parameter's key, and a metric's name: an identifier.
KEY_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
_KEY = re.compile(KEY_PATTERN)
#: The built-in settings a trainable spec may give, by section.
APPLIES = {"training": ("epochs", "seed"), "execution": ("device", "time_limit")}
_KNOWN = (
    "name",
    "description",
    "trainable",
    "params",
    "dataset",
    "training",
    "execution",
    "objective",
    "objectives",
    "constraints",
    "search",
    "pruning",
    "limits",
    "artifacts",
)


def _metric_name(value: str) -> str:
    if not _KEY.match(value):
        raise ValueError(
            "must be a metric name the function reports: an identifier (letters, digits "
            "and _, not starting with a digit)"
        )
    return value


class TrainableObjective(Objective):
    """The objective of a trainable spec: any metric the function reports."""

    metric: Annotated[str, AfterValidator(_metric_name)] = "val_loss"  # type: ignore[assignment]


class TrainableSpec(SweepSpec):
    """A validated spec of a training function (`trainable`), its ``params`` in `space`."""

    trainable: Annotated[str, Field(pattern=NAME_PATTERN)]

    def base_config(self) -> dict[str, Any]:
        """The sections this spec has, with every unconditional fixed value, and the name."""
        base = super().base_config()
        kept: dict[str, Any] = {"trainable": self.trainable, "params": base.get("params", {})}
        for section in ("dataset", "training", "execution"):
            if section != "dataset" or section in self.document:
                kept[section] = base.get(section, {})
        return kept


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TrainableTraining(_Section):
    """``training`` of a trainable trial: the epochs asked for and the trial's seed."""

    epochs: Annotated[int, Field(ge=0, le=100_000)] = TrainingConfig.model_fields["epochs"].default
    seed: Annotated[int, Field(ge=0)] | None = None


class TrainableExecution(_Section):
    """``execution`` of a trainable trial: where it runs and how long it may take."""

    device: str = ExecutionConfig.model_fields["device"].default
    time_limit: float = ExecutionConfig.model_fields["time_limit"].default


class TrainableConfig(_Section):
    """The resolved config of one trainable trial, as the store keeps it and a worker runs it."""

    trainable: Annotated[str, Field(pattern=NAME_PATTERN)]
    params: dict[str, Any] = {}
    dataset: DatasetConfig | None = None
    training: TrainableTraining = TrainableTraining()
    execution: TrainableExecution = TrainableExecution()


class TrainableKind(TrialKind):
    """A user's installed training function: a document that names ``trainable``.

    It trains alone, in its own message (its model is the function's: nothing to stack);
    the scheduler prices it as the built-in network of its epochs and data, the one guess
    it has without running the function; its record shows no parameter count.
    """

    name = "trainable"
    trainer = "trainable"
    config_model = TrainableConfig
    counts_parameters = False
    parameter_roots = ("params",)

    def claims(self, document: Mapping[str, Any]) -> bool:
        """Whether the document or config names a training function."""
        return "trainable" in document

    def load_spec(self, document: dict[str, Any], path: Path | None = None) -> SweepSpec:
        """`load_trainable_spec`; a trainable spec names no files."""
        return load_trainable_spec(document)

    def host_problems(self, spec: SweepSpec) -> list[Problem]:
        """`trainable_problems`: the function must be installed where specs are accepted."""
        return trainable_problems(spec)

    def limit_problems(self, spec: SweepSpec, settings: Settings) -> list[Problem]:
        """What the function declares its trials cost, at the worst of the spec's ``params``,
        against ``SWEEPSTACK_MAX_MODEL_PARAMETERS`` and ``SWEEPSTACK_MAX_ACTIVATION_ELEMENTS``
        (`core.spec.trainable_costs`); none for a function that declares none."""
        from core.spec.trainable_costs import cost_problems

        entry = installed_trainables().get(getattr(spec, "trainable", ""))
        if not isinstance(spec, TrainableSpec) or entry is None:
            return []  # not installed: `host_problems` says so
        return cost_problems(spec, entry.module, settings)


def installed_trainables() -> dict[str, metadata.EntryPoint]:
    """The training functions installed here, by name (metadata only: nothing is imported)."""
    return {ep.name: ep for ep in metadata.entry_points(group=TRAINABLE_GROUP)}


def trainable_problems(spec: SweepSpec) -> list[Problem]:
    """The problem with a spec whose `trainable` is not installed here, naming those that are."""
    if not isinstance(spec, TrainableSpec):
        return []
    names = sorted(installed_trainables())
    if spec.trainable in names:
        return []
    have = (
        f"installed: {', '.join(names)}"
        if names
        else f"none is installed: pip install a package that declares {TRAINABLE_GROUP} entry "
        "points"
    )
    rule = f"no training function {spec.trainable!r} in the {TRAINABLE_GROUP} group ({have})"
    return [Problem("trainable", rule)]


def _has_mapping(dim: Dimension) -> bool:
    if isinstance(dim, Fixed):
        return isinstance(dim.value, dict)
    return isinstance(dim, Categorical) and any(isinstance(v, dict) for v in dim.choices)


def _parse_params(raw: Any, path: str, problems: list[Problem]) -> dict[str, Dimension]:
    """The dimensions of ``params`` (or a group in it), by leaf path."""
    if not isinstance(raw, dict):
        problems.append(Problem(path, "must be a mapping of parameter names to values"))
        return {}
    space: dict[str, Dimension] = {}
    for key, leaf in raw.items():
        at = f"{path}.{key}"
        if not isinstance(key, str) or not _KEY.match(key):
            problems.append(
                Problem(
                    at,
                    "a parameter name must be an identifier (letters, "
                    "digits and _, not starting with a digit)",
                )
            )
            continue
        if isinstance(leaf, dict) and not any(k in leaf for k in DIMENSION_KEYS):
            space.update(_parse_params(leaf, at, problems))
            continue
        dim, _ = parse_dimension(leaf, at, problems)
        if _has_mapping(dim):
            problems.append(
                Problem(
                    at,
                    "a parameter's value cannot be a mapping; nest the "
                    "parameters instead (params.group.key)",
                )
            )
            continue
        if isinstance(dim, Categorical):
            dim = dim.model_copy(update={"choices": tuple(dedupe(dim.choices))})
        space[at] = dim
    return space


def _parse_builtin(section: str, raw: Any, problems: list[Problem]) -> dict[str, Dimension]:
    """A built-in section, held to the settings that apply to a trainable (`APPLIES`)."""
    allowed = APPLIES.get(section)
    if allowed is None or not isinstance(raw, dict):
        return parse_section(section, raw, problems)
    kept = {}
    for key, value in raw.items():
        if key in allowed:
            kept[key] = value
        else:
            problems.append(
                Problem(
                    f"{section}.{key}",
                    (
                        f"does not apply to a trainable (of {section}, only "
                        f"{', '.join(allowed)} do); give the function's own settings under params"
                    ),
                )
            )
    return parse_section(section, kept, problems)


def _check_conditions(space: dict[str, Dimension], problems: list[Problem]) -> None:
    for path, dim in space.items():
        for target in dim.when:
            if target == path:
                problems.append(Problem(f"{path}.when", "a dimension cannot depend on itself"))
            elif target not in space:
                problems.append(
                    Problem(
                        f"{path}.when.{target}",
                        "no such parameter in this spec; name one by its full path (params.key)",
                    )
                )


def _meta(key: str, raw: Any, model: type[BaseModel], problems: list[Problem]) -> Any:
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        problems.extend(problems_from(exc, key, raw))
        return None


def load_trainable_spec(data: dict[str, Any]) -> TrainableSpec:
    """Validate a parsed spec document that names ``trainable`` (`TrainableKind.load_spec`)."""
    if bad := value_problems(data):
        raise SpecError(bad)
    problems: list[Problem] = []
    space: dict[str, Dimension] = {}
    name = data.get("trainable")
    if not isinstance(name, str) or not re.match(NAME_PATTERN, name):
        problems.append(
            Problem(
                "trainable",
                f"must be the name of an installed training "
                f"function ({TRAINABLE_GROUP} entry point), got {name!r}",
            )
        )
    for key, raw in data.items():
        if key == "model":
            problems.append(
                Problem(
                    "model",
                    "does not apply to a trainable: the function "
                    "builds its own model; give its settings under params",
                )
            )
        elif key == "params":
            space.update(_parse_params(raw, "params", problems))
        elif key in ("dataset", "training", "execution"):
            space.update(_parse_builtin(key, raw, problems))
        elif key not in _KNOWN:
            problems.append(Problem(str(key), f"unknown key (known: {', '.join(_KNOWN)})"))
    if "name" not in data:
        problems.append(Problem("name", "is required"))
    parts: dict[str, Any] = {k: data[k] for k in ("name", "description") if k in data}
    goals = goal_parts(data, TrainableObjective, None, problems)
    objective = goals.get("objective", TrainableObjective())
    pruning_raw = data.get("pruning", {})
    # Judging the objective's own metric is what leaving it out means.
    if (
        isinstance(pruning_raw, dict)
        and objective
        and pruning_raw.get("metric") == objective.metric
    ):
        pruning_raw = {k: v for k, v in pruning_raw.items() if k != "metric"}
    models = (
        ("search", Search, data.get("search", {})),
        ("pruning", Pruning, pruning_raw),
        ("limits", Limits, data.get("limits", {})),
        ("artifacts", Artifacts, data.get("artifacts", {})),
    )
    for key, model, raw in models:
        value = _meta(key, raw, model, problems)
        if value is not None and key in data:
            parts[key] = value
    parts.update(goals)
    _check_conditions(space, problems)
    if "search" in parts or "search" not in data:
        problems.extend(check_search(space, parts.get("search", Search()), parts.get("pruning")))
    objectives = goals.get("objectives") or (objective,)
    problems.extend(goal_problems(objectives, parts.get("pruning")))
    problems.extend(multi_objective_problems(objectives, parts.get("search", Search()).algorithm))
    if problems:
        raise SpecError(problems)
    try:
        return TrainableSpec(space=space, document=data, trainable=name, **parts)
    except ValidationError as exc:
        raise SpecError(problems_from(exc, "")) from exc
