"""Submit a sweep: store it with its first window of trials and enqueue them; the
scheduler's feeding loop (`scheduler.feed`) creates and enqueues the rest. What the
trials are sent as (fused groups, chunks, most expensive first) is `scheduler.messages`.

Also trials already stored, sent again: `enqueue_ids` (requeued or retried trials,
`scheduler.retry`), and the stale-heartbeat requeue: a trial `running` whose worker stopped
beating (its host died, or its network) goes back to `queued` with attempt + 1 and a new
message. The `sweepstack scheduler` loop runs it; a trial whose worker process died on a
host that still runs a worker is taken over sooner, when its redelivered message arrives
(`workers.runner`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from celery import Celery
from kombu.exceptions import OperationalError

from core.errors import NotFound
from core.settings import DEFAULT_MAX_ATTEMPTS
from core.spec.sweep import SweepSpec
from core.store.store import Store
from scheduler.enqueue import Outgoing, carry, enqueue
from scheduler.feed import BIG_WINDOW, LEASE_SECONDS, Feeder, owner_name, send_window
from scheduler.messages import time_limit
from scheduler.undelivered import drain_undelivered
from scheduler.units import unit_keys

log = logging.getLogger(__name__)


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
    the queue drains. Compatible trials are enqueued as fused groups (`scheduler.messages`);
    `workers` (when the caller knows it, as `sweepstack run` does) sizes the groups and the
    window; `window` is the first window of a grid or random sweep without pruning
    (``SWEEPSTACK_FEED_WINDOW``; default `scheduler.feed.BIG_WINDOW`).

    The first window is asked of a `Feeder` of the sweep-to-be, so it is the window the
    feeding loop would have sent. The sweep is stored with this process's lease, given back
    once the window is sent, so no scheduler sends the window a second time meanwhile. If
    the broker refuses, the sweep is cancelled and the error is raised.
    """
    lease_owner = owner_name()
    feeder = Feeder(store, app, "", spec, owner=lease_owner, workers=workers,
                    big_window=window or BIG_WINDOW)  # fmt: skip
    wanted, units = feeder.wanted(0)
    first = min(wanted, feeder.total)
    points, extras = feeder.ask(first, units)
    total = feeder.total
    if len(points) < first and feeder.ran_out:
        total = len(points)  # the space ran out in the first window already
    lease = store.feeding.lease_for(lease_owner, LEASE_SECONDS)
    sweep_fields: dict[str, Any] = {"lease": lease}
    if feeder.session is not None:
        sweep_fields["study_attrs"] = feeder.session.study_attrs()
    sweep_id = store.admin.create_sweep(
        spec, points, owner=owner, total=total, extras=extras, sweep_fields=sweep_fields
    )
    try:
        send_window(store, app, sweep_id, feeder.outgoing(sweep_id, points, unit_keys(extras)))
    except Exception:
        log.exception("enqueueing sweep %s failed; cancelling it", sweep_id)
        store.admin.cancel_sweep(sweep_id)
        raise
    finally:
        store.feeding.release_lease(sweep_id, lease_owner)
    return sweep_id, total


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
        sent.append((trial_id, time_limit(config), carry(config, attempt, watch=watch)))
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
    one whose `max_attempts`-th attempt went silent ends failed instead. With a quorum
    trials queue, also end the queued trials whose message the broker dropped at its
    delivery limit (`scheduler.undelivered`)."""
    try:
        drain_undelivered(store, app)
    except (OSError, OperationalError) as exc:  # the requeue goes on; the next pass drains
        log.warning("cannot drain the undelivered trials queue: %s", exc)
    ids = store.admin.requeue_stale(stale_after, max_attempts=max_attempts)
    if ids:
        log.warning("requeued %d stale trials", len(ids))
        enqueue_ids(store, app, ids)
    return ids
