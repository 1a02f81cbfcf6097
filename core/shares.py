"""The fair share of workers between active sweeps: who gets how many, and who is next.

The workers online are shared by weighted max-min fairness (water-filling, as Determined's
and YARN's fair schedulers), in three tiers of priority, each served before the next:

1. ``high`` sweeps, then ``normal``, then ``low``: a tier gets the workers the tiers above
   left; inside a tier,
2. users share the tier's workers in proportion to their weights (an admin's setting, 1 by
   default), none getting more than it can use (its sweeps' demand, and its quota of trials
   running at once); what one cannot use goes to the others, in the same proportions;
3. a user's sweeps share the user's part in proportion to their weights (1 by default),
   again none more than it can use.

A sweep's *demand* is the trials it could run at once now: those in flight (queued or
running) and planned, capped by its ``search.parallelism``. The result is an exact share
per sweep, in workers (a fraction); the scheduler needs whole trials in flight, so each
sweep gets ``floor(exact)`` *slots*, and the workers left over go one by one to the sweeps
furthest below their exact share now (running / exact, then the oldest), so that a share
of 0.5 is held over time by turns. A sweep's *window* (its trials in flight at most) is
twice its slots (at least its slots plus `BUFFER`), where it has any: a trial waits on the
queue for each worker the sweep has, so a worker that ends a trial takes the next at once
although the scheduler refills the windows once a pass, and a sweep submitted later waits
behind at most one queued trial per worker: it starts within about one trial's time.

Pure functions of what the store holds (the active sweeps, the users' weights and quotas,
the workers online): every scheduler computes the same windows, and a scheduler killed
and restarted computes them again from nothing.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

#: A sweep's priority, lowest first (the spec's top-level ``priority``).
PRIORITIES = ("low", "normal", "high")
DEFAULT_PRIORITY = "normal"
#: The RabbitMQ message priority of each (the queue's ``x-max-priority`` is the highest):
#: a high sweep's trials overtake those already waiting, a low sweep's wait behind.
MESSAGE_PRIORITY = {"low": 0, "normal": 1, "high": 2}
MAX_MESSAGE_PRIORITY = max(MESSAGE_PRIORITY.values())
#: Trials a sweep with a share keeps waiting on the queue beyond its slots, at least; as
#: many as its slots where that is more (a worker that ends a trial finds the next one
#: queued although the scheduler refills the window only once a pass).
BUFFER = 1
_EPSILON = 1e-9

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Claim:
    """One active sweep as the share sees it."""

    sweep_id: str
    owner: str
    demand: int
    running: int = 0
    priority: str = DEFAULT_PRIORITY
    weight: float = 1.0
    user_weight: float = 1.0
    #: Older first among equals (the sweep's creation time, or any comparable value).
    order: Any = 0


@dataclass(frozen=True)
class Share:
    """A sweep's share now: `exact` workers, `slots` of them whole, `window` trials in
    flight at most, and `position` in the line for the next free worker (1: next)."""

    sweep_id: str
    exact: float
    slots: int
    window: int
    position: int


def water_fill(
    capacity: float, weights: Mapping[K, float], demands: Mapping[K, float]
) -> dict[K, float]:
    """Weighted max-min fair shares of `capacity`: each key gets capacity in proportion to
    its weight, never more than its demand; what a key cannot use goes to the others."""
    out = {key: 0.0 for key in weights}
    active = {key for key in weights if demands.get(key, 0) > _EPSILON and weights[key] > 0}
    left = float(capacity)
    while active and left > _EPSILON:
        total = sum(weights[key] for key in active)
        full = {key for key in active if demands[key] - out[key] <= left * weights[key] / total}
        if not full:
            for key in active:
                out[key] += left * weights[key] / total
            return out
        for key in full:
            left -= demands[key] - out[key]
            out[key] = float(demands[key])
        active -= full
    return out


def exact_shares(
    claims: Iterable[Claim], workers: int, running_quota: Mapping[str, int] | None = None
) -> dict[str, float]:
    """Each sweep's exact share of `workers` (module docstring: tiers, users, sweeps);
    `running_quota` caps a user's share (user -> trials running at once)."""
    claims = list(claims)
    quota_left = {c.owner: float((running_quota or {}).get(c.owner, math.inf)) for c in claims}
    out = {c.sweep_id: 0.0 for c in claims}
    left = float(workers)
    for tier in reversed(PRIORITIES):
        mine = [c for c in claims if c.priority == tier]
        users: dict[str, list[Claim]] = {}
        for c in mine:
            users.setdefault(c.owner, []).append(c)
        weights = {u: max(cs[0].user_weight, 0.0) for u, cs in users.items()}
        demands = {u: min(sum(c.demand for c in cs), quota_left[u]) for u, cs in users.items()}
        per_user = water_fill(left, weights, demands)
        for user, part in per_user.items():
            sweeps = water_fill(
                part,
                {c.sweep_id: c.weight for c in users[user]},
                {c.sweep_id: c.demand for c in users[user]},
            )
            out.update(sweeps)
            quota_left[user] -= part
            left -= part
    return out


def fair_shares(
    claims: Iterable[Claim],
    workers: int,
    running_quota: Mapping[str, int] | None = None,
    buffer: int = BUFFER,
) -> dict[str, Share]:
    """Each sweep's `Share` of `workers` (module docstring): exact, whole slots, window,
    place in line."""
    claims = list(claims)
    exact = exact_shares(claims, workers, running_quota)
    slots = {c.sweep_id: math.floor(exact[c.sweep_id] + _EPSILON) for c in claims}
    by_user: dict[str, float] = {}
    for c in claims:
        by_user[c.owner] = by_user.get(c.owner, 0.0) + exact[c.sweep_id]
    user_slots = {u: sum(slots[c.sweep_id] for c in claims if c.owner == u) for u in by_user}
    spare = round(sum(exact.values())) - sum(slots.values())
    tier = {p: i for i, p in enumerate(PRIORITIES)}

    def behind(c: Claim) -> tuple[Any, ...]:
        share = exact[c.sweep_id]
        ratio = c.running / share if share > _EPSILON else math.inf
        return (-tier.get(c.priority, 1), ratio, c.order, c.sweep_id)

    for c in sorted(claims, key=behind):
        if spare <= 0:
            break
        if exact[c.sweep_id] - slots[c.sweep_id] <= _EPSILON:
            continue
        if user_slots[c.owner] >= round(by_user[c.owner]):
            continue
        slots[c.sweep_id] += 1
        user_slots[c.owner] += 1
        spare -= 1
    quota = running_quota or {}
    windows: dict[str, int] = {}
    for c in sorted(claims, key=behind):
        window = slots[c.sweep_id]
        if window > 0:
            room = quota.get(c.owner, math.inf) - user_slots[c.owner]
            extra = int(min(max(buffer, window), max(room, 0)))
            user_slots[c.owner] += extra
            window += extra
        windows[c.sweep_id] = min(window, c.demand)
    line = sorted((c for c in claims if c.demand > 0), key=behind)
    place = {c.sweep_id: i + 1 for i, c in enumerate(line)}
    return {
        c.sweep_id: Share(c.sweep_id, exact[c.sweep_id], slots[c.sweep_id],
                          windows[c.sweep_id], place.get(c.sweep_id, 0))
        for c in claims
    }  # fmt: skip
