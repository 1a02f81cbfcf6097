"""Trials whose message the broker dropped: a quorum trials queue dead-letters a message
returned to it more than its delivery limit (``SWEEPSTACK_MAX_ATTEMPTS``) times to
`core.broker.undelivered_queue` (see `core.broker`). The stale-heartbeat requeue
(`scheduler.submit.requeue_stale`, run by `sweepstack scheduler` and `sweepstack run`)
drains that queue each time (`drain_undelivered`): a trial of such a message still
``queued`` has no message left anywhere, so it ends ``failed`` with the reason
(`SweepAdmin.fail_undelivered`); a running one is left to its holder, and to the
stale-heartbeat requeue should that holder be gone. A classic queue drops nothing: there is
nothing to drain.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from celery import Celery
from kombu import Queue

from core.broker import GROUP_TASK_NAME, TASK_NAME
from core.store.store import Store

log = logging.getLogger(__name__)

#: Messages read from the undelivered queue in one pass at most.
BATCH = 500


def trial_ids_of(body: Any, headers: dict[str, Any]) -> list[str]:
    """The trial ids a task message names (Celery's protocol 2, JSON: ``[args, kwargs,
    embed]``); none for another kind of message."""
    if isinstance(body, (bytes, str)):
        try:
            body = json.loads(body)
        except ValueError:
            return []
    task = headers.get("task")
    if task not in (TASK_NAME, GROUP_TASK_NAME) or not isinstance(body, list) or not body:
        return []
    args = body[0] if isinstance(body[0], list) else []
    kwargs = body[1] if len(body) > 1 and isinstance(body[1], dict) else {}
    first = args[0] if args else kwargs.get("trial_id", kwargs.get("trial_ids"))
    ids = first if isinstance(first, list) else [first]
    return [i for i in ids if isinstance(i, str)]


def reason(limit: Any) -> str:
    """The error a trial whose message was dropped at delivery limit `limit` ends with."""
    return (
        f"its message was dropped by the broker after {limit} returns to the queue "
        f"(the quorum queue's delivery limit, SWEEPSTACK_MAX_ATTEMPTS={limit}): each worker "
        "that took it died or lost the broker before claiming it (retry to try again)"
    )


def dead_letters(app: Celery) -> tuple[Queue, Any] | None:
    """The queue the app's trials queue dead-letters to and its delivery limit, or None for
    a queue that drops nothing (a classic one)."""
    trials = app.amqp.queues[app.conf.task_default_queue]
    arguments = trials.queue_arguments or {}
    if arguments.get("x-queue-type") != "quorum" or "x-dead-letter-routing-key" not in arguments:
        return None
    name = arguments["x-dead-letter-routing-key"]
    return Queue(name, durable=True, queue_arguments={"x-queue-type": "quorum"}), arguments.get(
        "x-delivery-limit"
    )


def drain_undelivered(store: Store, app: Celery) -> list[str]:
    """End the queued trials of every dead-lettered message (module docstring), then ack
    it; the ids this call ended. Nothing for a classic trials queue."""
    found = dead_letters(app)
    if found is None:
        return []
    dead, limit = found
    ended: list[str] = []
    with app.connection_for_write() as conn:
        queue = dead(conn.channel())
        queue.declare()
        for _ in range(BATCH):
            message = queue.get(no_ack=False, accept=["json"])
            if message is None:
                break
            ids = trial_ids_of(message.body, message.headers or {})
            if ids:
                ended += store.admin.fail_undelivered(ids, reason(limit))
            message.ack()
    if ended:
        log.warning("%d trials failed: their messages reached the delivery limit", len(ended))
    return ended
