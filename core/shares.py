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
per sweep, in workers (a fraction).

The scheduler keeps whole trials in flight. The workers take the one queue first in, first
out, so while it holds trials of several sweeps each sweep's throughput follows its trials
in flight: a sweep's *window* (its trials in flight at most) is `WINDOW_PER_WORKER` (2)
times its exact share, in whole trials: each sweep its whole part, the units left over one
at a time to the sweeps furthest below their share now (running / exact, then the oldest),
so a fraction is held over time by turns; a user's windows never pass its quota of trials
running. A trial so waits on the queue for each worker a sweep runs on: a worker that ends
a trial takes the next at once although the scheduler refills the windows once a pass, and
a sweep submitted later waits behind at most one queued trial per worker: it starts within
about one trial's time. *Slots*, the share's whole workers in the same way, are what the
dashboard and the API show.

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
#: A sweep's window (its trials in flight) per worker of its exact share: a trial waits on
#: the queue for each worker it runs on, so a worker that ends a trial takes the next at
#: once although the scheduler refills the windows only once a pass.
WINDOW_PER_WORKER = 2
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


def _whole(ordered: list[Claim], exact: Mapping[str, float], scale: int) -> dict[str, int]:
    """Whole numbers in proportion to `exact` x `scale`: each sweep its whole part, the
    units left over one at a time to the sweeps in `ordered` order (furthest below their
    share first) that have a fraction, never more than a user's own total rounded up."""
    target = {c.sweep_id: exact[c.sweep_id] * scale for c in ordered}
    out = {key: math.floor(value + _EPSILON) for key, value in target.items()}
    users: dict[str, float] = {}
    given: dict[str, int] = {}
    for c in ordered:
        users[c.owner] = users.get(c.owner, 0.0) + target[c.sweep_id]
        given[c.owner] = given.get(c.owner, 0) + out[c.sweep_id]
    spare = round(sum(target.values())) - sum(out.values())
    for c in ordered:
        if spare <= 0:
            break
        if target[c.sweep_id] - out[c.sweep_id] <= _EPSILON:
            continue
        if given[c.owner] >= math.ceil(users[c.owner] - _EPSILON):
            continue
        out[c.sweep_id] += 1
        given[c.owner] += 1
        spare -= 1
    return out


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
    per_worker: int = WINDOW_PER_WORKER,
) -> dict[str, Share]:
    """Each sweep's `Share` of `workers` (module docstring): exact, whole slots, window,
    place in line."""
    claims = list(claims)
    exact = exact_shares(claims, workers, running_quota)
    tier = {p: i for i, p in enumerate(PRIORITIES)}

    def behind(c: Claim) -> tuple[Any, ...]:
        share = exact[c.sweep_id]
        ratio = c.running / share if share > _EPSILON else math.inf
        return (-tier.get(c.priority, 1), ratio, c.order, c.sweep_id)

    ordered = sorted(claims, key=behind)
    slots = _whole(ordered, exact, 1)
    windows = _whole(ordered, exact, per_worker)
    for user, limit in (running_quota or {}).items():
        # Queued trials of the user's would run once others end: the windows hold the quota.
        mine = [c for c in ordered if c.owner == user]
        while sum(windows[c.sweep_id] for c in mine) > limit:
            widest = max(mine, key=lambda c: windows[c.sweep_id])
            windows[widest.sweep_id] -= 1
    windows = {c.sweep_id: min(windows[c.sweep_id], c.demand) for c in claims}
    line = sorted((c for c in claims if c.demand > 0), key=behind)
    place = {c.sweep_id: i + 1 for i, c in enumerate(line)}
    return {
        c.sweep_id: Share(c.sweep_id, exact[c.sweep_id], slots[c.sweep_id],
                          windows[c.sweep_id], place.get(c.sweep_id, 0))
        for c in claims
    }  # fmt: skip
