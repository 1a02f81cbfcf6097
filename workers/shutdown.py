"""Scale-down: a worker sent SIGTERM hands its trials back within a grace period.

Compose (``docker compose stop``, ``--scale`` down) and Kubernetes (a Deployment scaled
down, by hand or by KEDA) stop a worker with SIGTERM, then SIGKILL once its grace period has
passed (``stop_grace_period``, ``terminationGracePeriodSeconds``). Celery's own answer to
SIGTERM, a warm shutdown, takes no new message and waits for the running tasks however long
a trial has left, so a long trial was killed at the end of the grace period and waited for
the stale-heartbeat limit before another worker took it. A worker here has
``SWEEPSTACK_SHUTDOWN_GRACE_SECONDS`` (`Settings.shutdown_grace_seconds`) and does this:

1. Its main process, on SIGTERM (Celery's ``worker_shutting_down``), tells its pool
   processes to hand their trials back (`HAND_BACK_SIGNAL`) and starts a timer; the warm
   shutdown takes no new message.
2. Each trial saves a checkpoint at its next epoch end (whatever the sweep's checkpoint
   interval; none when the sweep's checkpoints are off) and stops (`stop_training`). A trial
   whose epoch does not end within `TRAIN_SHARE` of the grace stops part-way: the next
   attempt resumes from its last checkpoint, or from epoch 1.
3. The runner writes its rows, waits for the checkpoint, and hands the trial back
   (`TrialLifecycle.hand_back`: ``queued`` again, not a lost attempt); the task sends it
   again in a new message (Celery's retry, `workers.tasks`), so another worker takes it at
   once, which claims the trial and resumes from the checkpoint
   (`TrialLifecycle.resume`): no epoch lost past the checkpoint, none written twice.
4. The pool is then idle and the warm shutdown ends. Should a task still run at
   `escalate_after` (80% of the grace, at least 5 s before its end: a training function
   that never asks ``should_stop``), the
   timer sends the main process SIGQUIT, Celery's cold shutdown: it requeues the messages of
   the tasks still running and ends the pool, and their trials are retaken as a killed
   worker's are (at once by a worker on the same host, after the stale-heartbeat limit by
   one elsewhere).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from typing import Any, Protocol

log = logging.getLogger(__name__)

#: What the main process sends its pool processes on SIGTERM (Celery's children reset
#: SIGTERM and SIGUSR1, its soft time limit; SIGUSR2 is free).
HAND_BACK_SIGNAL = signal.SIGUSR2
#: The share of the grace period a trial may train on, waiting for its epoch to end.
TRAIN_SHARE = 0.5
#: The share of the grace period after which the main process ends its tasks (cold
#: shutdown), and the least time it leaves that shutdown (ending the pool takes seconds on a
#: loaded host) before the grace is over: `escalate_after`.
ESCALATE_SHARE = 0.8
ESCALATE_MARGIN_SECONDS = 5.0
#: Why a trial's attempt went back to the queue (its ``history`` entry).
REASON = "its worker shut down: SIGTERM, a scale-down or a stop"


class _Saver(Protocol):
    """What `stop_training` asks of a trial's checkpoints (`workers.checkpointing`)."""

    policy: Any
    saved_for_hand_back: bool


class _HandBack:
    """This process's hand-back request: when it came, and the grace it has."""

    def __init__(self) -> None:
        self.requested_at: float | None = None
        self.grace = 30.0

    def request(self) -> None:
        if self.requested_at is None:
            self.requested_at = time.monotonic()


_STATE = _HandBack()


def configure(grace: float) -> None:
    """Set the grace period and let `HAND_BACK_SIGNAL` request a hand back in this process
    (and in the pool processes it forks, which inherit the handler)."""
    _STATE.grace = grace
    signal.signal(HAND_BACK_SIGNAL, _on_signal)


def _on_signal(_signum: int, _frame: object) -> None:
    _STATE.request()


def requested() -> bool:
    """Whether this process was asked to hand its trials back."""
    return _STATE.requested_at is not None


def stop_training(checkpoints: _Saver | None) -> bool:
    """Whether a trial should stop now to be handed back (module docstring): asked, and its
    checkpoint saved since (or it saves none), or `TRAIN_SHARE` of the grace gone."""
    asked = _STATE.requested_at
    if asked is None:
        return False
    if checkpoints is None or not checkpoints.policy.checkpoints:
        return True
    if checkpoints.saved_for_hand_back:
        return True
    return time.monotonic() - asked >= _STATE.grace * TRAIN_SHARE


def escalate_after(grace: float) -> float:
    """Seconds after SIGTERM at which the tasks still running are ended: `ESCALATE_SHARE`
    of the grace, or `ESCALATE_MARGIN_SECONDS` before its end if that is sooner, never
    before the trials' own `TRAIN_SHARE` is over (30 s: 24 s; 10 s: 5 s)."""
    return max(grace * TRAIN_SHARE, min(grace * ESCALATE_SHARE, grace - ESCALATE_MARGIN_SECONDS))


def pool_processes() -> list[int]:
    """The pids of this (main) process's pool processes."""
    from billiard.process import active_children

    return [child.pid for child in active_children() if child.pid]


def install_main(grace: float) -> None:
    """In a worker's main process: on SIGTERM, ask the pool processes to hand their trials
    back, and end the tasks still running at `escalate_after` (module docstring)."""
    from celery.signals import worker_shutting_down

    configure(grace)
    started = threading.Event()

    @worker_shutting_down.connect(weak=False)
    def _shutting_down(how: str = "", **_: Any) -> None:
        if how != "Warm" or started.is_set():
            return
        started.set()
        _STATE.request()  # the solo and threads pools train in this process
        pids = pool_processes()
        for pid in pids:
            try:
                os.kill(pid, HAND_BACK_SIGNAL)
            except ProcessLookupError:
                continue
        timer = threading.Timer(escalate_after(grace), _escalate)
        timer.daemon = True
        timer.start()
        log.warning("shutting down: %d pool process(es) hand their trials back within %g s",
                    len(pids), grace)  # fmt: skip


def _escalate() -> None:
    """Celery's cold shutdown, for the tasks that did not stop in time."""
    log.warning("tasks still running near the end of the shutdown grace; ending them")
    os.kill(os.getpid(), signal.SIGQUIT)
