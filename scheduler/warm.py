"""Warm starts: an adaptive sweep told what earlier sweeps learned (``search.warm_start``).

At submit, `warm_trials` checks each earlier sweep named (the submitter's own: another
owner's sweep is `NotFound`, the API's 404, as a missing one) and takes a snapshot of its
complete trials' ids, best first, at most `MAX_WARM_TRIALS` in all, which the new sweep keeps
(``warm_trials``). Its search session is told them before its first ask, and after every
restart the same ones in the same order (`warm_records`, `SearchSession`'s ``warm``), so
its own trials keep their Optuna numbers. Optuna's own equivalent is ``study.add_trials``
of another study's trials; W&B's is ``prior_runs``.

Compatible spaces, and why: the sampler is told each earlier trial as a point of this
sweep's space with its objective, so

- the objectives must be the same (metrics and directions, in order): a value of another
  metric would mislead it;
- a dimension that varies here but was fixed there is mapped (each earlier trial's value is
  its config's at that path); one with no value there is refused, named;
- a dimension that varied there but is fixed here is mapped too: only the earlier trials
  with this sweep's value are told (those are points of this space); where this sweep does
  not set it, it is refused, named;
- a value this space cannot take (a choice it lacks) leaves that trial out; a number
  outside a range keeps a range widened to it (`SearchSession._add`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.errors import Problem, SpecError
from core.spec.fields import get_in
from core.spec.sweep import SweepSpec, load_spec
from core.states import TrialState
from core.store.records import flatten_params, sweep_of
from core.store.store import Store
from scheduler.search_session import Record

#: The most earlier trials a sweep is told (the best of each earlier sweep first; the most
#: `core.store.roles.Reads.best` gives).
MAX_WARM_TRIALS = 1000


def _varying(spec: SweepSpec) -> set[str]:
    return {d.path for d in spec.dimensions if d.varies}


def _mapping(spec: SweepSpec, old: SweepSpec, at: str, sweep_id: str) -> dict[str, Any]:
    """The dimensions varied there and fixed here, with this sweep's values (module
    docstring); `SpecError` naming what cannot be mapped."""
    new, was = _varying(spec), _varying(old)
    base, old_base = spec.base_config(), old.base_config()
    unset_there = sorted(p for p in new - was if get_in(old_base, p) is None)
    if unset_there:
        raise SpecError([Problem(at, (
            f"sweep {sweep_id!r} has no value for dimension(s) {', '.join(unset_there)} of "
            "this sweep (neither varied nor set there)"))])  # fmt: skip
    fixed_here = {p: get_in(base, p) for p in was - new}
    unset_here = sorted(p for p, v in fixed_here.items() if v is None)
    if unset_here:
        raise SpecError([Problem(at, (
            f"sweep {sweep_id!r} varied dimension(s) {', '.join(unset_here)} that this sweep "
            "neither varies nor sets: add them to its space, or set a value"))])  # fmt: skip
    return fixed_here


def _goals(spec: SweepSpec) -> list[tuple[str, str]]:
    return [(o.metric, o.direction) for o in spec.objectives]


def warm_trials(store: Store, spec: SweepSpec, owner: str | None) -> list[str]:
    """The ids of the earlier trials a new sweep is told (module docstring), after checking
    every sweep ``search.warm_start`` names; `SpecError` naming the entry otherwise."""
    ids: list[str] = []
    for i, sweep_id in enumerate(spec.search.warm_start or []):
        at = f"search.warm_start[{i}]"
        doc = store.reads.get_sweep(sweep_id, owner=owner)  # another owner's: NotFound
        old = load_spec(doc["spec"])
        if _goals(old) != _goals(spec):
            raise SpecError([Problem(at, (
                f"sweep {sweep_id!r} optimizes {_goals(old)}, this sweep {_goals(spec)}: "
                "a warm start needs the same objectives"))])  # fmt: skip
        fixed = _mapping(spec, old, at, sweep_id)
        for trial in store.reads.best(sweep_id, MAX_WARM_TRIALS - len(ids)):
            params = flatten_params(trial.get("params"))
            if all(params.get(p) == v for p, v in fixed.items()):
                ids.append(trial["_id"])
        if len(ids) >= MAX_WARM_TRIALS:
            break
    return ids


def warm_records(store: Store, spec: SweepSpec, ids: Sequence[str]) -> list[Record | None]:
    """The earlier trials `ids` as records of this sweep's space, in order (None for one
    gone from the store): what `SearchSession` is told before its first ask."""
    if not ids:
        return []
    wanted = set(_varying(spec))
    unconditional = {d.path for d in spec.dimensions if d.varies and not d.when}
    by_sweep: dict[str, list[str]] = {}
    for trial_id in ids:
        by_sweep.setdefault(sweep_of(trial_id), []).append(trial_id)
    found: dict[str, dict[str, Any]] = {}
    for sweep_id, some in by_sweep.items():
        for doc in store.feeding.feed_trials(sweep_id, some, with_config=True):
            found[doc["_id"]] = doc
    out: list[Record | None] = []
    for trial_id in ids:
        doc = found.get(trial_id)
        if doc is None or doc.get("state") != TrialState.COMPLETE.value:
            out.append(None)
            continue
        params = flatten_params(doc.get("params"))
        config = doc.get("config") or {}
        point = {p: params[p] for p in wanted if p in params}
        # A dimension fixed there has its config's value (a conditional one is left out).
        point.update({p: get_in(config, p) for p in unconditional if p not in params})
        point = {p: v for p, v in point.items() if v is not None}
        out.append(
            Record(
                number=-1,
                params=point,
                state=TrialState.COMPLETE.value,
                value=doc.get("objective"),
                values=doc.get("objectives") if spec.multi_objective else None,
            )
        )
    return out
