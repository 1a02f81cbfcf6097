"""What a session-fed sweep sends together and in what order: an adaptive search's units of
points that train fused, and a pruning grid's feeding order. Pure logic over the search
session and the cost model; `scheduler.feed` drives it.

**Units** (adaptive search). A unit is one point as the sampler chooses it and, when the
cost model says nets like it gain by training fused (`scheduler.grouping.fused_size`:
small nets on a CPU), up to `ADAPTIVE_GROUP_CAP` points in all, the others asked with the
dimensions a fused group shares fixed to the first's (`scheduler.grouping.shared_dimensions`;
Optuna's sampler chooses the rest, told of the points in flight by its constant liar). A
feeder's window counts units, not trials; each unit is sent as the messages of its own
points (`scheduler.messages.unit_messages`: one fused group, most often), and its key (the
Optuna number of its first point) is stored with each of its trials (``optuna.unit``), so a
rebuilt feeder counts the window as the first did. The cap is 6, not more: units of 8 found
a worse best on McLeod's space (docs/performance.md).

**Rung order** (grid and random with pruning): the cheapest fifth first, then the rest
longest first. Fed longest first, the largest nets reached each rung before any other
trial, and a rung with one result promotes it, so they trained to the end; cheap trials
first give every rung results to judge them by (configs/mcleod-asha.yaml: 26 s instead of
61 s, docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from scheduler.expand import TrialPoint
from scheduler.grouping import fused_size

#: The most points an adaptive search asks for one unit of fused training (`ask_unit`):
#: more fuse better, but leave the sampler less to go on for each of them.
ADAPTIVE_GROUP_CAP = 6
#: A pruning grid's cheapest share fed first, and the fewest trials that is (`rung_order`).
RUNG_WARM_UP = 0.2
RUNG_WARM_UP_MIN = 9


def ask_unit(
    session: Any,
    shared: Iterable[str],
    most: int,
    point_of: Callable[[Any], TrialPoint],
) -> list[tuple[Any, TrialPoint]]:
    """One unit of at most `most` points asked of the search `session` (module docstring),
    each as (`Asked`, its `TrialPoint` from `point_of`); empty when the space is used up.
    `shared` names the dimensions a fused group shares (`shared_dimensions`)."""
    out = [(asked, point_of(asked)) for asked in session.ask(1)]
    if not out:
        return out
    size = min(most, fused_size(out[0][1].config, ADAPTIVE_GROUP_CAP))
    if size > 1:
        names = set(shared)
        fixed = {p: v for p, v in out[0][0].params.items() if p in names}
        out += [(a, point_of(a)) for a in session.ask(size - 1, fixed)]
    return out


def unit_keys(extras: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """Point id -> its unit's key, from the Optuna fields a feeder stores with each point;
    None when no point has one (not an adaptive search)."""
    keys = {pid: (e.get("optuna") or {}).get("unit") for pid, e in extras.items()}
    return keys if any(k is not None for k in keys.values()) else None


def by_unit(points: Iterable[TrialPoint], keys: Mapping[str, Any]) -> list[list[TrialPoint]]:
    """The points in their units (`unit_keys`), in the order of each unit's first point;
    a point without a key is a unit of its own."""
    units: dict[Any, list[TrialPoint]] = {}
    for point in points:
        units.setdefault(keys.get(point.id, point.id), []).append(point)
    return list(units.values())


def rung_order(longest_first: list[TrialPoint]) -> list[TrialPoint]:
    """A pruning grid's or random sweep's feeding order (module docstring): its cheapest
    `RUNG_WARM_UP` share (at least `RUNG_WARM_UP_MIN` trials) first, cheapest first, so
    that every rung has results by the time the large nets reach it, then the others
    longest first, so that the sweep does not end on a large net."""
    cheapest = longest_first[::-1]
    head = cheapest[: max(RUNG_WARM_UP_MIN, round(RUNG_WARM_UP * len(cheapest)))]
    early = {p.id for p in head}
    return head + [p for p in longest_first if p.id not in early]
