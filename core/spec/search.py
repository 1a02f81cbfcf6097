"""The spec's `search` and `pruning` sections: which algorithm explores the space, and when
a trial is stopped early.

``search.algorithm`` is one of:

- ``grid``: every point of the (finite) space, in the order ``scheduler.expand`` lists them;
- ``random``: ``trials`` points drawn independently;
- ``tpe``, ``cmaes``, ``gp``, ``qmc``, ``nsga2``, ``nsga3``: Optuna's samplers of those names
  (``NSGAIISampler``, ``NSGAIIISampler`` for the last two), driven by the scheduler through
  Optuna's ask-and-tell interface (``scheduler.search_session``). They need a budget,
  ``trials``. Every one but ``cmaes`` searches for several objectives too
  (`core.spec.objectives`).

``parallelism`` is how many trials are in flight (queued or running) at once; left out, the
scheduler decides from the workers online. Sampler options are written flat beside
``algorithm`` (``search: {algorithm: tpe, trials: 40, multivariate: true}``); an option of
another algorithm is refused by `check_search`, naming it. Every option left out keeps
Optuna's own default (the `None` of these models).

``pruning.algorithm`` is ``none`` or one of Optuna's pruners (``median``, ``percentile``,
``asha`` = successive halving, ``hyperband``, ``threshold``, ``patient``), judged on the
per-epoch values of ``pruning.metric`` (the objective's metric when left out). A step is an
epoch: the epochs trained so far.

This module is pure data and rules; it never imports Optuna: `core.spec.pruners` builds
Optuna's pruner from a `pruning` section, for the scheduler and for the workers alike.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from core.errors import Problem
from core.spec.space import Categorical, Dimension, IntRange, Uniform

#: Each metric a trial reports, and which way is better for it.
METRIC_DIRECTIONS = {
    "val_accuracy": "maximize",
    "val_loss": "minimize",
    "val_rmse": "minimize",
    "train_loss": "minimize",
}

#: The most earlier sweeps one ``search.warm_start`` names, and points ``search.first`` lists.
MAX_WARM_SWEEPS = 20
MAX_FIRST = 1000

ALGORITHMS = ("grid", "random", "tpe", "cmaes", "gp", "qmc", "nsga2", "nsga3")
#: Algorithms that learn from results: they need a budget and the scheduler's feeding loop.
ADAPTIVE = ("tpe", "cmaes", "gp", "qmc", "nsga2", "nsga3")
PRUNERS = ("none", "median", "percentile", "asha", "hyperband", "threshold", "patient")

#: Which sampler option belongs to which algorithms (the spelling is Optuna's).
SAMPLER_OPTIONS: dict[str, tuple[str, ...]] = {
    "n_startup_trials": ("tpe", "cmaes", "gp"),
    "multivariate": ("tpe",),
    "group": ("tpe",),
    "constant_liar": ("tpe",),
    "n_ei_candidates": ("tpe",),
    "popsize": ("cmaes",),
    "with_margin": ("cmaes",),
    "use_separable_cma": ("cmaes",),
    "lr_adapt": ("cmaes",),
    "consider_pruned_trials": ("cmaes",),
    "deterministic_objective": ("gp",),
    "qmc_type": ("qmc",),
    "scramble": ("qmc",),
    "population_size": ("nsga2", "nsga3"),
    "mutation_prob": ("nsga2", "nsga3"),
    "crossover_prob": ("nsga2", "nsga3"),
    "swapping_prob": ("nsga2", "nsga3"),
    "dividing_parameter": ("nsga3",),
}

#: Which pruner option belongs to which pruners.
PRUNER_OPTIONS: dict[str, tuple[str, ...]] = {
    "n_startup_trials": ("median", "percentile"),
    "n_warmup_steps": ("median", "percentile", "threshold"),
    "interval_steps": ("median", "percentile", "threshold"),
    "n_min_trials": ("median", "percentile"),
    "percentile": ("percentile",),
    "min_resource": ("asha", "hyperband"),
    "reduction_factor": ("asha", "hyperband"),
    "min_early_stopping_rate": ("asha",),
    "bootstrap_count": ("asha", "hyperband"),
    "max_resource": ("hyperband",),
    "lower": ("threshold",),
    "upper": ("threshold",),
    "patience": ("patient",),
    "min_delta": ("patient",),
    "wrapped": ("patient",),
}

#: Options users know from Optuna's CMA-ES that Optuna 5 deprecates; refused with the reason.
_DEPRECATED = {
    "sigma0": "is deprecated by Optuna (4.9; removed in 6.0) and not offered: CMA-ES starts "
    "from the ranges' smallest width / 6",
    "x0": "is deprecated by Optuna (4.9; removed in 6.0) and not offered: CMA-ES starts "
    "from the middle of each range",
    "restart_strategy": "is ignored by Optuna since 4.4 (restarts moved to OptunaHub) and "
    "not offered",
    "inc_popsize": "is ignored by Optuna since 4.4 (restarts moved to OptunaHub) and not offered",
}

PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Search(_Strict):
    """How the space is explored. `algorithm`, `trials` and `seed` keep their names and
    defaults from the first grid/random-only spec; the rest are `None` unless given."""

    algorithm: Literal[ALGORITHMS] = "grid"  # type: ignore[valid-type]
    trials: PositiveInt | None = None
    seed: NonNegativeInt = 0
    parallelism: PositiveInt | None = None
    # Sampler options (None: Optuna's default).
    n_startup_trials: NonNegativeInt | None = None
    multivariate: bool | None = None
    group: bool | None = None
    constant_liar: bool | None = None
    n_ei_candidates: PositiveInt | None = None
    popsize: Annotated[int, Field(ge=2)] | None = None
    with_margin: bool | None = None
    use_separable_cma: bool | None = None
    lr_adapt: bool | None = None
    consider_pruned_trials: bool | None = None
    deterministic_objective: bool | None = None
    qmc_type: Literal["sobol", "halton"] | None = None
    scramble: bool | None = None
    population_size: Annotated[int, Field(ge=2)] | None = None
    mutation_prob: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = None
    crossover_prob: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = None
    swapping_prob: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = None
    dividing_parameter: PositiveInt | None = None
    # Warm starts (`scheduler.warm`): earlier sweeps whose finished trials the sampler is
    # told before its first ask, and points enqueued before it asks (`enqueue_trial`).
    warm_start: Annotated[list[str], Field(min_length=1, max_length=MAX_WARM_SWEEPS)] | None = None
    first: Annotated[list[dict[str, Any]], Field(min_length=1, max_length=MAX_FIRST)] | None = None

    @property
    def adaptive(self) -> bool:
        """Whether the algorithm learns from results (and so needs the feeding loop)."""
        return self.algorithm in ADAPTIVE

    def sampler_options(self) -> dict[str, Any]:
        """The options given for this algorithm, by Optuna's keyword names."""
        return _given(self, SAMPLER_OPTIONS)


class Pruning(_Strict):
    """When a trial is stopped before its last epoch; `none` runs every epoch."""

    algorithm: Literal[PRUNERS] = "none"  # type: ignore[valid-type]
    metric: Literal[tuple(METRIC_DIRECTIONS)] | None = None  # type: ignore[valid-type]
    n_startup_trials: NonNegativeInt | None = None
    n_warmup_steps: NonNegativeInt | None = None
    interval_steps: PositiveInt | None = None
    n_min_trials: PositiveInt | None = None
    percentile: Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)] | None = None
    min_resource: PositiveInt | Literal["auto"] | None = None
    reduction_factor: Annotated[int, Field(ge=2)] | None = None
    min_early_stopping_rate: NonNegativeInt | None = None
    bootstrap_count: NonNegativeInt | None = None
    max_resource: PositiveInt | Literal["auto"] | None = None
    lower: Annotated[float, Field(allow_inf_nan=False)] | None = None
    upper: Annotated[float, Field(allow_inf_nan=False)] | None = None
    patience: NonNegativeInt | None = None
    min_delta: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    wrapped: Pruning | None = None

    @property
    def enabled(self) -> bool:
        return self.algorithm != "none"

    def pruner_options(self) -> dict[str, Any]:
        """The options given for this pruner, by Optuna's keyword names (`wrapped` apart)."""
        return {k: v for k, v in _given(self, PRUNER_OPTIONS).items() if k != "wrapped"}


def _given(section: Search | Pruning, owners: Mapping[str, tuple[str, ...]]) -> dict[str, Any]:
    """The options of `section` given and belonging to its algorithm (`owners`: option ->
    the algorithms it belongs to)."""
    return {
        name: getattr(section, name)
        for name, belongs in owners.items()
        if section.algorithm in belongs and getattr(section, name) is not None
    }


def _misplaced(
    section: Search | Pruning, owners: Mapping[str, tuple[str, ...]], at: str
) -> list[Problem]:
    """A problem naming each option of `section` (at path `at`) that is given but belongs
    to other algorithms than its own (`owners`: option -> the algorithms it belongs to)."""
    return [
        Problem(
            f"{at}.{name}",
            f"is an option of {' and '.join(belongs)}, but {at}.algorithm is {section.algorithm}",
        )
        for name, belongs in owners.items()
        if getattr(section, name) is not None and section.algorithm not in belongs
    ]


def pruning_direction(pruning: Pruning, objective_metric: str, objective_direction: str) -> str:
    """Which way is better for the pruned metric: the objective's direction when it is the
    objective's metric, else the metric's own (lower loss, higher accuracy)."""
    metric = pruning.metric or objective_metric
    if metric == objective_metric:
        return objective_direction
    return METRIC_DIRECTIONS[metric]


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, str) else str(value)


def option_problems(search: Search, pruning: Pruning | None = None) -> list[Problem]:
    """Rules between the options of the two sections, each naming the option it refuses."""
    problems = _misplaced(search, SAMPLER_OPTIONS, "search")
    if search.algorithm == "tpe" and search.group and search.multivariate is False:
        problems.append(
            Problem(
                "search.group",
                "`multivariate` must be true for `group`, but got (multivariate=false)",
            )
        )
    if search.algorithm == "cmaes" and search.lr_adapt:
        clash = [n for n in ("use_separable_cma", "with_margin") if getattr(search, n)]
        if clash:
            problems.append(
                Problem("search.lr_adapt", f"cannot be combined with {' or '.join(clash)}")
            )
    if search.algorithm == "cmaes" and search.use_separable_cma and search.with_margin:
        problems.append(Problem("search.with_margin", "cannot be combined with use_separable_cma"))
    if search.algorithm in ADAPTIVE and search.trials is None:
        problems.append(
            Problem("search.trials", f"is required when search.algorithm is {search.algorithm}")
        )
    if search.algorithm == "random" and search.trials is None:
        problems.append(Problem("search.trials", "is required when search.algorithm is random"))
    if pruning is not None:
        problems.extend(_pruning_problems(pruning, "pruning"))
    return problems


def _pruning_problems(pruning: Pruning, at: str) -> list[Problem]:
    problems = _misplaced(pruning, PRUNER_OPTIONS, at)
    if pruning.algorithm == "percentile" and pruning.percentile is None:
        problems.append(Problem(f"{at}.percentile", "is required when the pruner is percentile"))
    if pruning.algorithm == "patient" and pruning.patience is None:
        problems.append(Problem(f"{at}.patience", "is required when the pruner is patient"))
    if pruning.algorithm == "threshold":
        low, high = pruning.lower, pruning.upper
        if low is None and high is None:
            problems.append(Problem(at, "a threshold pruner needs `lower`, `upper` or both"))
        elif low is not None and high is not None and not low < high:
            problems.append(
                Problem(
                    f"{at}.lower",
                    f"`lower < upper` must hold, but got (lower={_fmt(low)}, upper={_fmt(high)})",
                )
            )
    for name, auto in (("min_resource", "asha"), ("max_resource", "hyperband")):
        unset_or_auto = getattr(pruning, name) in (None, "auto")
        if pruning.algorithm == auto and pruning.bootstrap_count and unset_or_auto:
            problems.append(
                Problem(
                    f"{at}.bootstrap_count",
                    f"needs an explicit `{name}`, but got ({name}=auto, "
                    f"bootstrap_count={pruning.bootstrap_count})",
                )
            )
    if (
        pruning.algorithm == "hyperband"
        and isinstance(pruning.min_resource, int)
        and isinstance(pruning.max_resource, int)
        and not pruning.min_resource <= pruning.max_resource
    ):
        problems.append(
            Problem(
                f"{at}.min_resource",
                "`min_resource <= max_resource` must hold, but got "
                f"(min_resource={pruning.min_resource}, max_resource={pruning.max_resource})",
            )
        )
    if pruning.wrapped is not None:
        if pruning.wrapped.metric is not None:
            problems.append(
                Problem(f"{at}.wrapped.metric", "set the metric on the outer pruner only")
            )
        problems.extend(_pruning_problems(pruning.wrapped, f"{at}.wrapped"))
    return problems


def deprecated_option_problems(raw: Any) -> list[Problem]:
    """Options of Optuna's CMA-ES that users may know but Optuna 5 deprecates: a clearer
    rule than "unknown key". Give the raw `search` mapping, before validation."""
    if not isinstance(raw, dict):
        return []
    return [Problem(f"search.{k}", rule) for k, rule in _DEPRECATED.items() if k in raw]


def _is_list_valued(dim: Dimension) -> bool:
    return isinstance(dim, Categorical) and any(isinstance(v, list | dict) for v in dim.choices)


def check_search(
    spec_space: dict[str, Dimension], search: Search, pruning: Pruning | None = None
) -> list[Problem]:
    """Every rule that spans the space and the search sections.

    Grid and random keep their first rules (grid enumerates only finite dimensions; random
    needs `trials`). Adaptive algorithms need `trials`; CMA-ES and QMC model a space that is
    the same in every trial, so they refuse `when:` conditions; CMA-ES models numbers only,
    so it refuses list-valued dimensions (``hidden_units: [[64, 32], [128, 64]]``) and a space
    with no numeric range at all (it would be random search by another name). Scalar
    categorical dimensions under CMA-ES are drawn at random beside it, as Optuna does.
    """
    problems = option_problems(search, pruning)
    algorithm = search.algorithm
    dims = [d for d in spec_space.values() if d.varies]
    if algorithm == "grid":
        for dim in dims:
            if not dim.finite:
                problems.append(
                    Problem(
                        dim.path,
                        f"grid search cannot enumerate a {dim.kind} "
                        "dimension; list the values or use search.algorithm: "
                        "random",
                    )
                )
    if algorithm in ("cmaes", "qmc"):
        for dim in dims:
            if dim.when:
                problems.append(
                    Problem(
                        f"{dim.path}.when",
                        f"search.algorithm {algorithm} needs the same dimensions in every "
                        "trial and cannot take a conditional one; use tpe (or random)",
                    )
                )
    if algorithm == "cmaes":
        numeric = False
        for dim in dims:
            if _is_list_valued(dim):
                problems.append(
                    Problem(
                        dim.path,
                        "search.algorithm cmaes cannot take a list-valued dimension (CMA-ES "
                        "samples numbers); use tpe or gp, or fix it",
                    )
                )
            numeric = numeric or isinstance(dim, IntRange | Uniform)
        if dims and not numeric:
            problems.append(
                Problem(
                    "search.algorithm",
                    "cmaes needs at least one int, uniform or loguniform dimension; every "
                    "dimension here is a list of values (use tpe, gp or random)",
                )
            )
    problems.extend(_first_problems(spec_space, search))
    if algorithm in ADAPTIVE and not dims:
        problems.append(
            Problem("search.algorithm", f"{algorithm} needs at least one dimension that varies")
        )
    return problems


def _first_problems(spec_space: dict[str, Dimension], search: Search) -> list[Problem]:
    """``search.warm_start`` and ``search.first`` need a sampler to tell; each first point
    names varying dimensions only, with a value each may take; no point twice."""
    problems: list[Problem] = []
    for name in ("warm_start", "first"):
        if getattr(search, name) is not None and not search.adaptive:
            problems.append(Problem(
                f"search.{name}",
                f"needs an adaptive search.algorithm ({', '.join(ADAPTIVE)}): a "
                f"{search.algorithm} sweep lists its points itself",
            ))  # fmt: skip
    varying = {path: d for path, d in spec_space.items() if d.varies}
    seen: list[dict[str, Any]] = []
    for i, point in enumerate(search.first or []):
        at = f"search.first[{i}]"
        if not point:
            problems.append(Problem(at, "must give at least one dimension's value"))
        if point in seen:
            problems.append(Problem(at, f"repeats search.first[{seen.index(point)}]"))
        seen.append(point)
        for path, value in point.items():
            dim = varying.get(path)
            if dim is None:
                known = ", ".join(sorted(varying)) or "none"
                problems.append(
                    Problem(f"{at}.{path}", f"is not a dimension that varies ({known})")
                )
            elif not dimension_takes(dim, value):
                rule = f"{_fmt(value)} is not a value of this {dim.kind} dimension"
                problems.append(Problem(f"{at}.{path}", rule))
    return problems


def dimension_takes(dim: Dimension, value: Any) -> bool:
    """Whether `value` is one the dimension may give a trial."""
    if isinstance(dim, Uniform):
        number = isinstance(value, int | float) and not isinstance(value, bool)
        return number and dim.low <= value <= dim.high
    if isinstance(dim, IntRange):
        if isinstance(value, bool) or not isinstance(value, int):
            return False
        return dim.low <= value <= dim.high and (value - dim.low) % dim.step == 0
    try:
        return value in dim.values()
    except TypeError:
        return False


#: What `decision_epochs` answers for a pruner that may decide after any epoch and that the
#: scheduler runs (ASHA with ``min_resource: auto``).
EVERY_EPOCH = "every"
#: What `decision_epochs` answers for a pruner that judges a trial on its own reports and on
#: the complete trials' only (`judged_in_worker`): it may decide after any epoch, and the
#: worker that trains the trial runs it there, the moment the epoch ends
#: (`workers.pruning`), with no round trip to the scheduler.
IN_WORKER = "in-worker"
#: Optuna's pruners whose decision needs only the trial's own reports and the complete
#: trials' (``PercentilePruner`` reads ``study.get_trials(states=(COMPLETE,))``); successive
#: halving and Hyperband compare a trial with the running and pruned ones at its rung too.
_OWN_AND_COMPLETE = ("median", "percentile", "threshold")


def judged_in_worker(pruning: Pruning) -> bool:
    """Whether the spec's pruner decides on a trial's own reports and the complete trials'
    alone (median, percentile, threshold, and patient around one of those or around
    nothing), so that the worker training the trial can run it (`IN_WORKER`)."""
    if pruning.algorithm in _OWN_AND_COMPLETE:
        return True
    if pruning.algorithm != "patient":
        return False
    inner = pruning.wrapped
    return inner is None or inner.algorithm == "none" or judged_in_worker(inner)


def decides(epochs: Collection[int] | str | None, epoch: int) -> bool:
    """Whether the pruner may decide after `epoch`, given what `decision_epochs` answered
    (the scheduler's list, or the set a worker read from its message)."""
    return epochs in (EVERY_EPOCH, IN_WORKER) or (
        not isinstance(epochs, str | None) and epoch in epochs
    )


def decision_epochs(
    pruning: Pruning, max_epochs: int, objectives: int = 1
) -> list[int] | str | None:
    """The epochs after which the spec's pruner may stop a trial, and who decides there:
    None when nothing prunes; `IN_WORKER` for a pruner the worker runs itself
    (`judged_in_worker`: median, percentile, threshold, patient around those), after every
    epoch; `EVERY_EPOCH` for one the scheduler runs after every epoch (ASHA with
    ``min_resource: auto``, whose rungs depend on the trials; patient around ASHA or
    Hyperband); else the rung epochs, where a worker waits for the scheduler's decision
    (`workers.claims`).

    With a report at every epoch, Optuna's successive halving judges a trial when it first
    reaches a rung, ``min_resource * reduction_factor ** (min_early_stopping_rate + k)``;
    Hyperband's brackets are successive halving with rates 0, 1, ..., so its rungs are
    ``min_resource * reduction_factor ** k``. Optuna's defaults where the spec says nothing.

    With several `objectives` the scheduler judges by Pareto rank (`rank_decision_epochs`).
    """
    algorithm = pruning.algorithm
    if algorithm == "none":
        return None
    if objectives > 1:
        return rank_decision_epochs(pruning, max_epochs)
    if judged_in_worker(pruning):
        return IN_WORKER
    if algorithm not in ("asha", "hyperband"):
        return EVERY_EPOCH
    opts = pruning.pruner_options()
    if algorithm == "asha":
        low, factor = opts.get("min_resource", "auto"), opts.get("reduction_factor", 4)
        rate = opts.get("min_early_stopping_rate", 0)
    else:
        low, factor, rate = opts.get("min_resource", 1), opts.get("reduction_factor", 3), 0
    if not isinstance(low, int):
        return EVERY_EPOCH
    rungs, k = [], 0
    while (epoch := low * factor ** (rate + k)) <= max_epochs:
        rungs.append(epoch)
        k += 1
    return rungs


def rank_decision_epochs(pruning: Pruning, max_epochs: int) -> list[int]:
    """The epochs after which a multi-objective sweep's Pareto-rank pruner judges a trial,
    always the scheduler, where the worker waits (docs/spec.md, "Pruning by Pareto rank"):
    ASHA's rungs ``min_resource * reduction_factor ** (min_early_stopping_rate + k)``
    (``min_resource`` 1 when left out, ``reduction_factor`` 4); for median and percentile,
    every ``interval_steps``-th epoch from ``n_warmup_steps`` on (never epoch 0), as
    Optuna's percentile pruner checks a trial that reports every epoch."""
    opts = pruning.pruner_options()
    if pruning.algorithm == "asha":
        low, factor = int(opts.get("min_resource", 1)), int(opts.get("reduction_factor", 4))
        rate, rungs, k = int(opts.get("min_early_stopping_rate", 0)), [], 0
        while (epoch := low * factor ** (rate + k)) <= max_epochs:
            rungs.append(epoch)
            k += 1
        return rungs
    warmup, interval = opts.get("n_warmup_steps", 0), opts.get("interval_steps", 1)
    return [e for e in range(max(1, warmup), max_epochs + 1) if (e - warmup) % interval == 0]
