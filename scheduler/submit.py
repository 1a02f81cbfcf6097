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
from datetime import UTC, datetime
from typing import Any

from celery import Celery
from kombu.exceptions import OperationalError

from core.errors import NotFound
from core.settings import DEFAULT_MAX_ATTEMPTS
from core.shares import MESSAGE_PRIORITY, Claim
from core.spec.sweep import SweepSpec
from core.store.shares import current_shares
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
    quota_running: int | None = None,
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
    feeding loop would have sent: where a scheduler recorded the workers online, no more
    than the new sweep's fair share of them (`first_share`; `quota_running`: the
    deployment's quota of trials running at once per user). The sweep is stored with this
    process's lease, given back once the window is sent, so no scheduler sends the window
    a second time meanwhile. If the broker refuses, the sweep is cancelled and the error is
    raised.
    """
    lease_owner = owner_name()
    warm_ids: list[str] = []
    warm: list[Any] = []
    if spec.search.warm_start:
        from scheduler.warm import warm_records, warm_trials

        warm_ids = warm_trials(store, spec, owner)
        warm = warm_records(store, spec, warm_ids)
    feeder = Feeder(store, app, "", spec, owner=lease_owner, workers=workers,
                    big_window=window or BIG_WINDOW, warm=warm)  # fmt: skip
    feeder.share_window = first_share(store, spec, feeder.total, owner, quota_running)
    wanted, units = feeder.wanted(0)
    first = min(wanted, feeder.total)
    points, extras = feeder.ask(first, units)
    total = feeder.total
    if len(points) < first and feeder.ran_out:
        total = len(points)  # the space ran out in the first window already
    lease = store.feeding.lease_for(lease_owner, LEASE_SECONDS)
    sweep_fields: dict[str, Any] = {"lease": lease, "priority": spec.priority, "weight": 1.0}
    if feeder.session is not None:
        sweep_fields["study_attrs"] = feeder.session.study_attrs()
    if warm_ids:
        sweep_fields["warm_trials"] = warm_ids
    sweep_id = store.admin.create_sweep(
        spec, points, owner=owner, total=total, extras=extras, sweep_fields=sweep_fields
    )
    try:
        out = feeder.outgoing(sweep_id, points, unit_keys(extras))
        send_window(store, app, sweep_id, out, spec.priority)
    except Exception:
        log.exception("enqueueing sweep %s failed; cancelling it", sweep_id)
        store.admin.cancel_sweep(sweep_id)
        raise
    finally:
        store.feeding.release_lease(sweep_id, lease_owner)
    return sweep_id, total


def first_share(
    store: Store, spec: SweepSpec, total: int, owner: str | None, quota_running: int | None
) -> int | None:
    """A new sweep's window under the fair share (`core.shares`), computed as the
    scheduler's next pass will, with the sweep counted in; None where no scheduler recorded
    the workers online lately (the feeder's own window then)."""
    workers = store.shares.workers()
    if not workers:
        return None
    demand = total if not spec.search.parallelism else min(total, spec.search.parallelism)
    claim = Claim("", owner or "", demand, priority=spec.priority, order=datetime.max.replace(
        tzinfo=UTC))  # fmt: skip
    return current_shares(store.shares, workers, quota_running, [claim])[""].window


def enqueue_ids(store: Store, app: Celery, trial_ids: Iterable[str]) -> int:
    """Enqueue trials already in the store (requeued or retried), with their time limits,
    configs and the attempts they are queued at."""
    ids = list(trial_ids)
    docs = store.reads.trials_by_id(ids, ["config", "attempt", "sweep_id"])
    watched: dict[str, tuple[bool, str]] = {}
    sent: dict[str, list[Outgoing]] = {}
    for trial_id in ids:
        doc = docs[trial_id]
        config, attempt = doc.get("config", {}), doc.get("attempt", 0)
        sweep_id = doc.get("sweep_id", "")
        if sweep_id not in watched:
            watched[sweep_id] = _prunes(store, sweep_id)
        watch, priority = watched[sweep_id]
        message = (trial_id, time_limit(config), carry(config, attempt, watch=watch))
        sent.setdefault(priority, []).append(message)
    return sum(enqueue(app, out, MESSAGE_PRIORITY[p]) for p, out in sent.items())


def _prunes(store: Store, sweep_id: str) -> tuple[bool, str]:
    """Whether the sweep's spec stops trials early (its messages then carry `watch`), and
    the sweep's priority (its messages' own, `core.shares.MESSAGE_PRIORITY`)."""
    try:
        doc = store.reads.get_sweep(sweep_id)
    except NotFound:
        return False, "normal"
    spec = doc.get("spec") or {}
    priority = doc.get("priority") if doc.get("priority") in MESSAGE_PRIORITY else "normal"
    return (spec.get("pruning") or {}).get("algorithm", "none") not in (None, "none"), priority


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
