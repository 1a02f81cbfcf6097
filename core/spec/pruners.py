"""Optuna's pruner for a spec's `pruning` section (`make_pruner`): what the scheduler's
search session judges with, and what a worker judges with where the pruner needs only the
trial's own reports and the complete trials' (`core.spec.search.judged_in_worker`,
`workers.pruning`). Both build it here, so both make the same decisions.

The one module of `core` that imports Optuna (the layer rule in `tests/test_layers.py`):
only those two callers import it, never the API or the dashboard.
"""

from __future__ import annotations

import warnings

import optuna

from core.errors import SpecError
from core.spec.search import Pruning, Search, option_problems


def make_pruner(
    pruning: Pruning, *, flip: bool = False, epochs: int | None = None
) -> optuna.pruners.BasePruner:
    """Optuna's pruner for the spec's `pruning` section.

    `flip`: the pruned metric is reported negated (it improves the other way than the
    objective), so threshold bounds are negated and swapped. `epochs`: Hyperband's
    `max_resource` when the spec leaves it out (the trials' own epoch count, known up front,
    rather than Optuna's `auto`, which waits for a finished trial).
    """
    problems = option_problems(Search(), pruning)
    if problems:
        raise SpecError(problems)
    pruners = optuna.pruners
    opts = pruning.pruner_options()
    algorithm = pruning.algorithm
    if algorithm == "none":
        return pruners.NopPruner()
    if algorithm == "median":
        return pruners.MedianPruner(**opts)
    if algorithm == "percentile":
        return pruners.PercentilePruner(**opts)
    if algorithm == "asha":
        return pruners.SuccessiveHalvingPruner(**opts)
    if algorithm == "hyperband":
        if opts.get("max_resource", "auto") == "auto" and epochs is not None:
            opts["max_resource"] = epochs
        return pruners.HyperbandPruner(**opts)
    if algorithm == "threshold":
        if flip:
            low, high = opts.pop("lower", None), opts.pop("upper", None)
            if high is not None:
                opts["lower"] = -high
            if low is not None:
                opts["upper"] = -low
        return pruners.ThresholdPruner(**opts)
    inner = pruning.wrapped
    wrapped = make_pruner(inner, flip=flip, epochs=epochs) if inner is not None else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return pruners.PatientPruner(wrapped, **opts)
