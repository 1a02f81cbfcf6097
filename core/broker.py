"""Broker names and the Celery configuration every process shares.

The API and scheduler send tasks by name (`TASK_NAME`, and `GROUP_TASK_NAME` for a fused
group of trials) with a Celery app built from `celery_config`; workers build theirs from
the same function and register the tasks. The settings enforce the platform's delivery
rules:

- JSON only: a pickled message is refused (``accept_content``);
- late acks, reject on worker loss, prefetch one: a trial whose worker dies is redelivered;
- results off: the store is the one source of truth;
- a durable queue, persistent messages, publisher confirms.

RabbitMQ's delivery-ack timeout (``consumer_timeout``, 30 min by default) would close the
channel of a worker still training a long trial. RabbitMQ before 3.12 cannot set it per
queue, so it is raised server-wide in ``configs/rabbitmq.conf`` (8 days, above the largest
``execution.time_limit``); docker-compose mounts that file.
"""

from __future__ import annotations

from typing import Any

from kombu import Exchange, Queue

from core.settings import Settings

TASK_NAME = "workers.run_trial"
# A fused group (`scheduler.grouping`): one message, one argument, the list of its trial ids.
GROUP_TASK_NAME = "workers.run_group"
# A share of a data-parallel trial's ranks that the worker holding the trial asks another
# worker (on another host) to run (`workers.gang`).
RANKS_TASK_NAME = "workers.run_ranks"
# Hard limit = soft limit + this grace, so a trial's own handler can record the failure.
HARD_LIMIT_GRACE_SECONDS = 60.0


def trial_queue(settings: Settings) -> Queue:
    """The durable queue trials wait in."""
    exchange = Exchange(settings.queue, type="direct", durable=True)
    return Queue(settings.queue, exchange, routing_key=settings.queue, durable=True)


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
