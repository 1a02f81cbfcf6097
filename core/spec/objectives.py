"""A sweep's goals: the objectives it searches for and the constraints a trial must meet.

``objectives:`` is a list of ``{metric, direction}`` (at most `MAX_OBJECTIVES`, each metric
once); the single ``objective:`` of earlier specs keeps working and means a list of one.
Giving both is refused, naming both fields. A metric is

- a per-epoch one (``val_accuracy``, ``val_loss``, ``val_rmse``, ``train_loss``): a trial's
  value is its best epoch's in the objective's direction (a pruned trial's: its last
  epoch's), as the single objective always was;
- a cost the record knows per trial (`COST_METRICS`): ``param_count``, ``train_seconds``,
  ``macs`` (multiply-adds of one sample's forward pass, `core.spec.kind.TrialKind.macs`);
  left out, its direction is ``minimize``;
- for a training function (`core.spec.trainable`), any metric the function reports.

**The primary objective** is the first one. Everything that ranks trials by one number
(the top trials, the best so far, a pruner's metric when ``pruning.metric`` is left out,
the kept models of ``artifacts.top_k``, the dashboard's best and history) ranks them by
it; the sweep document keeps it as ``objective`` and each trial its value as
``objective``, as before. Every objective's value is kept per trial as ``objectives``, in
the spec's order (`core.store.records`), and the front is computed over them
(`core.analysis.pareto`).

``constraints:`` is a list of texts ``METRIC OP NUMBER`` with OP one of ``<=``, ``<``,
``>=``, ``>`` (``"param_count <= 100000"``), each metric one that an objective may name.
A finished trial is ``feasible`` when every constraint holds on its values; one whose
constraint's metric was never measured is infeasible. Each constraint's value is kept as
Optuna keeps it (`Constraint.violation`: at most 0 when it holds), so an adaptive search
is told them (`scheduler.search_session`) and an infeasible trial is never on the front.

Pure data and rules; no Optuna.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from core.errors import Problem
from core.spec.problems import problems_from, show_value
from core.spec.search import METRIC_DIRECTIONS

#: What a trial's record knows of its cost, and which way is better for each.
COST_METRICS = {"param_count": "minimize", "train_seconds": "minimize", "macs": "minimize"}
#: The most objectives a sweep may search for at once.
MAX_OBJECTIVES = 4
#: A constraint's operators, longest first (so ``<=`` is not read as ``<``).
OPERATORS = ("<=", ">=", "<", ">")
_CONSTRAINT = re.compile(
    r"^\s*(?P<metric>[A-Za-z_][A-Za-z0-9_]*)\s*(?P<op><=|>=|<|>)\s*(?P<bound>\S+)\s*$"
)
#: The violation of a strict constraint met with equality: the least one above 0.
_STRICT_EQUAL = 1e-12


@dataclass(frozen=True)
class Constraint:
    """One constraint, ``metric op bound``, as the spec gives it (`text`)."""

    metric: str
    op: str
    bound: float

    @property
    def text(self) -> str:
        return f"{self.metric} {self.op} {show_value(self.bound)}"

    def holds(self, value: float | None) -> bool:
        """Whether `value` meets the constraint (an unmeasured value does not)."""
        return value is not None and self.violation(value) <= 0

    def violation(self, value: float) -> float:
        """By how much `value` breaks the constraint, as Optuna takes constraint values: at
        most 0 when it holds, else how far past the bound it is (a strict constraint met with
        equality breaks it by `_STRICT_EQUAL`)."""
        excess = value - self.bound if self.op in ("<=", "<") else self.bound - value
        if excess == 0 and self.op in ("<", ">"):
            return _STRICT_EQUAL
        return float(excess)

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "op": self.op, "bound": self.bound, "text": self.text}


def parse_constraint(text: Any, path: str, metrics: Collection[str] | None) -> Constraint | Problem:
    """A constraint read strictly from its text, or the `Problem` naming `path` and the rule.
    `metrics`: the metrics it may name (None: any identifier, for a training function)."""
    rule = 'must read METRIC OP NUMBER with OP one of <=, <, >=, > ("param_count <= 100000")'
    if not isinstance(text, str):
        return Problem(path, f"{rule}, got {show_value(text)}")
    match = _CONSTRAINT.match(text)
    if match is None:
        return Problem(path, f"{rule}, got {show_value(text)}")
    metric, op, raw = match["metric"], match["op"], match["bound"]
    try:
        bound = float(raw)
    except ValueError:
        return Problem(path, f"{rule}: the bound must be a number, got {show_value(raw)}")
    if not math.isfinite(bound):
        return Problem(path, f"{rule}: the bound must be a finite number, got {show_value(raw)}")
    if metrics is not None and metric not in metrics:
        return Problem(path, f"unknown metric {metric!r} (known: {', '.join(metrics)})")
    return Constraint(metric, op, bound)


def goal_parts(
    data: Mapping[str, Any],
    objective_model: type[BaseModel],
    metrics: Collection[str] | None,
    problems: list[Problem],
) -> dict[str, Any]:
    """The spec's ``objective``, ``objectives`` and ``constraints`` read from a document,
    as the keyword arguments of its `SweepSpec` (only those given); each problem found goes
    into `problems`, naming its field. `objective_model` validates one objective (its
    metrics are the kind's); `metrics` are what a constraint may name (None: any)."""
    parts: dict[str, Any] = {}
    if "objective" in data and "objectives" in data:
        problems.append(
            Problem("objectives", "give either objective (one) or objectives (a list), not both")
        )
        return parts
    if "objective" in data:
        try:
            parts["objective"] = objective_model.model_validate(data["objective"])
        except ValidationError as exc:
            problems.extend(problems_from(exc, "objective", data["objective"]))
    elif "objectives" in data:
        parts.update(_objectives(data["objectives"], objective_model, problems))
    if "constraints" in data:
        raw = data["constraints"]
        if not isinstance(raw, list):
            problems.append(
                Problem("constraints", f"must be a list of texts, got {show_value(raw)}")
            )
        else:
            found = [parse_constraint(t, f"constraints[{i}]", metrics) for i, t in enumerate(raw)]
            problems.extend(p for p in found if isinstance(p, Problem))
            parts["constraints"] = tuple(c for c in found if isinstance(c, Constraint))
    return parts


def _objectives(
    raw: Any, objective_model: type[BaseModel], problems: list[Problem]
) -> dict[str, Any]:
    if not isinstance(raw, list) or not raw:
        problems.append(
            Problem("objectives", f"must be a list of {{metric, direction}}, got {show_value(raw)}")
        )
        return {}
    if len(raw) > MAX_OBJECTIVES:
        problems.append(
            Problem("objectives", f"at most {MAX_OBJECTIVES} objectives, got {len(raw)}")
        )
        return {}
    found = []
    for i, item in enumerate(raw):
        try:
            found.append(objective_model.model_validate(item))
        except ValidationError as exc:
            problems.extend(problems_from(exc, f"objectives[{i}]", item))
    if len(found) < len(raw):
        return {}
    seen: set[str] = set()
    for i, objective in enumerate(found):
        if objective.metric in seen:
            problems.append(
                Problem(f"objectives[{i}].metric", f"{objective.metric} is already an objective")
            )
        seen.add(objective.metric)
    return {"objective": found[0], "objectives": tuple(found)}


#: The pruners that judge a multi-objective sweep, by Pareto rank (`core.analysis.rank_pruner`).
RANK_PRUNERS = ("median", "percentile", "asha")


def goal_problems(objectives: Sequence[Any], pruning: Any) -> list[Problem]:
    """Rules between the objectives and the ``pruning`` section. One objective: a pruner
    needs a per-epoch metric to judge (a cost objective has none). Several: only the
    Pareto-rank pruners (`RANK_PRUNERS`) judge them, on the objectives themselves (no
    ``pruning.metric``), with ``min_resource`` a number of epochs for ASHA and no
    ``bootstrap_count``. (``train_seconds`` is ranked at a rung by the seconds trained so far,
    which every epoch row carries.)"""
    if pruning is None or not pruning.enabled:
        return []
    if len(objectives) > 1:
        return _rank_problems(objectives, pruning)
    metric = objectives[0].metric if objectives else None
    if pruning.metric is None and metric in COST_METRICS:
        return [
            Problem(
                "pruning.metric",
                f"is required when the objective is {metric}, which no epoch reports",
            )
        ]
    return []


def _rank_problems(objectives: Sequence[Any], pruning: Any) -> list[Problem]:
    n = len(objectives)
    if pruning.algorithm not in RANK_PRUNERS:
        return [
            Problem(
                "pruning.algorithm",
                f"{pruning.algorithm} judges one objective, but the sweep has {n}; a "
                f"multi-objective sweep is pruned by Pareto rank with "
                f"{', '.join(RANK_PRUNERS)} (or algorithm: none)",
            )
        ]
    problems = []
    if pruning.metric is not None:
        problems.append(
            Problem(
                "pruning.metric",
                f"a multi-objective sweep is pruned by the Pareto rank of its {n} "
                "objectives, not by one metric; leave pruning.metric out",
            )
        )
    if pruning.algorithm == "asha" and pruning.min_resource == "auto":
        problems.append(
            Problem(
                "pruning.min_resource",
                "must be a number of epochs for Pareto-rank ASHA (its rungs are fixed up "
                "front), got 'auto'; left out it is 1",
            )
        )
    if pruning.algorithm == "asha" and pruning.bootstrap_count:
        problems.append(
            Problem(
                "pruning.bootstrap_count",
                "is not taken by Pareto-rank ASHA (a rung keeps its best 1/reduction_factor "
                f"from its first trial on), got {pruning.bootstrap_count}",
            )
        )
    return problems


def multi_objective_problems(objectives: Sequence[Any], algorithm: str) -> list[Problem]:
    """Search algorithms that take one objective only (CMA-ES), refused with several."""
    if len(objectives) > 1 and algorithm == "cmaes":
        return [
            Problem(
                "search.algorithm",
                "cmaes searches for one objective, but the sweep has "
                f"{len(objectives)}; use tpe, nsga2, nsga3, gp, qmc, random or grid",
            )
        ]
    return []


def values_of(
    objectives: Sequence[tuple[str, str]], measured: Mapping[str, Any]
) -> list[float | None]:
    """Each objective's value of a finished trial, in the spec's order, from what its
    record measured (`measured`: metric -> value); None where it was not measured."""
    return [_finite(measured.get(metric)) for metric, _direction in objectives]


def feasibility(
    constraints: Sequence[Constraint], measured: Mapping[str, Any]
) -> tuple[list[float | None], bool]:
    """Each constraint's violation (None: its metric was not measured) and whether every one
    holds."""
    values = [_finite(measured.get(c.metric)) for c in constraints]
    out = [None if v is None else c.violation(v) for c, v in zip(constraints, values, strict=True)]
    return out, all(c.holds(v) for c, v in zip(constraints, values, strict=True))


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


@dataclass(frozen=True)
class Goals:
    """A sweep's objectives (``(metric, direction)``, the primary first) and constraints,
    as its stored document keeps them: what a finish and the front read."""

    objectives: tuple[tuple[str, str], ...]
    constraints: tuple[Constraint, ...] = ()

    @classmethod
    def of(cls, sweep: Mapping[str, Any]) -> Goals:
        """The goals of a stored sweep document; one stored before several objectives
        existed has its single ``objective`` and no constraints."""
        stored = sweep.get("objectives") or [sweep.get("objective") or {}]
        objectives = tuple(
            (str(o.get("metric", "val_loss")), str(o.get("direction", "minimize"))) for o in stored
        )
        constraints = tuple(
            Constraint(str(c["metric"]), str(c["op"]), float(c["bound"]))
            for c in sweep.get("constraints") or []
        )
        return cls(objectives, constraints)

    @property
    def measures(self) -> list[tuple[str, str]]:
        """Every metric the objectives and constraints name, each once, in order, with the
        direction its best epoch is taken in (an objective's own; for a constraint's
        metric, the metric's, else minimize): what a worker measures of a trial
        (``result["values"]``)."""
        out = dict(self.objectives)
        for c in self.constraints:
            out.setdefault(c.metric, METRIC_DIRECTIONS.get(c.metric, "minimize"))
        return list(out.items())
