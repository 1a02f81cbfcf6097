"""Submit a sweep: store it with its first window of trials and enqueue them; the
scheduler's feeding loop (`scheduler.feed`) creates and enqueues the rest.

Compatible trials go as fused groups (`scheduler.grouping`, `execution.fuse`): one
`workers.run_group` message per group, whose soft time limit is the sum of its trials'
`execution.time_limit` (what they would take one after another, at most the largest limit
a trial may have), and one `workers.run_trial` message per trial trained alone, except
that cheap lone trials share a ``sequential`` `workers.run_group` message, a few at a time
(`scheduler.chunks`). Messages go most expensive first (`scheduler.order`), so the sweep
does not end on one large net.

Also the stale-heartbeat requeue: a trial `running` whose worker stopped beating (its host
died, or its network) goes back to `queued` with attempt + 1 and a new message. The
`sweepstack scheduler` loop runs it; a trial whose worker process died on a host that still
runs a worker is taken over sooner, when its redelivered message arrives (`workers.runner`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from celery import Celery

from core.errors import NotFound
from core.settings import DEFAULT_MAX_ATTEMPTS
from core.spec.config import MAX_TIME_LIMIT, ExecutionConfig
from core.spec.sweep import SweepSpec
from core.store.store import Store
from scheduler.chunks import chunk_units
from scheduler.enqueue import Outgoing, carry, carry_group, enqueue
from scheduler.expand import TrialPoint
from scheduler.grouping import DEFAULT_WORKERS, group_trials
from scheduler.order import group_cost, order_by_cost, trial_cost

log = logging.getLogger(__name__)
DEFAULT_TIME_LIMIT: float = ExecutionConfig.model_fields["time_limit"].default


def _time_limit(config: dict) -> float:
    return float(config.get("execution", {}).get("time_limit", DEFAULT_TIME_LIMIT))


def messages(
    sweep_id: str, trials: list[TrialPoint], workers: int | None = None, *, watch: bool = False
) -> list[Outgoing]:
    """What `enqueue` sends for these new trials: (trial id, limit, its config and attempt 0)
    or (group's ids, limit, their configs and attempts).

    `workers`, when known, is how many processes will train them (`group_trials`,
    `chunk_units`). Most expensive first (`scheduler.order`): workers take messages in the
    order sent. `watch`: the sweep prunes, so workers look for prune requests
    (`scheduler.enqueue.carry`)."""
    by_id = {t.id: t.config for t in trials}
    units = group_trials(by_id.items(), workers)
    out: list[Outgoing] = []
    costs: list[float] = []
    for group, sequential in chunk_units(units, by_id, workers or DEFAULT_WORKERS):
        configs = [by_id[key] for key in group]
        limits = [_time_limit(config) for config in configs]
        ids = [f"{sweep_id}-{key}" for key in group]
        # A chunk trains its trials one after another; a fused group shares their steps.
        costs.append(sum(map(trial_cost, configs)) if sequential else group_cost(configs))
        if len(ids) == 1:
            out.append((ids[0], limits[0], carry(configs[0], watch=watch)))
        else:
            limit = min(sum(limits), float(MAX_TIME_LIMIT))
            kwargs = carry_group(configs, [0] * len(ids), watch=watch, sequential=sequential)
            out.append((ids, limit, kwargs))
    return order_by_cost(out, costs)


def submit_sweep(
    spec: SweepSpec,
    store: Store,
    app: Celery,
    owner: str | None = None,
    workers: int | None = None,
    window: int | None = None,
) -> tuple[str, int]:
    """Store the sweep and its first window of trials, enqueue them; return (sweep id, size).

    The size counts every trial the sweep will have (``search.trials``, or the grid's or
    random expansion's length); those beyond the first window are planned, counted as
    queued from now on, and created by the scheduler's feeding loop (`scheduler.feed`) as
    the queue drains. Compatible trials are enqueued as fused groups (see the module
    docstring); `workers` (when the caller knows it, as `sweepstack run` does) sizes the
    groups and the window; `window` is the first window of a grid or random sweep without
    pruning (``SWEEPSTACK_FEED_WINDOW``; default `scheduler.feed.BIG_WINDOW`).

    If the broker refuses, the sweep is cancelled and the error is raised.
    """
    from scheduler.feed import BIG_WINDOW, start_sweep

    return start_sweep(
        store, app, spec, owner=owner, workers=workers, big_window=window or BIG_WINDOW
    )


def enqueue_ids(store: Store, app: Celery, trial_ids: Iterable[str]) -> int:
    """Enqueue trials already in the store (requeued or retried), with their time limits,
    configs and the attempts they are queued at."""
    ids = list(trial_ids)
    docs = store.reads.trials_by_id(ids, ["config", "attempt", "sweep_id"])
    watched: dict[str, bool] = {}
    sent: list[Outgoing] = []
    for trial_id in ids:
        doc = docs[trial_id]
        config, attempt = doc.get("config", {}), doc.get("attempt", 0)
        sweep_id = doc.get("sweep_id", "")
        if sweep_id not in watched:
            watched[sweep_id] = _prunes(store, sweep_id)
        watch = watched[sweep_id]
        sent.append((trial_id, _time_limit(config), carry(config, attempt, watch=watch)))
    return enqueue(app, sent) if sent else 0


def _prunes(store: Store, sweep_id: str) -> bool:
    """Whether the sweep's spec stops trials early (its messages then carry `watch`)."""
    try:
        spec = store.reads.get_sweep(sweep_id).get("spec") or {}
    except NotFound:
        return False
    return (spec.get("pruning") or {}).get("algorithm", "none") not in (None, "none")


def requeue_stale(
    store: Store, app: Celery, stale_after: float, max_attempts: int = DEFAULT_MAX_ATTEMPTS
) -> list[str]:
    """Requeue running trials whose heartbeat is older than `stale_after`, and enqueue them;
    one whose `max_attempts`-th attempt went silent ends failed instead."""
    ids = store.admin.requeue_stale(stale_after, max_attempts=max_attempts)
    if ids:
        log.warning("requeued %d stale trials", len(ids))
        enqueue_ids(store, app, ids)
    return ids
