"""The accuracy-cost front: the trials no other trial beats on both objective and cost.

A sweep that searched several objectives (``objectives:``) states the front of those
(`searched_front`, over `core.analysis.pareto.front_rows`: feasible complete trials, the
hypervolume against the front's default reference) instead of guessing which costs matter;
the rest of this docstring is about a single-objective sweep's fronts.

Two fronts, objective against (normalised) training time and against parameter count. A
trial is on a front when no trial is at least as good and at most as costly, one of them
strictly; found by sorting on cost and keeping each trial that beats every cheaper one
(O(n log n)). Beside the fronts, the cheapest trial *within a tolerance of the best*
(default: the threshold of `core.analysis.scale`, 0.5 pp for an accuracy): "the smallest
network within 0.5 pp of the best".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from core.analysis.pareto import front_rows
from core.analysis.rows import Trials, short
from core.analysis.scale import Scale
from core.spec.objectives import Goals
from core.spec.values import short_text
from core.store.records import flatten_params

#: At most this many trials of a front are listed (evenly spread along it).
MAX_LISTED = 100
#: The cloud of trials drawn behind a front holds at most this many.
MAX_CLOUD = 2000


def pareto(cost: np.ndarray, goodness: np.ndarray) -> np.ndarray:
    """Positions of the trials on the front of (low `cost`, high `goodness`), by cost."""
    ok = np.flatnonzero(np.isfinite(cost) & np.isfinite(goodness))
    order = ok[np.lexsort((-goodness[ok], cost[ok]))]
    kept = []
    best = -np.inf
    for i in order.tolist():
        if goodness[i] > best:
            kept.append(i)
            best = goodness[i]
    return np.array(kept, dtype=np.int64)


def _trial(trials: Trials, i: int, params: list[str]) -> dict[str, Any]:
    flat = trials.params[i]
    return {
        "index": int(trials.index[i]), "id": trials.ids[i],
        "objective": float(trials.objective[i]),
        "train_seconds": _finite(trials.seconds[i]), "param_count": _finite(trials.param_count[i]),
        "params": {p: flat[p] for p in params if p in flat},
    }  # fmt: skip


def _finite(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def _spread(positions: np.ndarray, cap: int) -> np.ndarray:
    if positions.size <= cap:
        return positions
    return positions[np.linspace(0, positions.size - 1, cap).astype(int)]


def _describe(trial: dict[str, Any]) -> str:
    params = ", ".join(f"{short(p)}={short_text(v)}" for p, v in trial["params"].items())
    return f"trial #{trial['index']}" + (f" ({params})" if params else "")


def cheapest_within(
    trials: Trials, cost: np.ndarray, scale: Scale, tolerance: float, params: list[str]
) -> dict[str, Any] | None:
    """The trial of least `cost` whose objective is within `tolerance` of the best one
    (ties: the better objective), or None when no trial has a cost."""
    goodness = scale.sign * trials.objective
    ok = np.isfinite(cost)
    if not ok.any():
        return None
    best = float(goodness[ok].max())
    near = np.flatnonzero(ok & (goodness >= best - tolerance))
    i = int(near[np.lexsort((-goodness[near], cost[near]))[0]])
    return {
        **_trial(trials, i, params),
        "cost": float(cost[i]),
        "behind": float(best - goodness[i]),
    }


def fronts(trials: Trials, seconds: np.ndarray, scale: Scale, tolerance: float,
           params: list[str]) -> dict[str, Any]:  # fmt: skip
    """Both fronts (listed trials, cloud of every trial) and the cheapest near the best."""
    goodness = scale.sign * trials.objective
    out: dict[str, Any] = {"tolerance": tolerance}
    cloud = _spread(np.arange(len(trials)), MAX_CLOUD)
    for name, cost in (("train_seconds", seconds), ("param_count", trials.param_count)):
        on = pareto(cost, goodness)
        if on.size == 0:
            out[name] = None
            continue
        listed = _spread(on, MAX_LISTED)
        out[name] = {
            "size": int(on.size),
            "trials": [{**_trial(trials, i, params), "cost": float(cost[i])} for i in listed],
            "cloud": [[float(cost[i]), float(trials.objective[i])] for i in cloud
                      if np.isfinite(cost[i])],
        }  # fmt: skip
    out["smallest"] = cheapest_within(trials, trials.param_count, scale, tolerance, params)
    out["fastest"] = cheapest_within(trials, seconds, scale, tolerance, params)
    out["text"] = _texts(out, scale, float(np.max(goodness)) * scale.sign, tolerance)
    return out


def _texts(out: dict[str, Any], scale: Scale, best: float, tolerance: float) -> list[str]:
    texts = []
    within = f"within {scale.size(tolerance)} of the best ({scale.value(best)})"
    small = out["smallest"]
    if small is not None:
        texts.append(
            f"the smallest network {within} is {_describe(small)}: "
            f"{small['param_count']:,.0f} parameters, {scale.value(small['objective'])}"
            + (f", {small['train_seconds']:.3g} s" if small["train_seconds"] is not None else "")
        )
    fast = out["fastest"]
    if fast is not None and (small is None or fast["index"] != small["index"]):
        texts.append(
            f"the fastest to train {within} is {_describe(fast)}: "
            f"{fast['cost']:.3g} s, {scale.value(fast['objective'])}"
        )
    for name, what in (("param_count", "parameter count"), ("train_seconds", "training time")):
        front = out.get(name)
        if front is not None:
            texts.append(f"{front['size']} trials are on the front of {scale.metric} against "
                         f"{what}")  # fmt: skip
    return texts


def searched_front(
    docs: Sequence[Mapping[str, Any]], goals: Goals, tolerance: float, params: list[str]
) -> dict[str, Any]:
    """The front of the objectives a multi-objective sweep searched: `front_rows`' value
    (its trials spread to at most `MAX_LISTED`, with the `params` shown), the cloud of
    every feasible complete trial on the first two objectives, and sentences."""
    value = front_rows(docs, goals)
    directions = [d for _, d in goals.objectives]
    cloud = []
    for doc in docs:
        values = doc.get("objectives") or []
        if (doc.get("state") == "complete" and doc.get("feasible") is not False
                and len(values) == len(directions)
                and all(isinstance(v, int | float) for v in values[:2])):  # fmt: skip
            cloud.append([float(values[0]), float(values[1])])
    listed = [value["trials"][i] for i in _spread(np.arange(len(value["trials"])), MAX_LISTED)]
    for row in listed:
        flat = flatten_params(row["params"])
        row["params"] = {p: flat[p] for p in params if p in flat}
    searched = {**value, "trials": listed,
                "cloud": [cloud[i] for i in _spread(np.arange(len(cloud)), MAX_CLOUD)]}  # fmt: skip
    return {"tolerance": tolerance, "searched": searched, "text": _searched_texts(searched)}


def _searched_texts(front: Mapping[str, Any]) -> list[str]:
    names = [f"{o['metric']} ({o['direction'][:3]})" for o in front["objectives"]]
    if not front["size"]:
        return [f"no complete feasible trial yet: no front of {', '.join(names)}"]
    texts = [
        f"{front['size']} of {front['feasible']} complete feasible trials are on the front "
        f"of the objectives searched, {', '.join(names)}; hypervolume {front['hypervolume']:.4g} "
        f"against the reference {', '.join(f'{v:.4g}' for v in front['reference'])}"
    ]
    metrics = [o["metric"] for o in front["objectives"]]
    ends = [front["trials"][0], front["trials"][-1]] if front["size"] > 1 else front["trials"]
    described = []
    for trial in ends:
        pairs = zip(metrics, trial["values"], strict=True)
        values = ", ".join(f"{m} {_number(v)}" for m, v in pairs)
        described.append(f"trial #{trial['index']} ({values})")
    texts.append("its ends: " + " and ".join(described) if len(ends) > 1
                 else f"one trial holds it: {described[0]}")  # fmt: skip
    return texts


def _number(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() and abs(value) >= 1000 else f"{value:.4g}"
