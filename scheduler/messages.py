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


def messages(
    sweep_id: str,
    trials: list[TrialPoint],
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
    return order_by_cost(*_costed(sweep_id, trials, workers, watch, decide_at))


def _costed(
    sweep_id: str,
    trials: list[TrialPoint],
    workers: int | None,
    watch: bool,
    decide_at: DecideAt,
) -> tuple[list[Outgoing], list[float]]:
    """`messages`' messages in the order of their first trial, and the cost of each."""
    by_id = {t.id: t.config for t in trials}
    units = group_trials(by_id.items(), workers)
    out: list[Outgoing] = []
    costs: list[float] = []
    for group, sequential in chunk_units(units, by_id, workers or DEFAULT_WORKERS):
        configs = [by_id[key] for key in group]
        limits = [time_limit(config) for config in configs]
        ids = [f"{sweep_id}-{key}" for key in group]
        # A chunk trains its trials one after another; a fused group shares their steps.
        costs.append(sum(map(trial_cost, configs)) if sequential else group_cost(configs))
        if len(ids) == 1 and (sequential or not fused_alone(configs[0])):
            out.append((ids[0], limits[0], carry(configs[0], watch=watch, decide_at=decide_at)))
        else:
            limit = min(sum(limits), float(MAX_TIME_LIMIT))
            kwargs = carry_group(
                configs, [0] * len(ids), watch=watch, decide_at=decide_at, sequential=sequential
            )
            out.append((ids, limit, kwargs))
    return out, costs


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
    out: list[Outgoing] = []
    costs: list[float] = []
    for unit in units:
        messages_of, costs_of = _costed(sweep_id, unit, 1, watch, decide_at)
        out += messages_of
        costs += costs_of
    return order_by_cost(out, costs)
