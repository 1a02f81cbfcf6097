"""Pruning a multi-objective sweep by Pareto rank: the decision rule, on hand-given vectors.

Optuna prunes one objective only (``trial.report`` raises in a multi-objective study,
optuna#3450). Here a trial at a decision epoch is an objective vector, and it is compared
with the other trials' vectors at the same epoch by non-domination rank
(`core.analysis.pareto.ranks`, checked against Optuna's ``_fast_non_domination_rank``) and,
between equal ranks, by crowding distance (`core.analysis.pareto.crowding`). The rules,
as docs/spec.md ("Pruning by Pareto rank") states them:

- ``asha``: at a rung, the trial and every trial that reached that rung before it (running,
  pruned or complete) make a population of n; the trial goes on when it is among the best
  ``max(1, n // reduction_factor)`` of them ordered by rank, then by crowding distance
  (larger first); a trial tied with the last one kept is kept too.
- ``median`` and ``percentile`` (median: the 50th): no decision before ``n_startup_trials``
  trials are complete, nor when fewer than ``n_min_trials`` complete trials reported the
  epoch; else the ranks are taken over the complete trials' vectors at the epoch and the
  trial's, and the trial stops when its rank is strictly worse (larger) than the
  percentile of the complete trials' ranks (numpy's linear interpolation).

A vector is made from an epoch's row and the trial's costs known before training
(`vector`). Pure numpy and data: the scheduler holds the populations
(`scheduler.rank_judge`); a worker could hold them as well.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.analysis.pareto import crowding, losses, ranks
from core.spec.objectives import RANK_PRUNERS
from core.spec.search import Pruning

#: Objectives a trial's cost gives, the same at every epoch (known before it trains).
PER_TRIAL = ("param_count", "macs")

Vector = tuple[float, ...]


def vector(
    objectives: Sequence[tuple[str, str]],
    row: Mapping[str, Any],
    costs: Mapping[str, Any] | None = None,
) -> Vector | None:
    """A trial's objective vector at one epoch: each objective's value in that epoch's
    `row`, else (``param_count``, ``macs``) in the trial's `costs`; None when one is missing
    or not finite (the trial is then neither judged nor a rival at that epoch)."""
    out = []
    for metric, _direction in objectives:
        value = row.get(metric)
        if not _number(value) and metric in PER_TRIAL:
            value = (costs or {}).get(metric)
        if not _number(value):
            return None
        out.append(float(value))
    return tuple(out)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def order_keys(points: Sequence[Vector], directions: Sequence[str]) -> list[tuple[int, float]]:
    """Each point's place in a rung's order: (its non-domination rank, minus its crowding
    distance within that rank); smaller is better."""
    loss = losses(np.array(points, dtype=float), directions)
    rank = ranks(loss)
    distance = crowding(loss, rank)
    return [(int(r), -float(d)) for r, d in zip(rank.tolist(), distance.tolist(), strict=True)]


def asha_keeps(
    trial: Vector, rivals: Sequence[Vector], directions: Sequence[str], reduction_factor: int
) -> bool:
    """Whether successive halving by rank lets `trial` go on past a rung that `rivals`
    reached before it (module docstring)."""
    points = [trial, *rivals]
    keys = order_keys(points, directions)
    kept = max(1, len(points) // reduction_factor)
    return keys[0] <= sorted(keys)[kept - 1]


def percentile_prunes(
    trial: Vector, complete: Sequence[Vector], directions: Sequence[str], percentile: float
) -> bool:
    """Whether `trial`'s rank among itself and the `complete` trials' vectors at the same
    epoch is strictly worse than the `percentile` of the complete trials' ranks."""
    if not complete:
        return False
    loss = losses(np.array([trial, *complete], dtype=float), directions)
    rank = ranks(loss)
    return bool(rank[0] > np.percentile(rank[1:], percentile))


@dataclass(frozen=True)
class RankRule:
    """A spec's Pareto-rank pruner: its algorithm, the objectives and Optuna's option
    defaults where the spec gives none (median: ``n_startup_trials`` 5, ``n_min_trials`` 1;
    ASHA: ``reduction_factor`` 4). The epochs it judges at are
    `core.spec.search.rank_decision_epochs`."""

    algorithm: str
    objectives: tuple[tuple[str, str], ...]
    percentile: float = 50.0
    n_startup_trials: int = 5
    n_min_trials: int = 1
    reduction_factor: int = 4

    @classmethod
    def of(cls, pruning: Pruning, objectives: Sequence[tuple[str, str]]) -> RankRule:
        if pruning.algorithm not in RANK_PRUNERS:
            raise ValueError(
                f"pruning.algorithm must be one of {', '.join(RANK_PRUNERS)} to prune by "
                f"Pareto rank, got {pruning.algorithm!r}"
            )
        opts = pruning.pruner_options()
        return cls(
            algorithm=pruning.algorithm,
            objectives=tuple(objectives),
            percentile=float(opts.get("percentile", 50.0)),
            n_startup_trials=int(opts.get("n_startup_trials", 5)),
            n_min_trials=int(opts.get("n_min_trials", 1)),
            reduction_factor=int(opts.get("reduction_factor", 4)),
        )

    @property
    def directions(self) -> list[str]:
        return [d for _, d in self.objectives]

    def prunes(
        self,
        trial: Vector,
        at_epoch: Mapping[str, Vector],
        complete: set[str] | frozenset[str],
        n_complete: int,
    ) -> bool:
        """Whether the trial with vector `trial` at a decision epoch stops there.
        `at_epoch`: the other trials' vectors at that epoch (id -> vector; for ASHA those
        that reached the rung before it); `complete`: which trials are complete;
        `n_complete`: how many trials of the sweep are complete (median's startup)."""
        if self.algorithm == "asha":
            return not asha_keeps(
                trial, list(at_epoch.values()), self.directions, self.reduction_factor
            )
        if n_complete < self.n_startup_trials:
            return False
        finished = [v for tid, v in at_epoch.items() if tid in complete]
        if not finished or len(finished) < self.n_min_trials:
            return False
        return percentile_prunes(trial, finished, self.directions, self.percentile)
