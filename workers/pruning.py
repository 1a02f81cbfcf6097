"""The pruner's decision where the rows land: Optuna's pruner, run by the worker that trains
the trial, for the pruners that judge a trial on its own reports and on the complete trials'
alone (`core.spec.search.judged_in_worker`: median, percentile, threshold, and patient
around those). A message of such a sweep says ``decide_at: "in-worker"``
(`core.spec.search.IN_WORKER`).

Why here: those pruners may stop a trial after any epoch. Decided by the scheduler, every
epoch of every trial was a round trip (rows written, the scheduler's look, its verdict
written, the worker's read): about 25 ms an epoch of waiting, more than the epoch of a small
net, which made a median-pruned search slower than Optuna's own loop. What they judge with
changes only when a trial completes, and the worker can read that.

How: one `SweepPruner` per sweep per worker process holds an Optuna study in memory with
the sweep's complete trials, each with its objective and the pruned metric's values of its
final attempt by epoch, as the scheduler's search session holds them
(`scheduler.search_session`). At each epoch it brings the study up to date
(`TrialLifecycle.complete_curves`: one small read while no trial completed since) and asks
Optuna's pruner (`core.spec.pruners.make_pruner`, the scheduler's own) about the trial's
reports so far, as ``trial.should_prune()`` would in an Optuna process. Its answer applies
before the next epoch starts; the trial ends ``pruned`` at that epoch (`workers.runner`).
The scheduler runs no decision for these sweeps; it reads a pruned trial's rows when it
tells the search of its end (`scheduler.feed`).

An unreachable store leaves the study as it was (logged) and the decision is taken on what
it holds: training never waits for the store here.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from core.errors import NotFound, StoreUnavailable
from core.spec.search import Pruning, pruning_direction
from core.store.roles import TrialLifecycle

log = logging.getLogger(__name__)

#: Sweeps whose pruner a process keeps (a process rarely sees more than a few).
MAX_SWEEPS = 64


def _needs_complete(pruning: Pruning) -> bool:
    """Whether the pruner reads the complete trials (median, percentile; patient around
    one), or only the trial's own reports (threshold, patient alone)."""
    if pruning.algorithm in ("median", "percentile"):
        return True
    return pruning.wrapped is not None and _needs_complete(pruning.wrapped)


class SweepPruner:
    """Optuna's pruner of one sweep, with the sweep's complete trials (module docstring).

    `flip`: the pruned metric improves the other way than the objective, so its values are
    negated, as the scheduler reports them. Not thread-safe: one trainer thread asks it.
    """

    def __init__(
        self,
        lifecycle: TrialLifecycle,
        sweep_id: str,
        pruning: Pruning,
        objective: Mapping[str, str],
    ) -> None:
        import optuna

        from core.spec.pruners import make_pruner

        self.lifecycle, self.sweep_id = lifecycle, sweep_id
        self.metric = pruning.metric or objective["metric"]
        direction = objective["direction"]
        self.flip = pruning_direction(pruning, objective["metric"], direction) != direction
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.study = optuna.create_study(
            storage=optuna.storages.InMemoryStorage(),
            direction="maximize" if direction in ("maximize", "max") else "minimize",
            pruner=make_pruner(pruning, flip=self.flip),
        )
        self._needs_complete = _needs_complete(pruning)
        self._known: set[str] = set()
        self._since: datetime | None = None

    def refresh(self) -> None:
        """Add the trials that completed since the last look to the study (module docstring)."""
        if not self._needs_complete:
            return
        from optuna.trial import TrialState, create_trial

        try:
            found = self.lifecycle.complete_curves(
                self.sweep_id, self.metric, self._known, self._since
            )
        except (StoreUnavailable, NotFound) as exc:
            log.warning("sweep %s: complete trials not read (%s); pruning on what is known",
                        self.sweep_id, exc)  # fmt: skip
            return
        self._since = found.since
        for trial_id, (objective, curve) in sorted(found.curves.items()):
            self._known.add(trial_id)
            # What the scheduler's study holds: a complete trial without a finite objective
            # is a failed one there, which no pruner looks at.
            if objective is None or not math.isfinite(objective):
                continue
            self.study.add_trial(
                create_trial(
                    state=TrialState.COMPLETE,
                    value=float(objective),
                    intermediate_values={e: self._signed(v) for e, v in curve.items()},
                )
            )

    def _signed(self, value: float) -> float:
        return -float(value) if self.flip else float(value)

    def should_prune(self, reports: Mapping[int, float]) -> bool:
        """Whether Optuna's pruner stops a trial with these reports (epoch -> the pruned
        metric's finite value, this attempt's) after its latest epoch. As the scheduler's
        session: never on the untrained evaluation (epoch 0) alone."""
        from optuna.trial import TrialState, create_trial

        if not reports or max(reports) == 0:
            return False
        trial = create_trial(
            state=TrialState.RUNNING,
            intermediate_values={e: self._signed(v) for e, v in reports.items()},
        )
        return bool(self.study.pruner.prune(self.study, trial))


class TrialReports:
    """One attempt's reports of the pruned metric, and whether its latest epoch is judged."""

    def __init__(self, pruner: SweepPruner) -> None:
        self.pruner = pruner
        self.values: dict[int, float] = {}
        self._new: int | None = None

    def add(self, epoch: int, metrics: Mapping[str, Any]) -> None:
        """Keep an epoch's row; only a finite value of the pruned metric is judged (as the
        scheduler skips a row without it)."""
        value = metrics.get(self.pruner.metric)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return
        if math.isfinite(value):
            self.values[epoch] = float(value)
            self._new = epoch

    def judge(self, refresh: bool = True) -> bool:
        """Whether the pruner stops the trial after its latest new epoch (False when no
        epoch was added since the last call); the complete trials are looked up first
        unless `refresh` is off (a group refreshes once for all its members)."""
        if self._new is None:
            return False
        self._new = None
        if refresh:
            self.pruner.refresh()
        return self.pruner.should_prune(self.values)


_PRUNERS: dict[tuple[int, str], SweepPruner] = {}


def sweep_pruner(
    lifecycle: TrialLifecycle, sweep_id: str, objective: Mapping[str, str]
) -> SweepPruner:
    """This process's pruner of the sweep, built on first use from its ``pruning`` section
    (`TrialLifecycle.pruning`; `StoreUnavailable` escapes, for the caller's retry), kept for
    its next trials."""
    key = (id(lifecycle), sweep_id)
    pruner = _PRUNERS.get(key)
    if pruner is None:
        if len(_PRUNERS) >= MAX_SWEEPS:
            _PRUNERS.clear()
        section = Pruning.model_validate(lifecycle.pruning(sweep_id))
        pruner = _PRUNERS[key] = SweepPruner(lifecycle, sweep_id, section, objective)
    return pruner
