"""`SweepSpec`: a validated sweep spec, what every kind's loader returns (`core.spec.kinds`).

A spec maps each leaf path it gives to its dimension (`space`), and says what ranks its
trials (`Objective`; several, and the constraints a trial must meet:
`core.spec.objectives`), how they are searched and pruned (`core.spec.search`) and how many
it may have (`Limits`). The built-in network's spec is a `SweepSpec` itself; a Caffe net's
(`core.spec.caffe.spec.CaffeSpec`) and a training function's
(`core.spec.trainable.TrainableSpec`) extend it with what their trials are made of, and
override how a trial's config is resolved from its params.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from core.spec.artifacts import Artifacts
from core.spec.config import SECTIONS
from core.spec.fields import leaf_defaults, section_model, set_in
from core.spec.objectives import COST_METRICS, Constraint
from core.spec.search import Pruning, Search
from core.spec.space import Dimension, Fixed, IntRange

METRICS = ("val_accuracy", "val_loss", "val_rmse", "train_loss")
#: What an objective or a constraint of a built-in or Caffe spec may name: the per-epoch
#: metrics and the costs the record knows per trial.
OBJECTIVE_METRICS = (*METRICS, *COST_METRICS)
_DIRECTION_ALIASES = {"min": "minimize", "max": "maximize"}
DEFAULT_MAX_TRIALS = 100_000
HARD_MAX_TRIALS = 1_000_000


def _direction(value: Any) -> Any:
    return _DIRECTION_ALIASES.get(value, value) if isinstance(value, str) else value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Objective(_Strict):
    """Which metric ranks trials, and whether lower or higher is better."""

    metric: Literal[OBJECTIVE_METRICS] = "val_loss"  # type: ignore[valid-type]
    direction: Annotated[Literal["minimize", "maximize"], BeforeValidator(_direction)] = "minimize"


class Limits(_Strict):
    """Guards against accidental giant sweeps."""

    max_trials: Annotated[int, Field(gt=0, le=HARD_MAX_TRIALS)] = DEFAULT_MAX_TRIALS


class SweepSpec(_Strict):
    """A validated sweep spec. `space` maps every given leaf path to its dimension.

    `objectives` are what the sweep searches for, in the spec's order; `objective` is the
    first of them, the primary one, which every single-number ranking uses
    (`core.spec.objectives`). Given only one of the two, the other follows from it."""

    name: Annotated[str, Field(min_length=1, max_length=200)]
    description: str = ""
    space: dict[str, Dimension]
    objective: Objective = Objective()
    objectives: tuple[Objective, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    search: Search = Search()
    pruning: Pruning = Pruning()
    limits: Limits = Limits()
    artifacts: Artifacts = Artifacts()
    #: The sweep's tier in the fair share of workers (`core.shares`): ``high`` is served
    #: first (admins only, or a user an admin allowed), ``low`` last.
    priority: Literal["low", "normal", "high"] = "normal"
    document: dict[str, Any] = {}

    @model_validator(mode="before")
    @classmethod
    def _primary(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            if data.get("objectives"):
                data["objective"] = next(iter(data["objectives"]))
            else:
                data["objectives"] = (data["objective"],) if "objective" in data else ()
        return data

    @model_validator(mode="after")
    def _objectives_given(self) -> SweepSpec:
        if not self.objectives:
            object.__setattr__(self, "objectives", (self.objective,))
        return self

    @property
    def multi_objective(self) -> bool:
        """Whether the sweep searches for more than one objective."""
        return len(self.objectives) > 1

    @property
    def directions(self) -> list[str]:
        """Each objective's direction, in order (an Optuna study's ``directions``)."""
        return [o.direction for o in self.objectives]

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

    def planned_epochs(self) -> int:
        """The most epochs any trial of the spec trains: a pruner's largest resource (a
        Caffe spec counts its solver's evaluations instead, `core.spec.caffe.spec`)."""
        dim = self.space.get("training.epochs")
        if dim is None:
            return int(leaf_defaults()["training.epochs"])
        if isinstance(dim, IntRange):
            return dim.high
        return int(max(dim.values()))


def _copy_tree(tree: dict[str, Any]) -> dict[str, Any]:
    return {k: _copy_tree(v) if isinstance(v, dict) else v for k, v in tree.items()}
