"""The scheduler's side of early stopping: which running trials to stop, given new epochs.

Pure logic over a `SearchSession` (no store, no broker): the feeder reads the epoch rows
workers reported since its last step, `decide` reports each to the session
(`SearchSession.report`) and asks Optuna's pruner (`SearchSession.should_prune`); the feeder
sends what it returns to `SweepAdmin.request_prune` (``{trial id: (attempt, epoch)}``), after
which the worker stops the trial within one epoch and ends it ``pruned``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Protocol


class _Session(Protocol):
    def report(self, number: int, epoch: int, value: float) -> None: ...
    def should_prune(self, number: int) -> bool: ...


def pruned_value(metrics: Mapping[str, Any], metric: str) -> bool:
    """Whether an epoch row holds a finite value of the pruned metric."""
    value = metrics.get(metric)
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def decide(
    session: _Session,
    running: Mapping[str, tuple[int, int]],
    rows: Mapping[str, Mapping[int, Mapping[str, Any]]],
    metric: str,
) -> dict[str, tuple[int, int]]:
    """Report `rows` (trial id -> {epoch: metrics}, new rows only) of the `running` trials
    (id -> (Optuna number, attempt)) and return those the pruner stops, as
    ``{trial id: (attempt, epoch of the decision)}``. A trial with no new row is not judged
    again (its reports have not changed); a row without the metric is skipped."""
    stop: dict[str, tuple[int, int]] = {}
    for tid, epochs in rows.items():
        if tid not in running:
            continue
        number, attempt = running[tid]
        judged = [e for e in sorted(epochs) if pruned_value(epochs[e], metric)]
        for epoch in judged:
            session.report(number, epoch, float(epochs[epoch][metric]))
        if judged and session.should_prune(number):
            stop[tid] = (attempt, judged[-1])
    return stop
