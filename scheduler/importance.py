"""Parameter importance with Optuna's own evaluators, for a finished sweep of any algorithm.

`param_importances` builds an in-memory study from the complete trials
(`optuna.trial.create_trial`, one per trial, with a distribution per parameter) and asks
two evaluators how much each parameter explains the objective:

- fANOVA (`optuna.importance.FanovaImportanceEvaluator`): the share of the objective's
  variance each parameter explains alone, from a random forest fitted to the trials;
- PED-ANOVA (`PedAnovaImportanceEvaluator`): how differently each parameter is spread
  among the best trials (the top 10%) than among all, which says what it takes to be good.

Distributions follow the spec: a parameter listed as numbers (``[16, 32, 64]``, ``{int:
…}``, ``{range: …}``, ``{uniform: …}``) is ordered, an `IntDistribution` or
`FloatDistribution` over the values the trials took (logarithmic when the spec says so or
the values span two decades), so the forest splits it at thresholds rather than into one
column per value; anything else is categorical (a list value by its JSON text, as the
scheduler's samplers encode it). Conditional parameters absent from some trials drop out
(Optuna evaluates the search space every trial shares).

Cost: fANOVA's forest grows with the trials, so a sweep of more than `MAX_TRIALS` complete
trials is sampled (seeded, so the answer is the same every time), and the forest is
`FANOVA_TREES` trees of depth `FANOVA_DEPTH`: fANOVA's marginals are computed in Python
over every leaf and split, so Optuna's default of 64 trees of depth 64 took ~5 s on 360
trials on a 2-core machine, and this ~0.5 s, with the same ranking.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Mapping, Sequence
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
from core.space import Categorical, Dimension, IntRange, Uniform

#: Complete trials beyond this are sampled for the evaluators.
MAX_TRIALS = 4000
FANOVA_TREES = 16
FANOVA_DEPTH = 6
SEED = 0


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _ordered(dim: Dimension | None, values: Sequence[Any]) -> bool:
    if not all(_is_number(v) for v in values):
        return False
    if isinstance(dim, Categorical):
        return all(_is_number(v) for v in dim.choices)
    return dim is None or isinstance(dim, IntRange | Uniform)


def _log(dim: Dimension | None, low: float, high: float) -> bool:
    if isinstance(dim, Uniform) and dim.log:
        return True
    return low > 0 and high / low >= 100


def distribution(dim: Dimension | None, values: Sequence[Any]) -> BaseDistribution | None:
    """The distribution of one parameter over the values its trials took (see the module
    doc); None when it took fewer than two."""
    labels = {_encode(v) for v in values}
    if len(labels) < 2:
        return None
    if _ordered(dim, values):
        low, high = min(values), max(values)
        log = _log(dim, float(low), float(high))
        if all(isinstance(v, int) for v in values):
            return IntDistribution(int(low), int(high), log=log)
        return FloatDistribution(float(low), float(high), log=log)
    return CategoricalDistribution(sorted(labels, key=str))


def _encode(value: Any) -> Any:
    """A value as a category: plain scalars as they are, anything else by its JSON text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return json.dumps(value, sort_keys=True)


def _sample(n: int) -> np.ndarray:
    if n <= MAX_TRIALS:
        return np.arange(n)
    return np.sort(np.random.default_rng(SEED).choice(n, MAX_TRIALS, replace=False))


def study_of(
    spec_document: Mapping[str, Any],
    params: Sequence[Mapping[str, Any]],
    values: Sequence[float],
    direction: str,
) -> optuna.Study:
    """An in-memory study holding one complete trial per (params, value)."""
    dims = dimensions(spec_document)
    seen: dict[str, list[Any]] = {}
    for flat in params:
        for path, value in flat.items():
            seen.setdefault(path, []).append(value)
    dists = {p: d for p, vs in seen.items() if (d := distribution(dims.get(p), vs)) is not None}
    trials = []
    for flat, value in zip(params, values, strict=True):
        names = [p for p in flat if p in dists]
        trials.append(optuna.trial.create_trial(
            params={p: flat[p] if not isinstance(dists[p], CategoricalDistribution)
                    else _encode(flat[p]) for p in names},
            distributions={p: dists[p] for p in names},
            value=float(value),
        ))  # fmt: skip
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
    study = study_of(spec_document, [params[i] for i in chosen], [values[i] for i in chosen],
                     direction)  # fmt: skip
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
