"""What new trials are sent as: the messages `scheduler.enqueue.enqueue` publishes for a
window of them (`messages`), for a new sweep (`scheduler.submit`) and each window after
(`scheduler.feed`).

Compatible trials go as fused groups (`scheduler.grouping`, `execution.fuse`): one
`workers.run_group` message per group, whose soft time limit is the sum of its trials'
`execution.time_limit` (what they would take one after another, at most the largest limit
a trial may have), and one `workers.run_trial` message per trial trained alone, except
that cheap lone trials share a ``sequential`` `workers.run_group` message, a few at a time
(`scheduler.chunks`), and that a lone net that would gain by fusing goes as a fused group
of one (`scheduler.grouping.fused_alone`). Messages go most expensive first
(`scheduler.order`), so the sweep does not end on one large net.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from core.spec.config import MAX_TIME_LIMIT, ExecutionConfig
from scheduler.chunks import chunk_units
from scheduler.enqueue import DecideAt, Outgoing, carry, carry_group
from scheduler.expand import TrialPoint
from scheduler.grouping import DEFAULT_WORKERS, fused_alone, group_trials
from scheduler.order import group_cost, order_by_cost, trial_cost

DEFAULT_TIME_LIMIT: float = ExecutionConfig.model_fields["time_limit"].default


def time_limit(config: dict) -> float:
    """A trial's `execution.time_limit` in seconds (the spec's default when it sets none)."""
    return float(config.get("execution", {}).get("time_limit", DEFAULT_TIME_LIMIT))


@dataclass(frozen=True)
class Batch:
    """One message's worth of a window's trials, planned before the sweep's id is known:
    the point ids it trains, whether one after another (a chunk) rather than fused, and its
    cost for the order (`scheduler.order`). `outgoing` makes the message."""

    keys: tuple[str, ...]
    sequential: bool
    cost: float

    def outgoing(
        self,
        sweep_id: str,
        configs: Mapping[str, dict],
        *,
        watch: bool = False,
        decide_at: DecideAt = None,
    ) -> Outgoing:
        """What `enqueue` sends for this batch of the sweep `sweep_id` (`messages`)."""
        group = [configs[key] for key in self.keys]
        ids = [f"{sweep_id}-{key}" for key in self.keys]
        limits = [time_limit(config) for config in group]
        if len(ids) == 1 and (self.sequential or not fused_alone(group[0])):
            return (ids[0], limits[0], carry(group[0], watch=watch, decide_at=decide_at))
        limit = min(sum(limits), float(MAX_TIME_LIMIT))
        kwargs = carry_group(
            group, [0] * len(ids), watch=watch, decide_at=decide_at, sequential=self.sequential
        )
        return (ids, limit, kwargs)


def batches(trials: Sequence[TrialPoint], workers: int | None = None) -> list[Batch]:
    """The messages' worth of these new trials (module docstring), most expensive first:
    fused groups (`scheduler.grouping`), chunks (`scheduler.chunks`) and lone trials.
    `workers`, when known, is how many processes will train them."""
    by_id = {t.id: t.config for t in trials}
    units = group_trials(by_id.items(), workers)
    out: list[Batch] = []
    for group, sequential in chunk_units(units, by_id, workers or DEFAULT_WORKERS):
        configs = [by_id[key] for key in group]
        # A chunk trains its trials one after another; a fused group shares their steps.
        cost = sum(map(trial_cost, configs)) if sequential else group_cost(configs)
        out.append(Batch(tuple(group), sequential, cost))
    return order_by_cost(out, [batch.cost for batch in out])


def messages(
    sweep_id: str,
    trials: Sequence[TrialPoint],
    workers: int | None = None,
    *,
    watch: bool = False,
    decide_at: DecideAt = None,
) -> list[Outgoing]:
    """What `enqueue` sends for these new trials: (trial id, limit, its config and attempt 0)
    or (group's ids, limit, their configs and attempts).

    `workers`, when known, is how many processes will train them (`group_trials`,
    `chunk_units`). Most expensive first (`scheduler.order`): workers take messages in the
    order sent. `watch`: the sweep prunes, so workers look for prune requests, and wait for
    the decision at the epochs of `decide_at` (`scheduler.enqueue.carry`)."""
    configs = {t.id: t.config for t in trials}
    return [
        batch.outgoing(sweep_id, configs, watch=watch, decide_at=decide_at)
        for batch in batches(trials, workers)
    ]


def unit_messages(
    sweep_id: str,
    units: list[list[TrialPoint]],
    *,
    watch: bool = False,
    decide_at: DecideAt = None,
) -> list[Outgoing]:
    """What `enqueue` sends for an adaptive search's units (`scheduler.feed.Feeder.ask`):
    each unit's points are grouped as if they were the only work of one worker, so its
    compatible points go as one fused group when the cost model says it gains, the rest
    alone; the units' messages most expensive first."""
    planned: list[tuple[Batch, dict[str, dict]]] = []
    for unit in units:
        configs = {t.id: t.config for t in unit}
        planned += [(batch, configs) for batch in batches(unit, 1)]
    ordered = order_by_cost(planned, [batch.cost for batch, _ in planned])
    return [
        batch.outgoing(sweep_id, configs, watch=watch, decide_at=decide_at)
        for batch, configs in ordered
    ]
