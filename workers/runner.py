"""Run one trial end to end: claim it, train it with heartbeats, report epochs, finish it.

This is the logic behind the thin Celery task `workers.run_trial`. It never lets a training
error escape: NaN loss, out of memory, a bad shape, a time limit, even a bug in training
code, all end the trial `failed` with a readable reason, and the worker goes on. Only an
unreachable store escapes (as `StoreUnavailable`, after retrying with backoff), so that the
task can be retried later; the trial is then still `running` under this attempt and the
stale-heartbeat requeue brings it back.
"""

from __future__ import annotations

import logging
import os
import platform
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from celery.exceptions import SoftTimeLimitExceeded
from pydantic import ValidationError

from core.config import TrialConfig
from core.errors import StoreUnavailable, TrainingError
from core.settings import DEFAULT_MAX_ATTEMPTS
from core.states import TrialState
from core.store import Store

if TYPE_CHECKING:
    from workers.training import TrainResult

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class RunnerOptions:
    """How often to beat, when a silent trial counts as stale, how long to retry the store,
    and after how many dead attempts a trial ends failed."""

    heartbeat_seconds: float = 10.0
    stale_after_seconds: float = 120.0
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    store_retry_seconds: float = 600.0
    data_dir: Path | None = None


def worker_identity(name: str | None = None) -> dict[str, Any]:
    """Who holds a claim: host, pid and the Celery worker's name."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "name": name or ""}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def holder_is_dead(holder: dict[str, Any] | None) -> bool:
    """Whether a claim's holder ran on this host and its process is gone (killed, crashed)."""
    if not holder or holder.get("host") != socket.gethostname():
        return False
    pid = holder.get("pid")
    return isinstance(pid, int) and pid != os.getpid() and not _pid_alive(pid)


def with_retry(fn: Callable[..., T], *args: Any, budget: float, **kwargs: Any) -> T:
    """Call `fn`, retrying on `StoreUnavailable` with exponential backoff for `budget` seconds."""
    deadline = time.monotonic() + budget
    delay = 0.5
    while True:
        try:
            return fn(*args, **kwargs)
        except StoreUnavailable as exc:
            if time.monotonic() + delay > deadline:
                raise
            log.warning("store unavailable (%s); retrying in %.1f s", exc, delay)
            time.sleep(delay)
            delay = min(delay * 2, 30.0)


def versions() -> dict[str, str]:
    """The code and library versions recorded with every result."""
    out = {"python": platform.python_version()}
    for package in ("sweepstack", "torch", "numpy", "scikit-learn", "celery"):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    out["code"] = out.get("sweepstack", "unknown")
    return out


class Heartbeat(threading.Thread):
    """Beats for one attempt until stopped; notes when the claim is lost or a stop is asked."""

    def __init__(self, store: Store, trial_id: str, attempt: int, interval: float) -> None:
        super().__init__(name=f"heartbeat-{trial_id}", daemon=True)
        self.store, self.trial_id, self.attempt, self.interval = store, trial_id, attempt, interval
        self.lost = False
        self.stop_requested = False
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(self.interval):
            try:
                status = self.store.heartbeat(self.trial_id, self.attempt)
            except StoreUnavailable as exc:
                log.warning("heartbeat for %s failed: %s", self.trial_id, exc)
                continue
            if status == "lost":
                self.lost = True
            elif status == "stop":
                self.stop_requested = True

    def stop(self) -> None:
        self._done.set()
        self.join(timeout=5)


def claim_trial(
    store: Store, trial_id: str, worker: dict[str, Any], options: RunnerOptions
) -> dict[str, Any] | None:
    """Claim the trial for `worker`: its document, or None when it is finished or held by a
    live attempt. A claim whose holder was a process on this host that has died is taken
    over at once rather than after the stale-heartbeat wait; its `max_attempts`-th loss
    ends the trial failed (None), so a redelivered message for it is acked and does nothing."""
    stale, limit = options.stale_after_seconds, options.max_attempts
    doc = store.claim(trial_id, worker, stale_after=stale, max_attempts=limit)
    if doc is not None:
        return doc
    current = store.get_trial(trial_id, with_metrics=False)
    if current["state"] == TrialState.RUNNING.value and holder_is_dead(current.get("worker")):
        log.info(
            "trial %s: attempt %s died with its process; taking over", trial_id, current["attempt"]
        )
        return store.claim(
            trial_id,
            worker,
            stale_after=stale,
            takeover_attempt=current["attempt"],
            max_attempts=limit,
        )
    return None


_OBJECTIVES: dict[str, dict[str, str]] = {}


def sweep_objective(store: Store, sweep_id: str, budget: float) -> dict[str, str]:
    """The sweep's objective; it never changes, so each process asks the store once."""
    if sweep_id not in _OBJECTIVES:
        if len(_OBJECTIVES) > 1000:
            _OBJECTIVES.clear()
        _OBJECTIVES[sweep_id] = with_retry(store.get_sweep, sweep_id, budget=budget)["objective"]
    return _OBJECTIVES[sweep_id]


def failure_reason(exc: BaseException) -> str:
    """The reason recorded for a failed trial: a training error's own words, else the
    exception in one line. The traceback goes to the worker's log, not the record: it
    names the server's files, and users read the record."""
    if isinstance(exc, TrainingError):
        return exc.reason
    if isinstance(exc, ValidationError):
        return f"invalid trial config: {exc}"
    log.error("trial failed with an unexpected error", exc_info=exc)
    return f"{type(exc).__name__}: {exc}"


def record_outcome(
    outcome: TrainResult, objective: dict[str, str], extra: dict[str, Any]
) -> dict[str, Any]:
    """The ``result`` of a trained trial for `Store.finish`; its other record fields (params,
    times, device, dataset) go into `extra`."""
    from workers.training import objective_value

    extra.update(
        param_count=outcome.param_count,
        train_seconds=outcome.train_seconds,
        device=outcome.device.get("device"),
        device_info=outcome.device,
        dataset_fingerprint=outcome.dataset_fingerprint,
    )
    return {
        "objective": objective_value(outcome, objective["metric"], objective["direction"]),
        "final": outcome.final,
        "best": outcome.best,
        "epochs": len(outcome.metrics),
    }


def execute_trial(
    store: Store,
    trial_id: str,
    worker: dict[str, Any],
    options: RunnerOptions,
    objective: dict[str, str] | None = None,
) -> str:
    """Run the trial if this worker can claim it; return what happened.

    Outcomes: ``skipped`` (finished already, or held by a live attempt), ``complete``,
    ``failed``, ``cancelled``, ``lost`` (another attempt took the claim over).
    """
    from workers.training import train  # torch loads only in workers

    budget = options.store_retry_seconds
    doc = with_retry(claim_trial, store, trial_id, worker, options, budget=budget)
    if doc is None:
        log.info("trial %s: nothing to do (finished or held by a live attempt)", trial_id)
        return "skipped"
    attempt = doc["attempt"]
    if objective is None:
        objective = sweep_objective(store, doc["sweep_id"], budget)
    beat = Heartbeat(store, trial_id, attempt, options.heartbeat_seconds)
    beat.start()

    def on_epoch(epoch: int, metrics: dict[str, Any]) -> None:
        with_retry(store.report, trial_id, attempt, epoch, metrics, budget=budget)

    def should_stop() -> bool:
        return beat.lost or beat.stop_requested

    state, result, error, extra = TrialState.FAILED, None, None, {"versions": versions()}
    try:
        config = TrialConfig.model_validate(doc["config"])
        extra["dtype"] = config.execution.dtype
        outcome = train(
            config, on_epoch=on_epoch, should_stop=should_stop, data_dir=options.data_dir
        )
        result = record_outcome(outcome, objective, extra)
        if beat.stop_requested:
            state, error = TrialState.CANCELLED, "the sweep was cancelled while the trial ran"
        else:
            state = TrialState.COMPLETE
    except SoftTimeLimitExceeded:
        limit = doc.get("config", {}).get("execution", {}).get("time_limit")
        error = f"time limit exceeded: execution.time_limit is {limit} s"
    except Exception as exc:  # a training error is a result, whatever its kind
        error = failure_reason(exc)
        log.info("trial %s failed: %s", trial_id, error.splitlines()[0])
    finally:
        beat.stop()
    if beat.lost:
        log.warning("trial %s: attempt %s lost its claim; not recording", trial_id, attempt)
        return "lost"
    with_retry(
        store.finish,
        trial_id,
        attempt,
        state,
        result=result,
        error=error,
        extra=extra,
        budget=budget,
    )
    return state.value
