"""The Celery task `workers.run_trial`: thin, like a web view. The logic is in `runner`."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from celery import Celery, Task

from core.broker import TASK_NAME
from core.errors import NotFound, StoreUnavailable
from workers.runner import RunnerOptions, execute_trial, worker_identity

if TYPE_CHECKING:
    from workers.app import WorkerContext

log = logging.getLogger(__name__)


def register(app: Celery, context: WorkerContext) -> None:
    """Register `workers.run_trial` on `app`, bound to this process's context."""

    @app.task(
        name=TASK_NAME,
        bind=True,
        max_retries=None,
        acks_late=True,
        reject_on_worker_lost=True,
        ignore_result=True,
    )
    def run_trial(self: Task, trial_id: str) -> str:
        settings = context.settings
        options = RunnerOptions(
            heartbeat_seconds=settings.heartbeat_seconds,
            stale_after_seconds=settings.stale_after_seconds,
            data_dir=None,
        )
        if not isinstance(trial_id, str):
            log.error("refusing a message whose argument is not a trial id: %r", trial_id)
            return "refused"
        try:
            return execute_trial(
                context.store, trial_id, worker_identity(self.request.hostname), options
            )
        except NotFound:
            log.error("trial %s does not exist; dropping the message", trial_id)
            return "unknown"
        except StoreUnavailable as exc:
            delay = min(300, 5 * 2 ** min(self.request.retries, 6))
            log.warning("store unavailable for %s (%s); retrying in %d s", trial_id, exc, delay)
            raise self.retry(exc=exc, countdown=delay) from exc
