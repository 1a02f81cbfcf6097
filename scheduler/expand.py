"""Expand a sweep spec into its trials.

Grid search is the cartesian product of the varying dimensions, in the order the spec gives
them (the first one outermost). Random search draws `search.trials` distinct points from a
generator seeded by `search.seed`. Either way the same spec yields the same trials, with the
same ids, in any process: a trial id is a hash of the sweep name and the canonical params.

The count is computed before anything is expanded, so a 50-million-point grid is refused in
microseconds with `TooManyTrials` naming the count.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from core.config import CROSS_FIELDS
from core.errors import Problem, SpecError, TooManyTrials
from core.fields import get_in, leaf_defaults, section_model, set_in
from core.space import Dimension, IntRange
from core.spec import SweepSpec, problems_from

# Random search stops drawing after this many draws per requested trial, so a small finite
# space cannot loop forever; it then returns the distinct points it found.
_DRAWS_PER_TRIAL = 50


@dataclass(frozen=True)
class TrialPoint:
    """One expanded trial: its position, stable id, varying params and seed."""

    index: int
    id: str
    params: dict[str, Any]
    seed: int
    config: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


def canonical(params: dict[str, Any]) -> str:
    """The JSON text that identifies a point: sorted keys, no spaces."""
    return _ENCODER.encode(params)


def trial_id(sweep_name: str, params: dict[str, Any], text: str | None = None) -> str:
    """A stable 16-hex-digit id from the sweep name and the canonical params."""
    text = canonical(params) if text is None else text
    return hashlib.sha256(f"{sweep_name}\x00{text}".encode()).hexdigest()[:16]


def _ordered(spec: SweepSpec) -> list[Dimension]:
    """Varying dimensions, each after those its `when` refers to (else spec order)."""
    dims = spec.dimensions
    placed: list[Dimension] = []
    done: set[str] = set()
    pending = list(dims)
    varying = {d.path for d in dims}
    while pending:
        progress = False
        for dim in list(pending):
            needs = {p for p in dim.when if p in varying}
            if needs <= done:
                placed.append(dim)
                done.add(dim.path)
                pending.remove(dim)
                progress = True
        if not progress:
            cycle = ", ".join(d.path for d in pending)
            raise SpecError(
                [Problem(pending[0].path + ".when", f"conditions form a cycle among {cycle}")]
            )
    return placed


def _lookup(spec: SweepSpec) -> dict[str, Any]:
    """Values that conditions may test besides params: fixed values, then defaults."""
    out = leaf_defaults()
    for path, dim in spec.space.items():
        if not dim.varies:
            out[path] = dim.value  # type: ignore[attr-defined]
    return out


def count_trials(spec: SweepSpec) -> int:
    """How many trials the spec expands to, without expanding it."""
    if spec.search.algorithm == "random":
        return spec.search.trials or 0
    dims = _ordered(spec)
    controllers = {p for d in dims for p in d.when}
    lookup = _lookup(spec)

    def count(i: int) -> int:
        if i == len(dims):
            return 1
        dim = dims[i]
        if dim.when and not dim.active(lookup):
            return count(i + 1)
        if dim.path not in controllers:
            size = dim.size if isinstance(dim, IntRange) else len(dim.values())
            return size * count(i + 1)
        total = 0
        for value in dim.values():
            lookup[dim.path] = value
            total += count(i + 1)
        del lookup[dim.path]
        return total

    return count(0)


def _grid(spec: SweepSpec) -> Iterator[dict[str, Any]]:
    dims = _ordered(spec)
    if not any(d.when for d in dims):
        paths = [d.path for d in dims]
        for combo in itertools.product(*(d.values() for d in dims)):
            yield dict(zip(paths, combo, strict=True))
        return
    lookup = _lookup(spec)

    def walk(i: int, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
        if i == len(dims):
            yield dict(params)
            return
        dim = dims[i]
        if dim.when and not dim.active(lookup):
            yield from walk(i + 1, params)
            return
        for value in dim.values():
            params[dim.path] = lookup[dim.path] = value
            yield from walk(i + 1, params)
        del params[dim.path]
        lookup.pop(dim.path, None)

    yield from walk(0, {})


def _random(spec: SweepSpec) -> Iterator[tuple[dict[str, Any], str]]:
    dims = _ordered(spec)
    rng = random.Random(spec.search.seed)
    wanted = spec.search.trials or 0
    base_lookup = _lookup(spec)
    seen: set[str] = set()
    for _ in range(wanted * _DRAWS_PER_TRIAL):
        lookup = dict(base_lookup)
        params: dict[str, Any] = {}
        for dim in dims:
            if dim.when and not dim.active(lookup):
                continue
            params[dim.path] = lookup[dim.path] = dim.sample(rng)
        key = canonical(params)
        if key in seen:
            continue
        seen.add(key)
        yield params, key
        if len(seen) == wanted:
            return


#: Where a broken rule of a whole model is reported, if not at the rule's last field: each
#: data-parallel rule spans several fields, none of them more to blame than the others.
_REPORTED_AT = {
    "execution.parallel": "execution.parallel",
    "execution": "execution",
}
_MISSING = object()


def _rule_values(base: dict[str, Any], section: str, combo: dict[str, Any]) -> dict[str, Any]:
    """What a rule's model is validated with: the section's fixed leaves, the fixed values of
    the rule's fields in its sub-sections, then the combination. A sub-section's other fixed
    values are left to its own rule, so one broken rule is reported once."""
    values = {k: v for k, v in (get_in(base, section) or {}).items() if not isinstance(v, dict)}
    for name in CROSS_FIELDS[section]:
        fixed = get_in(base, f"{section}.{name}", _MISSING)
        if fixed is not _MISSING:
            set_in(values, name, fixed)
    for path, value in combo.items():
        set_in(values, path.removeprefix(section + "."), value)
    return values


def _check_cross_fields(spec: SweepSpec, points: list[dict[str, Any]]) -> None:
    """Validate each distinct combination of fields that a rule spans (widths vs depth)."""
    base = spec.base_config()
    problems: list[Problem] = []
    varying = {d.path for d in spec.dimensions}
    for section, fields in CROSS_FIELDS.items():
        model = section_model(section)
        if model is None:
            raise ValueError(f"CROSS_FIELDS names {section!r}, which is not a config section")
        paths = [f"{section}.{f}" for f in fields]
        at = _REPORTED_AT.get(section, paths[-1])
        # Without a varying field in the rule, every trial has the same combination.
        rows = points if varying.intersection(paths) else (points[:1] or [{}])
        seen: set[str] = set()
        for params in rows:
            combo = {p: params[p] for p in paths if p in params}
            key = repr(list(combo.items()))
            if key in seen:
                continue
            seen.add(key)
            try:
                model.model_validate(_rule_values(base, section, combo))
            except ValidationError as exc:
                where = ", ".join(f"{p}={json.dumps(v)}" for p, v in combo.items())
                for problem in problems_from(exc, section):
                    suffix = f" (when {where})" if where else ""
                    path = at if problem.path == section else problem.path
                    problems.append(Problem(path, problem.message + suffix))
            if len(problems) >= 10:
                break
    if problems:
        raise SpecError(problems)


def expand(spec: SweepSpec, *, with_config: bool = False) -> list[TrialPoint]:
    """Every trial of the sweep, in a stable order.

    Raises `TooManyTrials` before expanding if the count is over `limits.max_trials`, and
    `SpecError` if a combination breaks a rule that spans fields.
    """
    total = count_trials(spec)
    if total > spec.limits.max_trials:
        raise TooManyTrials(total, spec.limits.max_trials)
    if spec.search.algorithm == "random":
        pairs = list(_random(spec))
        points = [p for p, _ in pairs]
        keys = [k for _, k in pairs]
    else:
        points = list(_grid(spec))
        keys = [canonical(p) for p in points]
    _check_cross_fields(spec, points)
    base = spec.base_config()
    fixed_seed = base["training"].get("seed")
    out = []
    for index, (params, key) in enumerate(zip(points, keys, strict=True)):
        tid = trial_id(spec.name, params, key)
        seed = params.get("training.seed", fixed_seed)
        if seed is None:
            seed = int(tid[:8], 16) % (2**31)
        config = spec.seeded_config(params, seed, base) if with_config else {}
        out.append(TrialPoint(index=index, id=tid, params=params, seed=seed, config=config))
    return out
