"""The adapter between a sweep spec and Optuna's ask-and-tell interface: one path for every
search algorithm (grid and random too), and Optuna's pruners on per-epoch reports.

A `SearchSession` wraps an `optuna.Study` on in-memory storage. The scheduler asks it for
points (`ask`), stores and enqueues them as trials, tells it each result (`tell`), feeds it
the epochs workers report (`report`) and asks whether to stop a trial (`should_prune`).
After a restart, `rebuild` recreates the study from the stored records so that no point is
asked twice and a seeded sweep replayed with the same results asks the same points.

Decisions, and why:

- Params are asked define-by-run, one dimension at a time in `scheduler.expand`'s order
  (each dimension after those its ``when:`` names); a dimension whose condition does not hold
  is never asked. They come back as expansion gives them: ``{dotted.path: value}``.
- A choice list whose values are not all strings, all numbers or all booleans (a list of
  widths ``[[64, 32], [128, 64]]``, or mixed kinds) is shown to Optuna as the JSON text of
  each value, since Optuna's categories are scalars.
- Grid does not use Optuna's `GridSampler`: it shuffles the grid by seed (so the order and
  indices would differ from `scheduler.expand.expand`), cannot take ``when:`` conditions, and
  scans every trial on each tell. Grid points are taken in expansion order and added to the
  study as running trials, so pruners judge them like any other.
- Several objectives (`core.spec.objectives`) make a multi-objective study, its
  ``directions`` the spec's; each trial is told the list of its objectives' values (the
  trial's ``objectives``), and a complete trial missing one is told failed. Constraints
  are told as Optuna 5 takes them (``Trial.set_constraint``: the system attributes
  ``constraints:KEY``, KEY the constraint's text, its violation as the value, at most 0
  when it holds, an unmeasured one infinite), set before the tell and given back to a
  rebuild, so the constraint-aware samplers (TPE, NSGA-II, NSGA-III, GP) read them from
  ``FrozenTrial.constraints``; their deprecated ``constraints_func`` is not used.
- Replays are deterministic because each trial's sampler is seeded from (``search.seed``,
  trial number) rather than from one generator advanced by every ask: a rebuilt study with
  the same trials in the same states asks the same next points. Optuna keeps some state in
  the study (QMC's position in its sequence) and in trials (CMA-ES's optimizer): `Asked`
  carries a trial's `system_attrs` and `study_attrs()` the study's, for the scheduler to store
  and give back to `rebuild`.
- A point asked again (common for small finite spaces) is not returned: the repeat is
  recorded as a failed Optuna trial (neutral for every sampler and pruner) and the sampler is
  asked again. A sampler told only that its repeat failed tends to propose it once more (TPE
  on a small discrete space converges on its best point, or on the points in flight, which
  it is not told about), so after `RANDOM_AFTER_REPEATS` repeats in a row the point is drawn
  by Optuna's `RandomSampler` (seeded per trial too, so replays still agree). After
  `MAX_DRAWS_PER_POINT` draws per point, a finite space gives its first points not yet
  asked, in expansion order (so it is used up only once every point was asked), and any
  other `ask` returns fewer points (the space is, for practical purposes, used up). Without
  the two, TPE alone lost trials of a 24-trial budget on McLeod's 120 points.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import TrialState, create_trial

from core.spec.pruners import make_pruner
from core.spec.search import Pruning, Search, pruning_direction
from core.spec.space import Fixed
from core.spec.sweep import SweepSpec
from core.states import TrialState as State
from scheduler.expand import TrialPoint, _grid, _lookup, _ordered, canonical, trial_id
from scheduler.samplers import make_sampler, max_epochs, param, random_sampler

logger = logging.getLogger(__name__)

#: Repeated points tolerated per point returned before `ask` gives up (as expansion's random
#: search does with its draws).
MAX_DRAWS_PER_POINT = 50
#: Repeats in a row after which a point is drawn at random instead (module docstring).
RANDOM_AFTER_REPEATS = 5

_STATES = {
    State.QUEUED: TrialState.RUNNING,
    State.RUNNING: TrialState.RUNNING,
    State.COMPLETE: TrialState.COMPLETE,
    State.FAILED: TrialState.FAIL,
    State.CANCELLED: TrialState.FAIL,
    State.PRUNED: TrialState.PRUNED,
}


# --- the session ------------------------------------------------------------------------


@dataclass(frozen=True)
class Asked:
    """One point asked: the Optuna trial number (store it with the trial), the params as
    expansion gives them, their canonical text, and the trial's Optuna state to store."""

    number: int
    params: dict[str, Any]
    key: str
    system_attrs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Record:
    """What the store keeps of one asked trial, for `SearchSession.rebuild`.

    `state` is a Sweepstack state (queued and running are in flight for Optuna; failed and
    cancelled are failures); `epochs` maps an epoch to the pruned metric's value then.
    A multi-objective sweep's records carry `values`; a constrained sweep's `constraints`.
    """

    number: int
    params: dict[str, Any]
    state: str
    value: float | None = None
    epochs: dict[int, float] = field(default_factory=dict)
    system_attrs: dict[str, Any] = field(default_factory=dict)
    #: Every objective's value, in the spec's order (None: the single `value` alone).
    values: list[float | None] | None = None
    #: Each constraint's violation, in the spec's order (None where unmeasured).
    constraints: list[float | None] | None = None


class SearchSession:
    """One sweep's search: asks points, takes results and epoch reports, decides pruning.

    Not thread-safe; one scheduler feeds one sweep (the store's lease says which).
    """

    def __init__(
        self,
        spec: SweepSpec,
        search: Search | None = None,
        pruning: Pruning | None = None,
        *,
        warm: Sequence[Record | None] = (),
    ) -> None:
        self.spec = spec
        # Until the spec carries these sections itself, they may be given beside it.
        self.search = search or Search.model_validate(spec.search.model_dump())
        self.pruning = pruning or getattr(spec, "pruning", None) or Pruning()
        direction = spec.objective.direction
        self._flip = pruning_direction(self.pruning, spec.objective.metric, direction) != direction
        self._dims = _ordered(spec)
        self._params = {d.path: param(d) for d in self._dims if not isinstance(d, Fixed)}
        self._base_lookup = _lookup(spec)
        # Optuna's own handler would log every study and trial on stderr; the scheduler's
        # logging reports what matters.
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._storage = optuna.storages.InMemoryStorage()
        self.study = optuna.create_study(
            storage=self._storage,
            study_name=spec.name,
            directions=spec.directions,
            sampler=make_sampler(self.search, spec.space),
            pruner=make_pruner(self.pruning, flip=self._flip, epochs=max_epochs(spec)),
        )
        self._random = random_sampler(self.search.seed)
        self._finite = all(d.finite for d in self._dims)
        self._study_id = self._storage.get_study_id_from_name(spec.name)
        self._seen: dict[str, int] = {}
        self._count = 0  # Optuna trials in the study, repeats included
        self._grid: Iterator[dict[str, Any]] | None = None
        # Points of earlier sweeps (`search.warm_start`): told, and not this sweep's, so
        # one may be asked again (a new sweep's trial of it, with its own settings).
        self._warm: set[str] = set()
        self._first = [dict(point) for point in self.search.first or []]
        self._first_at = 0  # the next of `search.first` to enqueue
        self._tell_warm(warm)
        self._warm_count = self._count

    # The numbers of Optuna trials in the study; also the next trial's number.
    @property
    def trials_in_study(self) -> int:
        return self._count

    @property
    def asked(self) -> int:
        """Distinct points asked so far (rebuilt ones included)."""
        return len(self._seen)

    @property
    def budget(self) -> int | None:
        """How many points the sweep asks in all: `search.trials`, or None for a grid
        (its size, known when the grid is exhausted)."""
        return None if self.search.algorithm == "grid" else self.search.trials

    def ask(self, n: int, fixed: dict[str, Any] | None = None) -> list[Asked]:
        """Up to `n` new, distinct points (fewer when the budget or the space runs out).

        `fixed` gives some dimensions their values (``{dotted.path: value}``, as a point
        has them): the sampler chooses only the others, as Optuna does for a trial
        enqueued with those params (`optuna.Study.enqueue_trial`). What the feed asks for
        the other members of a fused group (`scheduler.feed`); the grid's fallback of a
        used-up finite space ignores it."""
        if self.budget is not None:
            n = min(n, self.budget - len(self._seen))
        out: list[Asked] = []
        if self.search.algorithm == "grid":
            while len(out) < n:
                params = next(self._grid_points(), None)
                if params is None:
                    break
                out.append(self._add(params, TrialState.RUNNING))
            return out
        draws = repeats = 0
        while len(out) < n and draws < MAX_DRAWS_PER_POINT * n:
            draws += 1
            given = fixed
            if given is None and self._first_at < len(self._first):
                given = self._first[self._first_at]  # `search.first`, before the sampler
                self._first_at += 1
            asked = self._ask_one(at_random=repeats >= RANDOM_AFTER_REPEATS, fixed=given)
            if asked is None:
                repeats += 1
            else:
                out.append(asked)
                repeats = 0
        while len(out) < n and self._finite:
            params = next(self._grid_points(), None)
            if params is None:
                break
            out.append(self._add(params, TrialState.RUNNING))
        return out

    def add_point(self, params: dict[str, Any]) -> Asked:
        """Add a point chosen elsewhere (a grid or random sweep's expansion, whose order and
        ids `scheduler.expand` fixes) as a running trial, for the pruner to judge."""
        key = canonical(params)
        if key in self._seen:
            raise ValueError(f"point {key} is already in the study")
        return self._add(params, TrialState.RUNNING)

    def _grid_points(self) -> Iterator[dict[str, Any]]:
        if self._grid is None:
            self._grid = (p for p in _grid(self.spec) if canonical(p) not in self._seen)
        return self._grid

    def _ask_one(
        self, *, at_random: bool = False, fixed: dict[str, Any] | None = None
    ) -> Asked | None:
        sampler = self.study.sampler
        if at_random:  # for the ask and every suggest of this trial (define-by-run)
            self.study.sampler = self._random
        try:
            trial, params = self._draw(fixed)
        finally:
            self.study.sampler = sampler
        key = canonical(params)
        if key in self._seen:
            self.study.tell(trial, state=TrialState.FAIL)
            return None
        self._seen[key] = trial.number
        return Asked(trial.number, params, key, self.system_attrs(trial.number))

    def _draw(self, fixed: dict[str, Any] | None = None) -> tuple[optuna.Trial, dict[str, Any]]:
        if fixed:
            # The next ask takes this waiting trial; its suggests of these names return them.
            encoded = {p: self._params[p].encode(v) for p, v in fixed.items() if p in self._params}
            self.study.enqueue_trial(encoded)
        trial = self.study.ask()
        self._count += 1
        lookup = dict(self._base_lookup)
        params: dict[str, Any] = {}
        for dim in self._dims:
            if dim.when and not dim.active(lookup):
                continue
            if isinstance(dim, Fixed):
                value = dim.value
            else:
                chosen = self._params[dim.path]
                value = chosen.decode(suggest(trial, dim.path, chosen.distribution))
            params[dim.path] = lookup[dim.path] = value
        return trial, params

    def _add(
        self, params: dict[str, Any], state: TrialState, *, warm: bool = False, **extra: Any
    ) -> Asked:
        """Add a point to the study as a trial given whole (grid points, rebuilt records,
        an earlier sweep's trials: `warm`). A value outside its dimension's range now (a
        range narrowed since: `core.spec.changes`) keeps a range widened to it, so the
        sampler still learns from that trial."""
        encoded = {p: self._params[p].encode(v) for p, v in params.items() if p in self._params}
        dists = {p: _holding(self._params[p].distribution, v) for p, v in encoded.items()}
        self.study.add_trial(
            create_trial(state=state, params=encoded, distributions=dists, **extra)
        )
        number = self._count
        self._count += 1
        key = canonical(params)
        if warm:
            self._warm.add(key)
        else:
            self._seen[key] = number
        return Asked(number, params, key, extra.get("system_attrs") or {})

    def _tell_warm(self, records: Sequence[Record | None]) -> None:
        """Tell the study an earlier sweep's trials (`search.warm_start`), before anything
        else: they take its first numbers, the same at every rebuild, so the sweep's own
        trials keep theirs. A record the study cannot hold (None: gone from the store, or a
        value no longer among a choice's) keeps its number as a failed trial, which no
        sampler looks at."""
        for record in records:
            state = None if record is None else _STATES[State(record.state)]
            values = None
            if record is not None and state == TrialState.COMPLETE:
                values = self._values(record.values if record.values is not None else record.value)
            if record is None or values is None or not self._holds(record.params):
                self.study.add_trial(create_trial(state=TrialState.FAIL))
                self._count += 1
                continue
            self._add(record.params, TrialState.COMPLETE, warm=True, values=values)

    def _holds(self, params: dict[str, Any]) -> bool:
        """Whether every value of `params` is one the study can take (a category of its
        dimension's, a number for a range), and every dimension it asks has one."""
        for path, chosen in self._params.items():
            if path not in params:
                if not chosen.dim.when:
                    return False
                continue
            dist = chosen.distribution
            try:
                encoded = chosen.encode(params[path])
                if isinstance(dist, CategoricalDistribution) and encoded not in dist.choices:
                    return False
                dist.to_internal_repr(encoded)
            except (ValueError, TypeError, KeyError):
                return False
        return True

    def _trial_id(self, number: int) -> int:
        return self._storage.get_trial_id_from_study_id_trial_number(self._study_id, number)

    def system_attrs(self, number: int) -> dict[str, Any]:
        """A trial's Optuna state, to store with it: CMA-ES's optimizer (set when asked) and
        successive halving's rung values (set by `should_prune`)."""
        return dict(self._storage.get_trial_system_attrs(self._trial_id(number)))

    def study_attrs(self) -> dict[str, Any]:
        """The study's Optuna state (QMC's position), to store with the sweep."""
        return dict(self._storage.get_study_system_attrs(self._study_id))

    def tell(
        self,
        number: int,
        value: float | Sequence[float | None] | None = None,
        state: str = State.COMPLETE,
        constraints: Sequence[float | None] | None = None,
    ) -> None:
        """A trial's end: complete with the objective's `value` (a list of every
        objective's, for several), failed, cancelled or pruned; `constraints` are its
        violations of the spec's constraints, in order (module docstring).

        Telling a trial twice (a redelivered result) changes nothing.
        """
        optuna_state = _STATES[State(state)]
        if optuna_state == TrialState.RUNNING:
            raise ValueError(f"state must be a finished state, got {state!r}")
        trial_id = self._trial_id(number)
        if self._storage.get_trial(trial_id).state.is_finished():
            return
        if constraints is not None and self.spec.constraints:
            for key, violation in self._constraint_attrs(constraints).items():
                self._storage.set_trial_system_attr(trial_id, key, violation)
        if optuna_state == TrialState.COMPLETE:
            values = self._values(value)
            if values is None:
                optuna_state = TrialState.FAIL
            self.study.tell(number, values, state=optuna_state, skip_if_finished=True)
        else:
            self.study.tell(number, state=optuna_state, skip_if_finished=True)

    def _values(self, value: float | Sequence[float | None] | None) -> list[float] | None:
        """The values to tell Optuna, one per objective; None when one is missing."""
        values = list(value) if isinstance(value, Sequence) else [value]
        if len(values) != len(self.spec.objectives):
            return None
        if any(v is None or not math.isfinite(v) for v in values):
            return None
        return [float(v) for v in values]  # type: ignore[arg-type]

    def _constraint_attrs(self, constraints: Sequence[float | None]) -> dict[str, float]:
        """The system attributes Optuna reads a trial's constraints from (`set_constraint`'s
        ``constraints:KEY``), an unmeasured constraint as infinitely violated."""
        return {
            f"constraints:{c.text}": math.inf if v is None else float(v)
            for c, v in zip(self.spec.constraints, constraints, strict=False)
        }

    def report(self, number: int, epoch: int, value: float) -> None:
        """The pruned metric's value after `epoch` epochs of a running trial."""
        value = -value if self._flip else value
        self._storage.set_trial_intermediate_value(self._trial_id(number), epoch, value)

    def should_prune(self, number: int) -> bool:
        """Whether the pruner stops the trial now, given its reports so far. A trial is never
        judged on its untrained evaluation (epoch 0) alone."""
        trial = self._storage.get_trial(self._trial_id(number))
        if trial.state != TrialState.RUNNING or not trial.last_step:
            return False
        return bool(self.study.pruner.prune(self.study, trial))

    def rebuild(self, records: Iterable[Record], study_attrs: dict[str, Any] | None = None) -> None:
        """Recreate the study from stored records, before any `ask` of this session.

        Numbers missing between records (repeated points, never stored) come back as failed
        trials, which no sampler or pruner looks at, so every record keeps its number.
        """
        if self._count != self._warm_count:
            raise RuntimeError("rebuild must come before the session's first ask")
        for record in sorted(records, key=lambda r: r.number):
            if record.number < self._count:
                raise ValueError(f"trial number {record.number} is given twice")
            while self._count < record.number:
                self.study.add_trial(create_trial(state=TrialState.FAIL))
                self._count += 1
            state = _STATES[State(record.state)]
            values = self._values(record.values if record.values is not None else record.value)
            if state == TrialState.COMPLETE and values is None:
                state = TrialState.FAIL
            if state == TrialState.PRUNED and record.epochs and not self.spec.multi_objective:
                value = record.epochs[max(record.epochs)]
                values = [-value if self._flip else value]
            elif state != TrialState.COMPLETE:
                values = None
            # A multi-objective study keeps no reports: its pruner ranks the objectives
            # itself (`scheduler.rank_judge`), and TPE reads a pruned trial's last report
            # with the study's single direction, which such a study has not got.
            reports = {} if self.spec.multi_objective else record.epochs
            epochs = {e: (-v if self._flip else v) for e, v in reports.items()}
            attrs = dict(record.system_attrs)
            told = state in (TrialState.COMPLETE, TrialState.PRUNED)
            if record.constraints is not None and self.spec.constraints and told:
                attrs.update(self._constraint_attrs(record.constraints))
            self._add(
                record.params,
                state,
                values=values,
                intermediate_values=epochs,
                system_attrs=attrs,
            )
        for key, value in (study_attrs or {}).items():
            self._storage.set_study_system_attr(self._study_id, key, value)
        # `search.first` is asked before the sampler, one point an ask: as many were asked.
        self._first_at = min(len(self._first), len(self._seen))

    def point(self, asked: Asked, index: int, *, with_config: bool = False) -> TrialPoint:
        """The `TrialPoint` of an asked point at position `index` of the sweep: the same id
        and seed as `scheduler.expand.expand` gives the same params."""
        tid = trial_id(self.spec.name, asked.params, asked.key)
        base = self.spec.base_config()
        seed = asked.params.get("training.seed", base["training"].get("seed"))
        if seed is None:
            seed = int(tid[:8], 16) % (2**31)
        config = self.spec.seeded_config(asked.params, seed, base) if with_config else {}
        return TrialPoint(index=index, id=tid, params=asked.params, seed=seed, config=config)


def _holding(dist: BaseDistribution, value: Any) -> BaseDistribution:
    """`dist`, or a range widened to hold `value` (module docstring of `SearchSession._add`):
    Optuna keeps each trial's own distribution, and TPE reads the values of every trial."""
    if not isinstance(dist, FloatDistribution | IntDistribution) or dist._contains(value):
        return dist
    if isinstance(dist, IntDistribution):
        step = dist.step
        low = dist.low - step * max(0, -((value - dist.low) // step))
        high = dist.high + step * max(0, -((dist.high - value) // step))
        return IntDistribution(low, high, log=dist.log, step=step)
    return FloatDistribution(min(dist.low, value), max(dist.high, value), log=dist.log)


def suggest(trial: optuna.Trial, name: str, dist: BaseDistribution) -> Any:
    """Ask `trial` for a value of `dist` under `name`, through the ``suggest_*`` call a user
    of Optuna would write for it (`scheduler.samplers.param` gives the distribution)."""
    if isinstance(dist, CategoricalDistribution):
        return trial.suggest_categorical(name, dist.choices)
    if isinstance(dist, IntDistribution):
        return trial.suggest_int(name, dist.low, dist.high, step=dist.step, log=dist.log)
    if isinstance(dist, FloatDistribution):
        return trial.suggest_float(name, dist.low, dist.high, step=dist.step, log=dist.log)
    raise TypeError(f"{name}: unknown distribution {dist!r}")
