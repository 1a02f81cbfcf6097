"""The Celery tasks `workers.run_trial` and `workers.run_group`: thin, like web views.

The logic is in `runner` (one trial) and `group_runner` (a fused group of trials).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from celery import Celery, Task

from core.broker import GROUP_TASK_NAME, TASK_NAME
from core.errors import NotFound, StoreUnavailable
from workers.group_runner import execute_group
from workers.runner import RunnerOptions, execute_trial, worker_identity

if TYPE_CHECKING:
    from workers.app import WorkerContext

log = logging.getLogger(__name__)


def register(app: Celery, context: WorkerContext) -> None:
    """Register `workers.run_trial` and `workers.run_group` on `app`, bound to `context`."""

    def _options() -> RunnerOptions:
        settings = context.settings
        return RunnerOptions(
            heartbeat_seconds=settings.heartbeat_seconds,
            stale_after_seconds=settings.stale_after_seconds,
            max_attempts=settings.max_attempts,
            data_dir=settings.datasets_dir,
        )

    @app.task(
        name=TASK_NAME,
        bind=True,
        max_retries=None,
        acks_late=True,
        reject_on_worker_lost=True,
        ignore_result=True,
    )
    def run_trial(self: Task, trial_id: str) -> str:
        if not isinstance(trial_id, str):
            log.error("refusing a message whose argument is not a trial id: %r", trial_id)
            return "refused"
        try:
            return execute_trial(
                context.store, trial_id, worker_identity(self.request.hostname), _options()
            )
        except NotFound:
            log.error("trial %s does not exist; dropping the message", trial_id)
            return "unknown"
        except StoreUnavailable as exc:
            delay = _retry_delay(self.request.retries)
            log.warning("store unavailable for %s (%s); retrying in %d s", trial_id, exc, delay)
            raise self.retry(exc=exc, countdown=delay) from exc

    @app.task(
        name=GROUP_TASK_NAME,
        bind=True,
        max_retries=None,
        acks_late=True,
        reject_on_worker_lost=True,
        ignore_result=True,
    )
    def run_group(self: Task, trial_ids: list[str]) -> str:
        if (
            not isinstance(trial_ids, list)
            or not trial_ids
            or not all(isinstance(t, str) for t in trial_ids)
        ):
            log.error("refusing a group message whose argument is not a list of ids: %r", trial_ids)
            return "refused"
        try:
            outcomes = execute_group(
                context.store, trial_ids, worker_identity(self.request.hostname), _options()
            )
        except StoreUnavailable as exc:
            delay = _retry_delay(self.request.retries)
            log.warning(
                "store unavailable for a group of %d (%s); retrying in %d s",
                len(trial_ids),
                exc,
                delay,
            )
            raise self.retry(exc=exc, countdown=delay) from exc
        counts: dict[str, int] = {}
        for outcome in outcomes.values():
            counts[outcome] = counts.get(outcome, 0) + 1
        return ", ".join(f"{state} {n}" for state, n in sorted(counts.items()))


def _retry_delay(retries: int) -> int:
    """Seconds before a task retries after the store was unreachable: 5, 10, 20 ... 300."""
    return min(300, 5 * 2 ** min(retries, 6))
