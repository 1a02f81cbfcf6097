"""The Celery tasks `workers.run_trial` and `workers.run_group`: thin, like web views.

The logic is in `runner` (one trial) and `group_runner` (a fused group of trials). A
message may carry, besides the ids, each trial's config and the attempt it was queued at
(`scheduler.enqueue`): the claim is then one write with no read (`workers.claims`). A
message without them, or with ones that do not check out, reads them from the store. A
pruning sweep's message also says ``watch: true``: report every epoch at once and check
for a prune request after each (`workers.runner`). A trial that ends ``lost`` because its
claim vanished from the store (it is ``queued`` again, with no message anywhere) has its
message sent again (`_vanished`), so it is never stranded. A group message that says ``sequential:
true`` is a chunk of cheap trials (`scheduler.chunks`): trained one by one, never fused.
`workers.run_ranks` runs a share of the ranks of another worker's data-parallel trial over
several hosts (`workers.gang`); a trial whose shares were not gathered in time is sent again
after a random delay. A trial handed back as the worker shuts down (`workers.shutdown`) is
sent again in a new message (Celery's retry: the new one is published, then the old one
acked), so that another worker takes it at once. Not a reject with requeue: on a quorum
queue every requeue counts toward the delivery limit that backs the poison rule
(`core.broker`), and a trial handed back at a few scale-downs is no poison.
"""

from __future__ import annotations

import logging
import random
from typing import Any

from celery import Celery, Task

from core.broker import GROUP_TASK_NAME, RANKS_TASK_NAME, TASK_NAME
from core.errors import NotFound, StoreUnavailable
from workers.claims import decide_at_of
from workers.context import WorkerContext
from workers.gang import GATHER_RETRY_SECONDS, Gang
from workers.group_runner import execute_group
from workers.runner import (
    HANDED_BACK,
    NOT_GATHERED,
    RunnerOptions,
    execute_trial,
    worker_identity,
)

log = logging.getLogger(__name__)

#: What both tasks are: late acks and reject on worker loss (a killed trial is
#: redelivered), retried without end while the store is unreachable, no results.
TASK_OPTIONS: dict[str, Any] = {
    "bind": True,
    "max_retries": None,
    "acks_late": True,
    "reject_on_worker_lost": True,
    "ignore_result": True,
}


def _carried(config: Any, attempt: Any) -> tuple[int, dict[str, Any]] | None:
    """The (queued attempt, config) a message carries, if it carries them well-formed."""
    if config is None and attempt is None:
        return None
    if (
        isinstance(config, dict)
        and isinstance(attempt, int)
        and not isinstance(attempt, bool)
        and attempt >= 0
    ):
        return attempt, config
    log.warning("ignoring a malformed config or attempt in a message (attempt %r)", attempt)
    return None


#: Seconds before a message whose trial's claim vanished is sent again (`_vanished`).
RESEND_SECONDS = 1


def _vanished(context: WorkerContext, trial_ids: list[str]) -> list[str]:
    """Those of the trials that ended ``lost`` here and are ``queued`` in the store: their
    claim vanished (a store that lost its last writes took it back), so no message of
    theirs is left anywhere; the caller sends its own again (the claim still decides who
    trains it: a duplicate is skipped)."""
    out = []
    for trial_id in trial_ids:
        try:
            if context.store.lifecycle.trial(trial_id)["state"] == "queued":
                out.append(trial_id)
        except NotFound:
            continue
    return out


def register(app: Celery, context: WorkerContext) -> None:
    """Register `workers.run_trial` and `workers.run_group` on `app`, bound to `context`."""

    def _options() -> RunnerOptions:
        settings = context.settings
        return RunnerOptions(
            heartbeat_seconds=settings.heartbeat_seconds,
            stale_after_seconds=settings.stale_after_seconds,
            max_attempts=settings.max_attempts,
            data_dir=settings.datasets_dir,
            artifacts_keep=settings.artifacts_keep,
            artifacts_top_k=settings.artifacts_top_k,
        )

    @app.task(name=TASK_NAME, **TASK_OPTIONS)
    def run_trial(
        self: Task,
        trial_id: str,
        config: dict | None = None,
        attempt: int | None = None,
        watch: bool = False,
        decide_at: list[int] | str | None = None,
    ) -> str:
        if not isinstance(trial_id, str):
            log.error("refusing a message whose argument is not a trial id: %r", trial_id)
            return "refused"
        worker = worker_identity(self.request.hostname)
        try:
            outcome = execute_trial(
                context.store.lifecycle,
                trial_id,
                worker,
                _options(),
                carried=_carried(config, attempt),
                watch=watch is True,
                decide_at=decide_at_of(decide_at),
                artifacts=context.store.artifacts,
                gang=_gang(self.app),
            )
            if outcome == NOT_GATHERED:
                raise self.retry(countdown=_gather_retry(config))
            if outcome == HANDED_BACK:
                log.info("trial %s handed back: the worker shuts down; sending it again", trial_id)
                raise self.retry(countdown=0)
            if outcome == "lost" and _vanished(context, [trial_id]):
                log.warning("trial %s: its claim vanished and it is queued; sending it again",
                            trial_id)  # fmt: skip
                raise self.retry(countdown=RESEND_SECONDS)
            return outcome
        except NotFound:
            log.error("trial %s does not exist; dropping the message", trial_id)
            return "unknown"
        except StoreUnavailable as exc:
            delay = _retry_delay(self.request.retries)
            log.warning("store unavailable for %s (%s); retrying in %d s", trial_id, exc, delay)
            raise self.retry(exc=exc, countdown=delay) from exc

    def _gang(sender: Celery) -> Gang:
        return Gang(
            sender,
            context.store.lifecycle,
            context.store.artifacts,
            context.settings.broker_url,
            context.settings.rendezvous_host,
            context.settings.datasets_dir,
        )

    @app.task(name=RANKS_TASK_NAME, **TASK_OPTIONS)
    def run_ranks(
        self: Task,
        trial_id: str,
        attempt: int,
        master: str,
        ranks: list[int],
        config: dict,
        deadline: float,
        resume_epoch: int | None = None,
    ) -> str:
        if not (
            isinstance(trial_id, str) and isinstance(attempt, int) and isinstance(master, str)
            and isinstance(ranks, list) and all(isinstance(r, int) for r in ranks)
            and isinstance(config, dict) and isinstance(deadline, int | float)
        ):  # fmt: skip
            log.error("refusing a malformed ranks message for %r", trial_id)
            return "refused"
        try:
            return _gang(self.app).execute_share(
                trial_id, attempt, master, ranks, config, float(deadline), resume_epoch
            )
        except StoreUnavailable as exc:  # the leader gives up at its deadline meanwhile
            log.warning("store unavailable for ranks of %s (%s); dropping them", trial_id, exc)
            return "failed"

    @app.task(name=GROUP_TASK_NAME, **TASK_OPTIONS)
    def run_group(
        self: Task,
        trial_ids: list[str],
        configs: list | None = None,
        attempts: list | None = None,
        watch: bool = False,
        sequential: bool = False,
        decide_at: list[int] | str | None = None,
    ) -> str:
        if (
            not isinstance(trial_ids, list)
            or not trial_ids
            or not all(isinstance(t, str) for t in trial_ids)
        ):
            log.error("refusing a group message whose argument is not a list of ids: %r", trial_ids)
            return "refused"
        carried: dict[str, tuple[int, dict[str, Any]]] = {}
        if (
            isinstance(configs, list)
            and isinstance(attempts, list)
            and len(configs) == len(attempts) == len(trial_ids)
        ):
            for trial_id, config, attempt in zip(trial_ids, configs, attempts, strict=True):
                if (one := _carried(config, attempt)) is not None:
                    carried[trial_id] = one
        worker = worker_identity(self.request.hostname)
        try:
            outcomes = execute_group(
                context.store.lifecycle,
                trial_ids,
                worker,
                _options(),
                carried,
                watch=watch is True,
                decide_at=decide_at_of(decide_at),
                sequential=sequential is True,
                artifacts=context.store.artifacts,
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
        if HANDED_BACK in outcomes.values():
            # The whole message again: its finished trials are skipped at the claim.
            log.info("group handed back: the worker shuts down; sending it again")
            raise self.retry(countdown=0)
        lost = [t for t, outcome in outcomes.items() if outcome == "lost"]
        if lost and (gone := _vanished(context, lost)):
            # The whole message again: its finished trials are skipped at the claim.
            log.warning("group: %d trial(s) whose claim vanished are queued; sending the group "
                        "again", len(gone))  # fmt: skip
            raise self.retry(countdown=RESEND_SECONDS)
        counts: dict[str, int] = {}
        for outcome in outcomes.values():
            counts[outcome] = counts.get(outcome, 0) + 1
        return ", ".join(f"{state} {n}" for state, n in sorted(counts.items()))


def _gather_retry(config: Any) -> float:
    """Seconds before a trial whose ranks on other hosts were not gathered is tried again:
    random (so that two such trials stop meeting), up to twice its ``gather_timeout``, at
    most `GATHER_RETRY_SECONDS` (`workers.gang`)."""
    try:
        window = 2 * float(config["execution"]["parallel"]["gather_timeout"])
    except (KeyError, TypeError, ValueError):
        window = GATHER_RETRY_SECONDS
    return random.uniform(1.0, max(1.0, min(window, GATHER_RETRY_SECONDS)))


def _retry_delay(retries: int) -> int:
    """Seconds before a task retries after the store was unreachable: 5, 10, 20 ... 300."""
    return min(300, 5 * 2 ** min(retries, 6))
