"""Parameter importance with Optuna's own evaluators, for a finished sweep of any algorithm.

`param_importances` builds in-memory studies from the complete trials
(`optuna.trial.create_trial`, one per trial, with a distribution per parameter) and asks
two evaluators how much each parameter explains the objective:

- fANOVA (`optuna.importance.FanovaImportanceEvaluator`): the share of the objective's
  variance each parameter explains alone, from a random forest fitted to the trials;
- PED-ANOVA (`PedAnovaImportanceEvaluator`): how differently each parameter is spread
  among the best trials (the top 10%) than among all, which says what it takes to be good.

Each evaluator gets the distributions it can use (`known`):

- PED-ANOVA, the spec's own, as the scheduler's samplers ask them (`scheduler.samplers.
  param`): a grid list or ``choice`` is categorical (a value that is itself a list by its
  JSON text), ``{int: …}`` an `IntDistribution`, ``{uniform: …}`` and ``{loguniform: …}``
  a `FloatDistribution`. (It bins an ordered parameter's range into equal steps, so a
  numeric grid taken as ordered, a 4-value learning-rate grid, was rated 99.6% of all.)
- fANOVA, numbers as ordered (an `IntDistribution` or `FloatDistribution` over the values
  the trials took; logarithmic when the spec says so or they span two decades): fANOVA
  one-hot encodes a categorical parameter and its marginals enumerate every combination
  of the columns the trees split on, so a 50-value width grid as categorical took 275 s
  (depth 8, 1,000 trials) against 0.6 s as one ordered column. A categorical parameter of
  more than `MAX_ONE_HOT` values is given as its category's position, for the same reason.

A parameter the spec does not name (a spec stored under older rules) is categorical, or
ordered when it is numeric with more than `MAX_ONE_HOT` values. A trial whose value is
outside its parameter's distribution is left out; conditional parameters absent from some
trials drop out (Optuna evaluates the search space every trial shares).

Cost: a sweep of more than `MAX_TRIALS` complete trials is sampled (seeded, so the answer
is the same every time): building a study costs ~0.5 ms a trial (Optuna's in-memory
storage copies each one). The forest is `FANOVA_TREES` trees of depth `FANOVA_DEPTH`;
Optuna's default of 64 trees of depth 64 took ~5 s on 360 trials on a 2-core machine, this
~0.5 s, with the same ranking (`bench/bench_analysis.py` compares them).
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.importance import (
    FanovaImportanceEvaluator,
    PedAnovaImportanceEvaluator,
    get_param_importances,
)

from core.analysis.rows import dimensions
from core.spec.space import Categorical, Dimension, Fixed, Uniform
from scheduler import samplers

#: Complete trials beyond this are sampled for the evaluators.
MAX_TRIALS = 1000
#: fANOVA takes a categorical parameter of more values than this as ordered.
MAX_ONE_HOT = 12
FANOVA_TREES = 16
FANOVA_DEPTH = 6
SEED = 0


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _label(value: Any) -> Any:
    """A value as a category: plain scalars as they are, anything else by its JSON text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return json.dumps(value, sort_keys=True)


@dataclass(frozen=True)
class Known:
    """A parameter's distribution, and how a value becomes a point of it: its JSON text
    (`json_labels`), then its position among the categories (`codes`), if given."""

    distribution: BaseDistribution
    json_labels: bool = False
    codes: dict[Any, int] = field(default_factory=dict)

    def encode(self, value: Any) -> Any:
        label = _label(value) if self.json_labels else value
        return self.codes[label] if self.codes else label


def _ordered(dim: Dimension | None, values: Sequence[Any]) -> Known:
    low, high = min(values), max(values)
    log = (isinstance(dim, Uniform) and dim.log) or (low > 0 and high / low >= 100)
    if all(isinstance(v, int) for v in values):
        return Known(IntDistribution(int(low), int(high), log=log))
    return Known(FloatDistribution(float(low), float(high), log=log))


def _categories(dim: Dimension | None, labels: set[Any]) -> list[Any]:
    """The categories in the spec's order (then any the spec does not list)."""
    listed = [_label(v) for v in dim.choices] if isinstance(dim, Categorical) else []
    order = [v for v in listed if v in labels]
    return order + sorted(labels - set(order), key=repr)


def known(dim: Dimension | None, values: Sequence[Any], evaluator: str) -> Known | None:
    """The distribution of one parameter for `evaluator` (``fanova`` or ``ped_anova``; see
    the module doc); None when its trials took fewer than two values."""
    labels = {_label(v) for v in values}
    if len(labels) < 2:
        return None
    numeric = all(_is_number(v) for v in values)
    if evaluator == "ped_anova" and dim is not None and not isinstance(dim, Fixed):
        asked = samplers.param(dim)
        return Known(asked.distribution, bool(asked.by_label))
    if numeric and (evaluator == "fanova" or len(labels) > MAX_ONE_HOT):
        return _ordered(dim, values)
    plain = all(v is None or isinstance(v, bool | int | float | str) for v in values)
    categories = _categories(dim, labels)
    if evaluator == "fanova" and len(categories) > MAX_ONE_HOT:
        codes = {label: i for i, label in enumerate(categories)}
        return Known(IntDistribution(0, len(categories) - 1), not plain, codes)
    return Known(CategoricalDistribution(categories), json_labels=not plain)


def _sample(n: int) -> np.ndarray:
    if n <= MAX_TRIALS:
        return np.arange(n)
    return np.sort(np.random.default_rng(SEED).choice(n, MAX_TRIALS, replace=False))


def study_of(
    spec_document: Mapping[str, Any],
    params: Sequence[Mapping[str, Any]],
    values: Sequence[float],
    direction: str,
    evaluator: str = "ped_anova",
) -> optuna.Study:
    """An in-memory study holding one complete trial per (params, value), with the
    distributions `evaluator` is given."""
    dims = dimensions(spec_document)
    seen: dict[str, list[Any]] = {}
    for flat in params:
        for path, value in flat.items():
            seen.setdefault(path, []).append(value)
    dists = {p: d for p, vs in seen.items() if (d := known(dims.get(p), vs, evaluator))}
    trials = []
    for flat, value in zip(params, values, strict=True):
        names = [p for p in flat if p in dists]
        try:
            trials.append(optuna.trial.create_trial(
                params={p: dists[p].encode(flat[p]) for p in names},
                distributions={p: dists[p].distribution for p in names},
                value=float(value),
            ))  # fmt: skip
        except (ValueError, KeyError):  # a value outside the distribution: not this trial
            continue
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize" if direction == "minimize" else "maximize")
    study.add_trials(trials)
    return study


def param_importances(
    spec_document: Mapping[str, Any],
    params: Sequence[Mapping[str, Any]],
    values: Sequence[float],
    direction: str,
) -> dict[str, Any]:
    """The importance section of the analysis (`core.analysis.report.Importance`):
    ``fanova`` and ``ped_anova`` shares per parameter path (each summing to 1), the trials
    they rest on, and whether those were sampled."""
    chosen = _sample(len(params))
    sample = ([params[i] for i in chosen], [values[i] for i in chosen])
    out: dict[str, Any] = {"available": True, "trials": int(chosen.size),
                           "sampled": bool(chosen.size < len(params))}  # fmt: skip
    evaluators = {
        "fanova": FanovaImportanceEvaluator(n_trees=FANOVA_TREES, max_depth=FANOVA_DEPTH,
                                            seed=SEED),
        "ped_anova": PedAnovaImportanceEvaluator(),
    }  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        for name, evaluator in evaluators.items():
            study = study_of(spec_document, *sample, direction, evaluator=name)
            try:
                shares = get_param_importances(study, evaluator=evaluator, normalize=True)
            except (ValueError, RuntimeError) as exc:  # too few trials, or one value for all
                out[name] = {}
                out[f"{name}_note"] = str(exc)
                continue
            out[name] = {p: float(s) for p, s in shares.items()}
    if not out["fanova"] and not out["ped_anova"]:
        out["available"] = False
        out["note"] = "no parameter varies across the complete trials"
    return out
