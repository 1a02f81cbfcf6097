"""Broker names and the Celery configuration every process shares.

The API and scheduler send tasks by name (`TASK_NAME`, and `GROUP_TASK_NAME` for a fused
group of trials) with a Celery app built from `celery_config`; workers build theirs from
the same function and register the tasks. The settings enforce the platform's delivery
rules:

- JSON only: a pickled message is refused (``accept_content``);
- late acks, reject on worker loss, prefetch one: a trial whose worker dies is redelivered;
- results off: the store is the one source of truth;
- a durable queue, persistent messages, publisher confirms;
- message priorities (``x-max-priority``, `core.shares.MESSAGE_PRIORITY`): a high-priority
  sweep's trials overtake the others. RabbitMQ refuses to declare an existing queue with
  other arguments (``PRECONDITION_FAILED``), so a deployment whose queue was made before
  priorities deletes it once, empty, before it upgrades (docs/deployment.md).

The trials queue is a classic queue, or a quorum queue with ``SWEEPSTACK_QUEUE_TYPE=quorum``:
replicated by Raft on a RabbitMQ cluster's nodes, so that losing one node (its leader
included) loses no message. Its delivery limit (``x-delivery-limit``) is
``SWEEPSTACK_MAX_ATTEMPTS``: the store's poison rule (`core.states`) ends a trial whose
worker keeps dying at the same count of deliveries, so the broker's limit is a backstop for
a message that kills workers before they claim it. A message over the limit is
dead-lettered to `undelivered_queue`, which the scheduler drains
(`scheduler.undelivered`): it ends each such trial still ``queued`` failed, with the reason,
so a dropped message never leaves its trial waiting for ever. Workers and senders reach a
cluster through a failover list of broker URLs (``amqp://a//;amqp://b//``, kombu's own
syntax). RabbitMQ cannot change an existing queue's type: `check_queue` says so, naming the
setting.

RabbitMQ's delivery-ack timeout (``consumer_timeout``, 30 min by default) would close the
channel of a worker still training a long trial. RabbitMQ before 3.12 cannot set it per
queue, so it is raised server-wide in ``configs/rabbitmq.conf`` (8 days, above the largest
``execution.time_limit``); docker-compose mounts that file.
"""

from __future__ import annotations

from typing import Any

from kombu import Connection, Exchange, Queue

from core.errors import ConfigError
from core.settings import Settings
from core.shares import MAX_MESSAGE_PRIORITY

TASK_NAME = "workers.run_trial"
# A fused group (`scheduler.grouping`): one message, one argument, the list of its trial ids.
GROUP_TASK_NAME = "workers.run_group"
# A share of a data-parallel trial's ranks that the worker holding the trial asks another
# worker (on another host) to run (`workers.gang`).
RANKS_TASK_NAME = "workers.run_ranks"
# Hard limit = soft limit + this grace, so a trial's own handler can record the failure.
HARD_LIMIT_GRACE_SECONDS = 60.0


def trial_queue(settings: Settings) -> Queue:
    """The durable queue trials wait in: classic, a priority queue (``x-max-priority``) so
    that a high-priority sweep's trials overtake those already waiting (`core.shares`); or
    quorum, with a delivery limit whose dropped messages go to `undelivered_queue` (the
    module docstring). A quorum queue takes no ``x-max-priority``, so a high-priority sweep's
    messages do not overtake there (RabbitMQ 4.0's quorum queues count only priorities above
    4 as high; `core.shares.MESSAGE_PRIORITY` is 0 to 2)."""
    exchange = Exchange(settings.queue, type="direct", durable=True)
    if settings.queue_type != "quorum":
        return Queue(
            settings.queue,
            exchange,
            routing_key=settings.queue,
            durable=True,
            max_priority=MAX_MESSAGE_PRIORITY,
        )
    arguments = {
        "x-queue-type": "quorum",
        "x-delivery-limit": settings.max_attempts,
        "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": undelivered_queue(settings).name,
    }
    return Queue(
        settings.queue,
        exchange,
        routing_key=settings.queue,
        durable=True,
        queue_arguments=arguments,
    )


def undelivered_queue(settings: Settings) -> Queue:
    """Where a quorum trials queue dead-letters the messages over its delivery limit (a
    quorum queue too, bound to the default exchange by its name)."""
    return Queue(
        f"{settings.queue}.undelivered",
        durable=True,
        queue_arguments={"x-queue-type": "quorum"},
    )


def check_queue(settings: Settings, connection: Connection | None = None) -> None:
    """Declare the trials queue as the settings say (and its `undelivered_queue` when it is
    a quorum queue); `ConfigError` naming ``SWEEPSTACK_QUEUE_TYPE`` when the broker has the
    queue already with another type, which RabbitMQ cannot change. Workers and the
    scheduler call it as they start."""
    url = settings.broker_url
    if connection is None and (not url or url.startswith("filesystem:")):
        return
    own = connection is None
    conn = connection or Connection(url)
    try:
        queues = [trial_queue(settings)]
        if settings.queue_type == "quorum":
            queues.insert(0, undelivered_queue(settings))
        for queue in queues:
            try:
                queue(conn.channel()).declare()
            except conn.channel_errors as exc:
                if "inequivalent arg" not in str(exc):
                    raise
                raise ConfigError(
                    f"SWEEPSTACK_QUEUE_TYPE={settings.queue_type}: the broker already has the "
                    f"queue {queue.name!r} with other arguments ({exc}); RabbitMQ cannot change "
                    "a queue's type or arguments: drain and delete it (rabbitmqctl delete_queue "
                    f"{queue.name}), or set SWEEPSTACK_QUEUE to a new name"
                ) from None
    finally:
        if own:
            conn.release()


EMBEDDED_BROKER_URL = "filesystem://"
#: How often an embedded worker looks for its next message. kombu's filesystem transport has
#: no wake-up: a worker that acked a trial waits for the next poll before it takes another
#: message (prefetch one), half an interval on average: at 0.1 s that was ~50 ms between
#: two trials. A poll of an empty folder is one listdir, so 100 a second cost little.
EMBEDDED_POLLING_SECONDS = 0.01


def embedded_transport_options(settings: Settings) -> dict[str, Any]:
    """kombu's filesystem transport under ``DATA_DIR/broker`` (`sweepstack run`'s broker).

    Senders and workers read and write the same folder; workers poll it every
    `EMBEDDED_POLLING_SECONDS`.
    """
    root = settings.data_dir / "broker"
    folders = {name: root / name for name in ("queue", "control", "processed")}
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    return {
        "data_folder_in": str(folders["queue"]),
        "data_folder_out": str(folders["queue"]),
        "control_folder": str(folders["control"]),
        "processed_folder": str(folders["processed"]),
        "store_processed": False,
        "polling_interval": EMBEDDED_POLLING_SECONDS,
    }


def celery_config(settings: Settings, broker_url: str | None = None) -> dict[str, Any]:
    """Celery settings for senders and workers alike."""
    url = broker_url or settings.broker_url
    if not url:
        raise ValueError("no broker URL: set SWEEPSTACK_BROKER_URL")
    queue = trial_queue(settings)
    if url.startswith("filesystem:"):
        transport: dict[str, Any] = embedded_transport_options(settings)
    else:
        transport = {"confirm_publish": True}
    return {
        "broker_url": url,
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": transport,
        "task_serializer": "json",
        "accept_content": ["json"],
        "result_serializer": "json",
        "result_backend": None,
        "task_ignore_result": True,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_default_queue": queue.name,
        "task_default_exchange": queue.exchange.name,
        "task_default_routing_key": queue.routing_key,
        "task_queues": (queue,),
        "task_create_missing_queues": False,
        "task_default_delivery_mode": "persistent",
        "task_routes": {
            name: {"queue": queue.name} for name in (TASK_NAME, GROUP_TASK_NAME, RANKS_TASK_NAME)
        },
        # Off unless SWEEPSTACK_TASK_EVENTS says so (`Settings.task_events`); Flower can
        # still turn them on in running workers (`celery control enable_events`).
        "worker_send_task_events": settings.task_events,
        "task_send_sent_event": False,
        "worker_hijack_root_logger": False,
        "worker_cancel_long_running_tasks_on_connection_loss": False,
        # A new pool process sets up torch before it says it is up; on a loaded host that
        # took longer than Celery's 4 s default, and the pool killed and replaced it forever.
        "worker_proc_alive_timeout": 60.0,
        "enable_utc": True,
    }


def time_limits(time_limit: float) -> dict[str, float]:
    """The per-message soft and hard limits for a trial with this `execution.time_limit`."""
    return {"soft_time_limit": time_limit, "time_limit": time_limit + HARD_LIMIT_GRACE_SECONDS}
