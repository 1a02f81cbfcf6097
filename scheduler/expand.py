"""Expand a sweep spec into its trials.

Grid search is the cartesian product of the varying dimensions, in the order the spec gives
them (the first one outermost). Random search draws `search.trials` distinct points from a
generator seeded by `search.seed`. Either way the same spec yields the same trials, with the
same ids, in any process: a trial id is a hash of the sweep name and the canonical params.

The count is computed before anything is expanded, so a 50-million-point grid is refused in
microseconds with `TooManyTrials` naming the count; conditional dimensions are counted by
groups of values and never walked past the limit (`tally`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from core.errors import Problem, SpecError, TooManyTrials
from core.spec.config import CROSS_FIELDS
from core.spec.fields import get_in, leaf_defaults, set_in
from core.spec.space import Dimension, IntRange
from core.spec.sweep import SweepSpec, problems_from

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


@dataclass(frozen=True)
class Tally:
    """A trial count: `count` is exact when `exact`, else a lower bound past the limit it
    was counted against. `visits` is how many steps the counting took (tests bound it)."""

    count: int
    exact: bool
    visits: int


class _Past(Exception):
    """Counting passed its limit; the count so far is enough to refuse the spec."""


def _classes(dim: Dimension, clauses: list[tuple[int, tuple[Any, ...]]]) -> dict[frozenset, int]:
    """A controller's values grouped by which of the clauses naming it they satisfy, with
    how many values each group holds. Values in one group lead to the same trial counts,
    so counting walks groups, not values (10 values tested by one clause: 2 groups)."""

    def signature(value: Any) -> frozenset:
        return frozenset(c for c, accepted in clauses if value in accepted)

    if isinstance(dim, IntRange):
        # Only values some clause names can differ from the rest: never list the range.
        named: dict[int, frozenset] = {}
        for _, accepted in clauses:
            for a in accepted:
                if isinstance(a, int | float) and float(a).is_integer():
                    n = int(a)
                    if dim.low <= n <= dim.high and (n - dim.low) % dim.step == 0:
                        named[n] = signature(n)
        groups: dict[frozenset, int] = {}
        for sig in named.values():
            groups[sig] = groups.get(sig, 0) + 1
        rest = dim.size - len(named)
        if rest:
            groups[frozenset()] = groups.get(frozenset(), 0) + rest
        return groups
    groups = {}
    for value in dim.values():
        sig = signature(value)
        groups[sig] = groups.get(sig, 0) + 1
    return groups


def _size(dim: Dimension) -> int:
    return dim.size if isinstance(dim, IntRange) else len(dim.values())


def tally(spec: SweepSpec, limit: int | None = None) -> Tally:
    """Count the trials of `spec` without expanding it, stopping once past `limit`.

    Dimensions active in every trial multiply: their product alone, when past the limit,
    refuses the spec at once. Those that other dimensions' `when` names
    (controllers) are walked by groups of values (`_classes`), with the counts of what
    follows remembered per state of the controllers still to be tested. Every walk down
    to the last dimension adds at least one trial, and a controller checks the count
    before each next group, so with a limit the walk ends after at most limit + 1 of them,
    whatever the spec: the count is then a lower bound (`exact` false) that is enough to
    refuse the spec.
    """
    if spec.search.algorithm != "grid":
        return Tally(spec.search.trials or 0, True, 0)
    dims = _ordered(spec)
    varying = {d.path for d in dims}
    base = _lookup(spec)
    # Every (dimension, varying target) condition gets an id; conditions on fixed values
    # or defaults are settled once, here.
    clauses: dict[str, list[tuple[int, tuple[Any, ...]]]] = {}
    needs: list[list[tuple[str, int]]] = []
    settled: list[bool] = []
    for dim in dims:
        own: list[tuple[str, int]] = []
        ok = True
        for target, accepted in dim.when.items():
            if target in varying:
                cid = sum(len(v) for v in clauses.values())
                clauses.setdefault(target, []).append((cid, accepted))
                own.append((target, cid))
            elif target not in base or base[target] not in accepted:
                ok = False
        needs.append(own)
        settled.append(ok)
    # Dimensions active in every trial multiply every count: their product is a lower bound
    # that refuses most giant specs before any walk.
    always = [ok and not own for own, ok in zip(needs, settled, strict=True)]
    bound = math.prod(_size(d) for d, a in zip(dims, always, strict=True) if a)
    if limit is not None and bound > limit:
        return Tally(bound, all(always), 0)
    groups = {d.path: _classes(d, clauses[d.path]) for d in dims if d.path in clauses}
    # The controllers whose state still matters from dimension i on, for the memo's key.
    live: list[tuple[str, ...]] = []
    ahead: set[str] = set()
    for own in reversed(needs):
        ahead |= {target for target, _ in own}
        live.append(tuple(sorted(ahead)))
    live.reverse()
    state = {
        path: frozenset(c for c, accepted in clauses[path] if base.get(path) in accepted)
        for path in clauses
    }
    memo: dict[tuple[Any, ...], int] = {}
    reached = 0
    visits = 0

    def count(i: int, factor: int) -> int:
        nonlocal reached, visits
        visits += 1
        if i == len(dims):
            reached += factor
            return 1
        key = (i, *[state[p] for p in live[i]])
        if key in memo:
            reached += factor * memo[key]
            return memo[key]
        dim = dims[i]
        if not settled[i] or not all(cid in state[t] for t, cid in needs[i]):
            total = count(i + 1, factor)
        elif dim.path not in groups:
            size = _size(dim)
            total = size * count(i + 1, factor * size)
        else:
            before = state[dim.path]
            total = 0
            for sig, weight in groups[dim.path].items():
                if limit is not None and reached > limit:
                    raise _Past  # more to count: what was reached is a lower bound
                state[dim.path] = sig
                total += weight * count(i + 1, factor * weight)
            state[dim.path] = before
        memo[key] = total
        return total

    try:
        total = count(0, 1)
    except _Past:
        return Tally(reached, False, visits)
    return Tally(total, True, visits)


def check_count(spec: SweepSpec, limit: int) -> int:
    """The trial count of `spec`, or `TooManyTrials` if it is over `limit`."""
    result = tally(spec, limit)
    if result.count > limit:
        raise TooManyTrials(result.count, limit, at_least=not result.exact)
    return result.count


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
        # An inactive dimension keeps its default (in `lookup`) for the conditions after it.
        before = lookup.get(dim.path, _MISSING)
        for value in dim.values():
            params[dim.path] = lookup[dim.path] = value
            yield from walk(i + 1, params)
        del params[dim.path]
        if before is _MISSING:
            lookup.pop(dim.path, None)
        else:
            lookup[dim.path] = before

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
        if section.split(".")[0] not in base:
            continue  # a section a trainable spec does not have (`core.spec.trainable`)
        model = spec.config_model(section)
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
    """Every trial of a grid or random sweep, in a stable order (adaptive algorithms ask
    theirs as results come back: `SpecError` naming ``search.algorithm``).

    Raises `TooManyTrials` before expanding if the count is over `limits.max_trials`, and
    `SpecError` if a combination breaks a rule that spans fields.
    """
    if spec.search.adaptive:
        raise SpecError(
            [
                Problem(
                    "search.algorithm",
                    f"{spec.search.algorithm} asks its points as results come back, so its "
                    "trials cannot be listed in advance (the scheduler asks them)",
                )
            ]
        )
    check_count(spec, spec.limits.max_trials)
    if spec.search.algorithm == "random":
        pairs = list(_random(spec))
        points = [p for p, _ in pairs]
        keys = [k for _, k in pairs]
    else:
        points = list(_grid(spec))
        keys = [canonical(p) for p in points]
    _check_cross_fields(spec, points)
    spec.check_trials(points)
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
