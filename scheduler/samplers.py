"""Optuna's pieces for a sweep spec: each dimension as an Optuna distribution, the sampler of
`search.algorithm` (seeded per trial, so that a rebuilt study replays), and the most epochs a
trial trains (Hyperband's resource). `scheduler.search_session.SearchSession` puts them
together with the pruner of `pruning.algorithm` (`core.spec.pruners.make_pruner`, which the
workers use too).

Seeding: each trial's sampler is built afresh with a seed drawn from (``search.seed``, trial
number). Optuna's samplers otherwise keep one generator that every ask advances, so a study
rebuilt after a restart, with the same trials and results, would ask different points.
"""

from __future__ import annotations

import importlib.util
import json
import warnings
from collections.abc import Callable, Sequence
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
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState

from core.errors import Problem, SpecError
from core.spec.search import Search, check_search
from core.spec.space import Categorical, Dimension, Fixed, IntRange, Uniform
from core.spec.sweep import SweepSpec

# --- dimensions -> distributions -------------------------------------------------------


def _plain(choices: Sequence[Any]) -> bool:
    """Whether Optuna can take the values themselves as its categories."""
    kinds = {
        "bool" if isinstance(v, bool) else "num" if isinstance(v, int | float) else type(v)
        for v in choices
    }
    return len(kinds) == 1 and kinds <= {"bool", "num", str}


@dataclass(frozen=True)
class Param:
    """One asked dimension: its Optuna distribution and the spec value of each category."""

    dim: Dimension
    distribution: BaseDistribution
    by_label: dict[Any, Any] = field(default_factory=dict)

    def encode(self, value: Any) -> Any:
        if not self.by_label:
            return value
        return json.dumps(value, sort_keys=True)

    def decode(self, value: Any) -> Any:
        return self.by_label[value] if self.by_label else value


def distribution(dim: Dimension) -> BaseDistribution | None:
    """The Optuna distribution of a dimension; None for a conditional fixed value."""
    return param(dim).distribution if not isinstance(dim, Fixed) else None


def param(dim: Dimension) -> Param:
    if isinstance(dim, Categorical):
        if _plain(dim.choices):
            return Param(dim, CategoricalDistribution(dim.choices))
        labels = {json.dumps(v, sort_keys=True): v for v in dim.choices}
        return Param(dim, CategoricalDistribution(tuple(labels)), labels)
    if isinstance(dim, IntRange):
        return Param(dim, IntDistribution(dim.low, dim.high, step=dim.step))
    if isinstance(dim, Uniform):
        return Param(dim, FloatDistribution(dim.low, dim.high, log=dim.log))
    raise TypeError(f"{dim.path}: a {dim.kind} dimension has no Optuna distribution")


# --- samplers and pruners ---------------------------------------------------------------


def trial_seed(seed: int, number: int) -> int:
    """The seed of one trial's sampler: a function of the sweep seed and the trial number."""
    return int(np.random.SeedSequence([seed, number]).generate_state(1)[0])


class _PerTrialSeed(BaseSampler):
    """Delegates to a sampler built afresh for each trial, seeded by `trial_seed`, so what
    it asks depends on the study's trials and not on how many asks came before."""

    def __init__(self, build: Callable[[int], BaseSampler], seed: int) -> None:
        self._build = build
        self._seed = seed
        self._current: tuple[int, BaseSampler] | None = None

    def _for(self, trial: FrozenTrial) -> BaseSampler:
        if self._current is None or self._current[0] != trial.number:
            self._current = (trial.number, self._build(trial_seed(self._seed, trial.number)))
        return self._current[1]

    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return self._for(trial).infer_relative_search_space(study, trial)

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        return self._for(trial).sample_relative(study, trial, search_space)

    def sample_independent(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        return self._for(trial).sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self._for(trial).before_trial(study, trial)

    def after_trial(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        # No sampler's after_trial draws a random number: any instance will do, and building
        # one per tell would cost more than the tell.
        sampler = self._current[1] if self._current is not None else self._for(trial)
        sampler.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        """Seeds come from the trial numbers; nothing to reseed."""


_NEEDS = {"cmaes": ("cmaes",), "gp": ("torch", "scipy"), "qmc": ("scipy",)}


def _quiet(build: Callable[[int], BaseSampler]) -> Callable[[int], BaseSampler]:
    """Optuna flags QMC, CMA-ES options, TPE's `group` and NSGA-III as experimental on every
    build; the user chose them in the spec, and a sampler is built per trial."""

    def quietly(seed: int) -> BaseSampler:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return build(seed)

    return quietly


def _builder(search: Search) -> Callable[[int], BaseSampler]:
    options = search.sampler_options()
    samplers = optuna.samplers
    algorithm = search.algorithm
    if algorithm == "tpe":
        return lambda seed: samplers.TPESampler(seed=seed, **options)
    if algorithm == "cmaes":
        # Categorical dimensions are drawn at random beside CMA-ES (check_search allows only
        # scalar ones); Optuna's warning about it would repeat for every trial.
        return lambda seed: samplers.CmaEsSampler(
            seed=seed, warn_independent_sampling=False, **options
        )
    if algorithm == "gp":
        return lambda seed: samplers.GPSampler(
            seed=seed, warn_independent_sampling=False, **options
        )
    if algorithm == "qmc":
        return lambda seed: samplers.QMCSampler(
            seed=seed, warn_independent_sampling=False, **options
        )
    if algorithm == "nsga2":
        return lambda seed: samplers.NSGAIISampler(seed=seed, **options)
    if algorithm == "nsga3":
        return lambda seed: samplers.NSGAIIISampler(seed=seed, **options)
    return lambda seed: samplers.RandomSampler(seed=seed)


def make_sampler(search: Search, space: dict[str, Dimension]) -> BaseSampler:
    """Optuna's sampler for the spec's `search` section, seeded per trial from `search.seed`.

    Raises `SpecError` naming the option or dimension for a rule broken (an option of another
    algorithm, a list-valued dimension under CMA-ES...) and for a sampler whose library is not
    installed. For grid the sampler is never consulted (points come in expansion order).
    """
    problems = check_search(space, search)
    missing = [m for m in _NEEDS.get(search.algorithm, ()) if importlib.util.find_spec(m) is None]
    if missing:
        problems.append(
            Problem(
                "search.algorithm",
                f"{search.algorithm} needs the Python package(s) {', '.join(missing)} in the "
                "scheduler's environment, and they are not installed",
            )
        )
    if problems:
        raise SpecError(problems)
    return _PerTrialSeed(_quiet(_builder(search)), search.seed)


def random_sampler(seed: int) -> BaseSampler:
    """Optuna's `RandomSampler`, seeded per trial like `make_sampler`'s: what a session
    draws a point with after its sampler proposed only repeats (`scheduler.search_session`)."""
    return _PerTrialSeed(lambda s: optuna.samplers.RandomSampler(seed=s), seed)


def max_epochs(spec: SweepSpec) -> int:
    """The most epochs any trial of the spec trains: Hyperband's largest resource
    (`core.spec.spec.SweepSpec.planned_epochs`; for a Caffe net, its first trial's
    evaluations)."""
    return int(spec.planned_epochs())
