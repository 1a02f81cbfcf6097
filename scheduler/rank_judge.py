"""The scheduler's side of pruning a multi-objective sweep by Pareto rank.

A `RankJudge` keeps, for one sweep, every trial's objective vector at each decision epoch
(`core.spec.search.rank_decision_epochs`: ASHA's rungs, or median's and percentile's
epochs), which trials are complete, and each trial's costs known before training
(``param_count``, ``macs``: `core.spec.mlp.costs_before_training`). `decide` takes the new
rows of the running trials, as `scheduler.prune_decision.decide` does for one objective,
and asks the rule (`core.analysis.rank_pruner.RankRule`) about each trial's latest
decision epoch not judged yet. The feeder holds one and rebuilds it from the stored rows
after a restart (`observe` every row, `complete` each complete trial).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from core.analysis.rank_pruner import RankRule, Vector, vector
from core.spec.search import Pruning, rank_decision_epochs


class RankJudge:
    """One sweep's Pareto-rank pruner and the vectors it judges with (module docstring)."""

    def __init__(
        self, pruning: Pruning, objectives: Sequence[tuple[str, str]], max_epochs: int
    ) -> None:
        self.rule = RankRule.of(pruning, objectives)
        self.epochs = frozenset(rank_decision_epochs(pruning, max_epochs))
        self.costs: dict[str, dict[str, Any]] = {}
        #: decision epoch -> {trial id: vector}, in the order the trials reached it.
        self.at: dict[int, dict[str, Vector]] = {}
        self.complete_ids: set[str] = set()
        self._judged: set[tuple[str, int, int]] = set()  # (trial id, attempt, epoch)

    def set_costs(self, trial_id: str, costs: Mapping[str, Any]) -> None:
        """The trial's costs known before it trains."""
        self.costs[trial_id] = dict(costs)

    def observe(self, trial_id: str, epoch: int, row: Mapping[str, Any]) -> Vector | None:
        """Note a trial's row at `epoch` (kept when it is a decision epoch and gives every
        objective); its vector, or None."""
        if epoch not in self.epochs:
            return None
        found = vector(self.rule.objectives, row, self.costs.get(trial_id))
        if found is not None:
            self.at.setdefault(epoch, {})[trial_id] = found
        return found

    def complete(self, trial_id: str) -> None:
        """A trial completed: from now on a median's or percentile's reference."""
        self.complete_ids.add(trial_id)

    def forget(self, trial_id: str) -> None:
        """A trial that failed or was cancelled: no rival at any epoch (as Optuna's pruners
        ignore failed trials); a pruned one stays a rival at the rungs it reached."""
        for table in self.at.values():
            table.pop(trial_id, None)

    def decide(
        self,
        running: Mapping[str, tuple[int, int]],
        rows: Mapping[str, Mapping[int, Mapping[str, Any]]],
    ) -> dict[str, tuple[int, int]]:
        """The `running` trials (id -> (Optuna number, attempt)) whose new `rows` (id ->
        {epoch: metrics}) stop them, as ``{trial id: (attempt, epoch of the decision)}``:
        each is judged once per attempt at its latest decision epoch among the rows."""
        stop: dict[str, tuple[int, int]] = {}
        for tid, epochs in rows.items():
            if tid not in running:
                continue
            attempt = running[tid][1]
            latest = None
            for epoch in sorted(epochs):
                if self.observe(tid, epoch, epochs[epoch]) is not None:
                    latest = epoch
            if latest is None or (tid, attempt, latest) in self._judged:
                continue
            self._judged.add((tid, attempt, latest))
            table = self.at[latest]
            others = {other: v for other, v in table.items() if other != tid}
            if self.rule.algorithm == "asha":
                # The rivals are those that reached the rung before it (the table's order).
                ids = list(table)
                others = {other: table[other] for other in ids[: ids.index(tid)]}
            if self.rule.prunes(table[tid], others, self.complete_ids, len(self.complete_ids)):
                stop[tid] = (attempt, latest)
        return stop
