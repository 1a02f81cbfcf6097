"""Retry a sweep: queue its failed trials again, requeue its stale running ones, and send a
message for each. One function, so the REST API and the dashboard retry the same way.

The broker is asked first (`broker_reachable`): if it does not answer, nothing changed.
Should it fail between the store writes and the messages, the error is raised and those
trials stay queued without a message; nothing resends them yet (a known gap, as in
``POST /api/v1/sweeps/{id}/retry``).

The dashboard may not import the scheduler (DESIGN.md, "who may import whom"), so the
composition (`cli.app.create_app`) hands it `retry_sweep` as a callable.
"""

from __future__ import annotations

import logging

from celery import Celery

from core.settings import Settings
from core.store.store import Store
from scheduler.submit import enqueue_ids

log = logging.getLogger(__name__)


def broker_reachable(sender: Celery, timeout: float) -> None:
    """Raise the broker's connection error now, before anything is written, if it does
    not answer within `timeout` s."""
    with sender.connection_for_write(connect_timeout=timeout) as conn:
        conn.ensure_connection(max_retries=0)


def retry_sweep(store: Store, sender: Celery, settings: Settings, sweep_id: str) -> dict[str, int]:
    """Queue the sweep's failed trials again and its stale running ones (heartbeat older
    than ``stale_after_seconds``), and enqueue them all; ``{"retried", "requeued_stale"}``.

    `core.errors.InvalidTransition` if the sweep is cancelled (nothing changes). The
    caller checks that the sweep is the caller's.
    """
    broker_reachable(sender, settings.api_timeout_seconds)
    failed = store.admin.retry_failed(sweep_id)
    stale = store.admin.requeue_stale(
        settings.stale_after_seconds, sweep_id=sweep_id, max_attempts=settings.max_attempts
    )
    enqueue_ids(store, sender, failed + stale)
    if failed or stale:
        log.info(
            "sweep %s: retried %d failed and %d stale trials", sweep_id, len(failed), len(stale)
        )
    return {"retried": len(failed), "requeued_stale": len(stale)}
