"""Submit a sweep: expand it, store it with all its trials, and enqueue them.

Compatible trials go as fused groups (`scheduler.grouping`, `execution.fuse`): one
`workers.run_group` message per group, whose soft time limit is the sum of its trials'
`execution.time_limit` (what they would take one after another, at most the largest limit
a trial may have), and one `workers.run_trial` message per trial trained alone. Messages go
most expensive first (`scheduler.order`), so the sweep does not end on one large net.

Also the stale-heartbeat requeue: a trial `running` whose worker stopped beating (its host
died, or its network) goes back to `queued` with attempt + 1 and a new message. The
`sweepstack scheduler` loop runs it; a trial whose worker process died on a host that still
runs a worker is taken over sooner, when its redelivered message arrives (`workers.runner`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from celery import Celery

from core.config import MAX_TIME_LIMIT, ExecutionConfig
from core.spec import SweepSpec
from core.store import Store
from scheduler.enqueue import enqueue
from scheduler.expand import TrialPoint, expand
from scheduler.grouping import group_trials
from scheduler.order import group_cost, order_by_cost

log = logging.getLogger(__name__)
DEFAULT_TIME_LIMIT: float = ExecutionConfig.model_fields["time_limit"].default


def _time_limit(config: dict) -> float:
    return float(config.get("execution", {}).get("time_limit", DEFAULT_TIME_LIMIT))


def messages(sweep_id: str, trials: list[TrialPoint]) -> list[tuple[str | list[str], float]]:
    """What `enqueue` sends for these trials: (trial id, limit) or (group's ids, limit).

    Most expensive first (`scheduler.order`): workers take messages in the order sent.
    """
    by_id = {t.id: t for t in trials}
    out: list[tuple[str | list[str], float]] = []
    costs: list[float] = []
    for group in group_trials((t.id, t.config) for t in trials):
        limits = [_time_limit(by_id[key].config) for key in group]
        ids = [f"{sweep_id}-{key}" for key in group]
        costs.append(group_cost([by_id[key].config for key in group]))
        if len(ids) == 1:
            out.append((ids[0], limits[0]))
        else:
            out.append((ids, min(sum(limits), float(MAX_TIME_LIMIT))))
    return order_by_cost(out, costs)


def submit_sweep(
    spec: SweepSpec, store: Store, app: Celery, owner: str | None = None
) -> tuple[str, int]:
    """Store the sweep and its trials, then enqueue every trial; return (sweep id, count).

    Compatible trials are enqueued as fused groups (see the module docstring); the count
    is of trials, not messages.

    If the broker refuses part way, the sweep's queued trials are cancelled and the error is
    raised: a sweep is accepted whole or not at all.
    """
    trials = expand(spec, with_config=True)
    sweep_id = store.create_sweep(spec, trials, owner=owner)
    try:
        enqueue(app, messages(sweep_id, trials))
    except Exception:
        log.exception("enqueueing sweep %s failed; cancelling it", sweep_id)
        store.cancel_sweep(sweep_id)
        raise
    return sweep_id, len(trials)


def enqueue_ids(store: Store, app: Celery, trial_ids: Iterable[str]) -> int:
    """Enqueue trials already in the store (requeued or retried), with their time limits."""
    ids = list(trial_ids)
    docs = store.trials_by_id(ids, ["config.execution.time_limit"])
    pairs = [(trial_id, _time_limit(docs[trial_id].get("config", {}))) for trial_id in ids]
    return enqueue(app, pairs) if pairs else 0


def requeue_stale(store: Store, app: Celery, stale_after: float) -> list[str]:
    """Requeue running trials whose heartbeat is older than `stale_after`, and enqueue them."""
    ids = store.requeue_stale(stale_after)
    if ids:
        log.warning("requeued %d stale trials", len(ids))
        enqueue_ids(store, app, ids)
    return ids
