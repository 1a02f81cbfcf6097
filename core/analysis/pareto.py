"""The Pareto front of a sweep's objectives: non-dominated sorting and hypervolume, in numpy.

A sweep with several objectives (`core.spec.objectives`) has no single best trial: its
answer is the **front**, the feasible complete trials that no other feasible complete
trial dominates (at least as good on every objective, better on one). Each objective is
turned into a loss (a maximised one negated) and the rules are Optuna's:

- `nondominated` and `ranks` follow ``optuna.study._multi_objective`` (``_is_pareto_front``,
  ``_fast_non_domination_rank``): rank 0 is the front, rank 1 the front of the rest, ...;
  equal points share their rank;
- `hypervolume` is the volume the front dominates up to a reference point, as
  ``optuna._hypervolume.compute_hypervolume`` measures it (exact: a sweep over the first
  objective's slices, each the hypervolume of one objective fewer).

They are written over numpy here because the analysis stays out of Optuna's way (the layer
rules keep Optuna in the scheduler, `core.analysis`'s docstring) and those helpers are
private to Optuna; the tests check both against Optuna's own on the same points.

The **reference point**, left out, is the nadir of the feasible complete trials (each
objective's worst loss) moved out by a tenth of its range (by a tenth of its size, or 1,
when the range is 0), so that every trial of the front adds some volume. A trial is
infeasible when a constraint fails on it (its ``feasible``); infeasible and incomplete
trials are never on the front. `front_rows` gives the rows every surface shows (API, CLI);
a figure would draw them (rows, then figures).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from core.spec.objectives import Goals

#: How far past the nadir a default reference point lies, as a share of each range.
REFERENCE_MARGIN = 0.1


def losses(values: np.ndarray, directions: Sequence[str]) -> np.ndarray:
    """`values` (trials x objectives) as losses: each maximised objective negated."""
    signs = np.array([-1.0 if d == "maximize" else 1.0 for d in directions])
    return np.asarray(values, dtype=float) * signs


#: Rows `nondominated` compares with the rows kept before them at once (three or more
#: objectives).
_BLOCK = 256


def nondominated(loss: np.ndarray) -> np.ndarray:
    """Whether each row of `loss` (lower is better everywhere) is dominated by no other
    row; equal rows are all on the front."""
    n = len(loss)
    on = np.zeros(n, dtype=bool)
    if n == 0:
        return on
    order = np.lexsort(loss.T[::-1])
    if loss.shape[1] == 2:
        on[_nondominated_2d(loss, order)] = True
        return on
    # In lexicographic order a row can be dominated only by rows before it: a kept row
    # dominates a later one iff it is <= everywhere and differs somewhere. Rows go in
    # blocks: a block against every row kept before it at once, then within itself.
    kept = np.empty((0, loss.shape[1]))
    for start in range(0, n, _BLOCK):
        ids = order[start : start + _BLOCK]
        block = loss[ids]
        if len(kept):
            pairs_le = (kept[:, None, :] <= block[None, :, :]).all(axis=2)
            pairs_ne = (kept[:, None, :] != block[None, :, :]).any(axis=2)
            alive = ~(pairs_le & pairs_ne).any(axis=0)
            ids, block = ids[alive], block[alive]
        mine: list[int] = []
        for j, row in enumerate(block):
            if mine:
                front = block[mine]
                weakly = np.all(front <= row, axis=1)
                if weakly.any() and np.any(front[weakly] != row):
                    continue
            mine.append(j)
        on[ids[mine]] = True
        kept = np.vstack([kept, block[mine]])
    return on


def _nondominated_2d(loss: np.ndarray, order: np.ndarray) -> list[int]:
    """`nondominated` of two objectives, rows in lexicographic `order`: a row is on the
    front when its second value is below every earlier row's, or it equals the row that
    set that lowest value (equal rows are all on the front). Linear after the sort."""
    kept: list[int] = []
    best = best_first = math.inf
    firsts, seconds = loss[order, 0].tolist(), loss[order, 1].tolist()
    for i, first, second in zip(order.tolist(), firsts, seconds, strict=True):
        if second < best:
            best, best_first = second, first
            kept.append(i)
        elif second == best and first == best_first:
            kept.append(i)
    return kept


def ranks(loss: np.ndarray) -> np.ndarray:
    """Each row's non-domination rank (0: the front; then the front of the rest, ...)."""
    out = np.full(len(loss), -1, dtype=int)
    left = np.arange(len(loss))
    rank = 0
    while left.size:
        on = nondominated(loss[left])
        out[left[on]] = rank
        left = left[~on]
        rank += 1
    return out


def crowding(loss: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Each row's crowding distance within its rank, as Optuna's NSGA-II computes it
    (``_calc_crowding_distance``): for each objective with a range among the rank's rows,
    those rows sorted by it, the first and last get infinity and each other one the gap
    between its two neighbours over that range; summed over the objectives (an objective
    with no range adds nothing). Larger: a lonelier point."""
    out = np.zeros(len(loss), dtype=float)
    for r in np.unique(rank).tolist():
        members = np.flatnonzero(rank == r)
        order = np.arange(members.size)
        for j in range(loss.shape[1]):
            values = loss[members, j]
            # Each objective's sort is stable on the previous one's order, as Optuna's
            # in-place sorts are: equal values keep the same neighbours.
            order = order[np.argsort(values[order], kind="stable")]
            span = values[order[-1]] - values[order[0]]
            if span <= 0:
                continue
            out[members[order[0]]] = out[members[order[-1]]] = math.inf
            if members.size > 2:
                out[members[order[1:-1]]] += (values[order[2:]] - values[order[:-2]]) / span
    return out


def hypervolume(loss: np.ndarray, reference: Sequence[float]) -> float:
    """The volume the rows of `loss` dominate up to `reference` (rows not below it in
    every objective add nothing)."""
    ref = np.asarray(reference, dtype=float)
    points = np.asarray(loss, dtype=float).reshape(-1, ref.size)
    points = points[np.all(points < ref, axis=1)]
    if points.size == 0:
        return 0.0
    return float(_volume(points[nondominated(points)], ref))


def _volume(points: np.ndarray, ref: np.ndarray) -> float:
    if ref.size == 1:
        return float(ref[0] - points[:, 0].min())
    if ref.size == 2:
        order = np.argsort(points[:, 0], kind="stable")
        total, best = 0.0, ref[1]
        xs = points[order, 0]
        for x, y in zip(xs.tolist(), points[order, 1].tolist(), strict=True):
            if y < best:
                total += (ref[0] - x) * (best - y)
                best = y
        return total
    # Slices along the first objective: between two consecutive values, the points at or
    # below the lower one dominate a prism of the next objectives' hypervolume.
    order = np.argsort(points[:, 0], kind="stable")
    points = points[order]
    total = 0.0
    for i in range(len(points)):
        upper = points[i + 1, 0] if i + 1 < len(points) else ref[0]
        width = upper - points[i, 0]
        if width <= 0:
            continue
        head = points[: i + 1, 1:]
        total += width * _volume(head[nondominated(head)], ref[1:])
    return total


def read_reference(raw: str, count: int) -> list[float]:
    """A reference point as a user writes it (``--reference``, ``?reference=``): `count`
    finite numbers, comma-separated, one per objective; `ValueError` naming the rule."""
    try:
        values = [float(v) for v in raw.split(",")]
    except ValueError:
        values = []
    if len(values) != count or not all(math.isfinite(v) for v in values):
        raise ValueError(f"must be {count} finite number(s), comma-separated, got {raw[:60]!r}")
    return values


def default_reference(loss: np.ndarray) -> list[float]:
    """The nadir of `loss` moved out by `REFERENCE_MARGIN` of each range (module docstring)."""
    worst, best = loss.max(axis=0), loss.min(axis=0)
    span = worst - best
    span = np.where(span > 0, span, np.maximum(np.abs(worst), 1.0))
    return [float(v) for v in worst + REFERENCE_MARGIN * span]


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def front_rows(
    trials: Sequence[Mapping[str, Any]],
    goals: Goals,
    reference: Sequence[float] | None = None,
) -> dict[str, Any]:
    """The front of a sweep's finished trials (their stored documents: ``_id``, ``index``,
    ``state``, ``objectives``, ``feasible``, ``params``), as one JSON value: the
    objectives, how many trials were complete and feasible, the front's trials (by the
    first objective, each with its values), the reference point and the hypervolume.
    `reference`: in the objectives' own units (left out: the default, module docstring)."""
    directions = [d for _, d in goals.objectives]
    n = len(directions)
    complete, points = [], []
    for doc in trials:
        if doc.get("state") != "complete":
            continue
        values = [_finite(v) for v in (doc.get("objectives") or [doc.get("objective")])]
        if len(values) != n or any(v is None for v in values):
            continue
        complete.append(doc)
        points.append(values)
    feasible = [doc.get("feasible") is not False for doc in complete]
    head: dict[str, Any] = {
        "objectives": [{"metric": m, "direction": d} for m, d in goals.objectives],
        "constraints": [c.text for c in goals.constraints],
        "complete": len(complete),
        "feasible": int(sum(feasible)),
    }
    kept = [i for i, ok in enumerate(feasible) if ok]
    if not kept:
        return {**head, "size": 0, "trials": [], "reference": None, "hypervolume": None}
    loss = losses(np.array([points[i] for i in kept]), directions)
    on = nondominated(loss)
    if reference is None:
        ref_loss = default_reference(loss)
    else:
        ref_loss = [float(v) for v in losses(np.array([list(reference)]), directions)[0]]
    volume = hypervolume(loss[on], ref_loss)
    front = [kept[j] for j in np.flatnonzero(on).tolist()]
    sign = 1.0 if directions[0] == "minimize" else -1.0
    front.sort(key=lambda i: (sign * points[i][0], complete[i].get("index", 0)))
    rows = [
        {
            "id": complete[i].get("_id"),
            "index": complete[i].get("index"),
            "values": points[i],
            "params": complete[i].get("params") or {},
        }
        for i in front
    ]
    return {
        **head,
        "size": len(rows),
        "trials": rows,
        "reference": [float(v) for v in losses(np.array([ref_loss]), directions)[0]],
        "hypervolume": volume,
    }
