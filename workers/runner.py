"""Run one trial end to end: claim it, train it with heartbeats, report epochs, finish it.

Claims, heartbeats and epoch rows are written as `workers.claims` says: a claim in one
write when the message carries the config, one heartbeat thread per process, epoch rows
in batches (at most every 2 s, and all of them before the finish).

**Early stopping.** A message of a pruning sweep carries ``watch`` (`scheduler.enqueue`):
at every epoch where the pruner may decide (the message's ``decide_at``: every epoch, or
successive halving's rungs; `workers.claims.asks_at`) the trial's rows are then written at
once and it waits, bounded, until the scheduler has judged that epoch; right after, one
heartbeat asks whether the scheduler requested a prune (`SweepAdmin.request_prune`), so
the decision applies at the epoch it was made for, as Optuna's in-process pruner's would.
Between two rungs it writes its rows and asks as an unwatched trial does. Where the
message says ``decide_at: "in-worker"`` (median, percentile, threshold, patient) the
worker runs the pruner itself after every epoch (`workers.pruning`) and asks nobody.
Without ``watch`` a request is still honoured, at the heartbeat
thread's next beat. A trial stopped so ends ``pruned`` (`settle`): its rows kept,
``pruned_epoch`` the last epoch it trained, ``result.objective`` the objective metric's
value at that epoch (what Optuna is told of a pruned trial). A request that comes after
the last epoch leaves the trial ``complete``; a cancel wins over a prune (``cancelled``);
a lost claim records nothing.

**Scale-down.** A worker sent SIGTERM stops its trial at the next epoch end, after a
checkpoint, and puts it back in the queue (``handed_back``, `workers.shutdown`): the task
then sends it again in a new message and another worker resumes it.

**Trainers.** A trial's kind (`core.spec.kinds.kind_of`) names its trainer, and
`TRAINERS` maps the name to the code: the built-in network's (`workers.training.train`), a
Caffe net's with its solver (`workers.training.caffe.loop`), or a user's installed training
function (`workers.trainable`); each trial runs under every rule above, whatever its kind.

This is the logic behind the thin Celery task `workers.run_trial`. It never lets a training
error escape: NaN loss, out of memory, a bad shape, a time limit, even a bug in training
code, all end the trial `failed` with a readable reason, and the worker goes on. Only an
unreachable store escapes (as `StoreUnavailable`, after retrying with backoff), so that the
task can be retried later; the trial is then still `running` under this attempt and the
stale-heartbeat requeue brings it back.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import platform
import socket
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from celery.exceptions import SoftTimeLimitExceeded
from pydantic import ValidationError

from core.errors import AttemptLost, InvalidQuery, NotFound, RanksNotGathered, TrainingError
from core.settings import DEFAULT_MAX_ATTEMPTS
from core.spec.config import TrialConfig
from core.spec.kinds import kind_of
from core.spec.objectives import COST_METRICS
from core.spec.search import IN_WORKER, decides
from core.states import TrialState
from core.store.roles import Artifacts, EpochRow, Finish, TrialLifecycle
from workers import shutdown
from workers.checkpointing import TrialCheckpoints, sweep_policy
from workers.claims import (
    EpochRows,
    HeartbeatSender,
    asks_at,
    claim_trials,
    gone_attempt,
    with_retry,
)
from workers.pruning import TrialReports, sweep_pruner

if TYPE_CHECKING:
    from workers.gang import Gang
    from workers.training import TrainResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunnerOptions:
    """How often to beat, when a silent trial counts as stale, how long to retry the store,
    and after how many dead attempts a trial ends failed."""

    heartbeat_seconds: float = 10.0
    stale_after_seconds: float = 120.0
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    store_retry_seconds: float = 600.0
    #: The worker's datasets folder (``SWEEPSTACK_DATASETS_DIR``); None: the current folder.
    data_dir: Path | None = None
    #: What a sweep whose spec has no ``artifacts`` keeps (``SWEEPSTACK_ARTIFACTS_KEEP``,
    #: ``SWEEPSTACK_ARTIFACTS_TOP_K``; `core.spec.artifacts`).
    artifacts_keep: str = "top_k"
    artifacts_top_k: int = 10


def worker_identity(name: str | None = None) -> dict[str, Any]:
    """Who holds a claim: host, pid and the Celery worker's name."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "name": name or ""}


@functools.cache
def _versions() -> tuple[tuple[str, str], ...]:
    out = {"python": platform.python_version()}
    for package in ("sweepstack", "torch", "numpy", "scikit-learn", "celery"):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    out["code"] = out.get("sweepstack", "unknown")
    return tuple(out.items())


def versions() -> dict[str, str]:
    """The code and library versions recorded with every result (read once per process:
    importlib.metadata scans the installed packages, ~10 ms a call)."""
    return dict(_versions())


_OBJECTIVES: dict[str, dict[str, str]] = {}


def sweep_objective(lifecycle: TrialLifecycle, sweep_id: str, budget: float) -> dict[str, str]:
    """The sweep's objective; it never changes, so each process asks the store once."""
    if sweep_id not in _OBJECTIVES:
        if len(_OBJECTIVES) > 1000:
            _OBJECTIVES.clear()
        _OBJECTIVES[sweep_id] = with_retry(lifecycle.objective, sweep_id, budget=budget)
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
    """The ``result`` of a trained trial for `TrialLifecycle.finish_many`; its other record
    fields (params, times, device, dataset) go into `extra`."""
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


def last_value(outcome: TrainResult, metric: str) -> float | None:
    """The objective metric at the last epoch trained (None when not finite or absent):
    a pruned trial's objective, as Optuna takes a pruned trial's last reported value."""
    row = outcome.metrics[-1] if outcome.metrics else outcome.final
    value = row.get(metric) if row else None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return value


def measured(
    outcome: TrainResult, objective: dict[str, Any], extra: dict[str, Any], *, last: bool
) -> dict[str, float | None]:
    """Each metric the sweep's objectives and constraints name (the store's ``measure``,
    `core.spec.objectives.Goals.measures`), as ``result["values"]`` keeps it: a metric the
    epochs report (a training function's own too) at its best epoch in its direction, or
    at the last epoch trained when `last` (a pruned trial); else the record's cost
    (``param_count``, ``train_seconds``, ``macs`` in `extra`)."""
    from workers.training import objective_value

    out: dict[str, float | None] = {}
    for metric, direction in objective.get("measure") or []:
        reported = any(metric in row for row in outcome.metrics or [outcome.final])
        if reported:
            out[metric] = (
                last_value(outcome, metric) if last
                else objective_value(outcome, metric, direction)
            )  # fmt: skip
        elif metric in COST_METRICS:
            out[metric] = extra.get(metric)
    return out


def settle(
    outcome: TrainResult,
    objective: dict[str, Any],
    extra: dict[str, Any],
    *,
    stopping: bool,
    pruning: bool,
    counts_parameters: bool = True,
) -> tuple[TrialState, dict[str, Any], str | None]:
    """How a trained trial ends: (state, result, error) for its finish (module docstring).

    Cancelled when its sweep asked it to stop; pruned when a prune request stopped it
    before its last epoch (``pruned_epoch`` into `extra`); else complete. The result holds
    what the sweep's objectives and constraints name (`measured`). A kind that does not
    count parameters (a training function's model is its own) records no ``param_count``.
    """
    result = record_outcome(outcome, objective, extra)
    if not counts_parameters:
        extra.pop("param_count", None)
    if stopping:
        result["values"] = measured(outcome, objective, extra, last=False)
        return TrialState.CANCELLED, result, "the sweep was cancelled while the trial ran"
    if pruning and outcome.stopped_early:
        extra["pruned_epoch"] = int(outcome.metrics[-1]["epoch"]) if outcome.metrics else 0
        result["objective"] = last_value(outcome, objective["metric"])
        result["values"] = measured(outcome, objective, extra, last=True)
        return TrialState.PRUNED, result, None
    result["values"] = measured(outcome, objective, extra, last=False)
    return TrialState.COMPLETE, result, None


@dataclass(frozen=True)
class Training:
    """What a trainer is given besides the trial's config: who the trial is, where its
    epochs go, when to stop, where its data lies, what it is judged on, and the record's
    extra fields (which a trainer may add to)."""

    trial_id: str
    attempt: int
    on_epoch: Callable[[int, dict[str, Any]], None]
    should_stop: Callable[[], bool]
    data_dir: Path | None
    objective: dict[str, str]
    extra: dict[str, Any]
    checkpoints: TrialCheckpoints | None = None
    #: Where a data-parallel trial's ranks on other hosts come from (`workers.gang`).
    hosts: Any = None


def _train_builtin(config: dict[str, Any], run: Training) -> TrainResult:
    from workers.training import train  # torch loads only in workers

    typed = TrialConfig.model_validate(config)
    run.extra["dtype"] = typed.execution.dtype
    return train(
        typed,
        on_epoch=run.on_epoch,
        should_stop=run.should_stop,
        data_dir=run.data_dir,
        checkpoints=run.checkpoints,
        hosts=run.hosts,
    )


def _train_caffe(config: dict[str, Any], run: Training) -> TrainResult:
    from workers.training.caffe.loop import train_caffe

    return train_caffe(
        config,
        on_epoch=run.on_epoch,
        should_stop=run.should_stop,
        data_dir=run.data_dir,
        extra=run.extra,
        checkpoints=run.checkpoints,
    )


def _train_function(config: dict[str, Any], run: Training) -> TrainResult:
    from workers.trainable import run_trainable

    return run_trainable(
        config,
        trial_id=run.trial_id,
        attempt=run.attempt,
        on_epoch=run.on_epoch,
        should_stop=run.should_stop,
        data_dir=run.data_dir,
        objective=run.objective,
        extra=run.extra,
        checkpoints=run.checkpoints,
    )


#: Each kind's trainer, by the name the kind gives (`core.spec.kind.TrialKind.trainer`).
TRAINERS: dict[str, Callable[[dict[str, Any], Training], TrainResult]] = {
    "mlp": _train_builtin,
    "caffe": _train_caffe,
    "trainable": _train_function,
}


#: The outcome of a trial whose worker shut down and put it back in the queue.
HANDED_BACK = "handed_back"


#: The outcome of a trial whose ranks on other hosts were not gathered in time: queued again.
NOT_GATHERED = "not_gathered"


def _hosts(gang: Gang | None, trial_id: str, attempt: int, config: dict[str, Any]) -> Any:
    """The `workers.training.parallel.Hosts` of a trial whose ranks spread over hosts."""
    parallel = (config.get("execution") or {}).get("parallel") or {}
    if gang is None or not isinstance(parallel, dict) or parallel.get("hosts", 1) == 1:
        return None
    return gang.hosts_for(trial_id, attempt, config)


def handing_back(beats: HeartbeatSender, trial_id: str) -> bool:
    """Whether a trial that stopped early did so to be handed back (`workers.shutdown`):
    its worker shuts down, and nothing else (a stop, a prune request, a lost claim) stopped
    it."""
    return shutdown.requested() and not (
        beats.stopping(trial_id) or beats.pruning(trial_id) or beats.lost(trial_id)
    )


def execute_trial(
    lifecycle: TrialLifecycle,
    trial_id: str,
    worker: dict[str, Any],
    options: RunnerOptions,
    objective: dict[str, str] | None = None,
    carried: tuple[int, dict[str, Any]] | None = None,
    *,
    watch: bool = False,
    decide_at: frozenset[int] | str | None = None,
    artifacts: Artifacts | None = None,
    gang: Gang | None = None,
) -> str:
    """Run the trial if this worker can claim it; return what happened.

    `carried` is the (queued attempt, config) the message carries, if it does: the claim
    is then one write (`workers.claims`). `watch`: at the epochs of `decide_at`
    (`workers.claims.decide_at_of`; every epoch without it) write the rows at once, wait
    for the pruner's decision and check for a prune request (module docstring).
    `artifacts`: where the trial's checkpoints and kept model go (`workers.checkpointing`;
    None: nowhere, and no resume). `gang`: how a data-parallel trial gathers its ranks on
    other hosts (`workers.gang`).
    Outcomes: ``skipped``
    (finished already, or held by a live attempt), ``complete``, ``failed``,
    ``cancelled``, ``pruned``, ``lost`` (another attempt took the claim over),
    ``handed_back`` (the worker shuts down: the trial is queued again, `workers.shutdown`),
    ``not_gathered`` (its ranks on other hosts did not come: queued again, `workers.gang`).
    """
    budget = options.store_retry_seconds
    stale = options.stale_after_seconds
    claims = claim_trials(
        lifecycle,
        [trial_id],
        worker,
        stale,
        {trial_id: carried} if carried else {},
        budget,
        max_attempts=options.max_attempts,
    )
    if trial_id not in claims:
        raise NotFound("trial", trial_id)
    doc = claims[trial_id]
    if doc is None:
        log.info("trial %s: nothing to do (finished or held by a live attempt)", trial_id)
        return "skipped"
    attempt = doc["attempt"]
    if objective is None:
        objective = sweep_objective(lifecycle, doc["sweep_id"], budget)
    own = None  # the pruner this worker runs itself (`workers.pruning`)
    if watch and decide_at == IN_WORKER:
        pruner = with_retry(sweep_pruner, lifecycle, doc["sweep_id"], objective, budget=budget)
        own = TrialReports(pruner)
    beats = HeartbeatSender.of_process(lifecycle, options.heartbeat_seconds)
    beats.hold(trial_id, attempt)
    rows = EpochRows()

    def write_rows(batch: list[EpochRow]) -> None:
        if not batch:
            return
        try:
            with_retry(lifecycle.report_many, batch, budget=budget)
        except InvalidQuery as exc:
            if not gone_attempt(exc):
                raise
            # Its claim vanished: the trial ends lost, and the task sends it again.
            log.warning("trial %s: the store has no attempt %s (%s); stopping", trial_id,
                        attempt, exc)  # fmt: skip
            beats.mark_lost(trial_id)

    def on_epoch(epoch: int, metrics: dict[str, Any]) -> None:
        if own is not None:
            write_rows(rows.add(trial_id, attempt, epoch, metrics) or [])
            own.add(epoch, metrics)
            if own.judge():
                beats.prune_now(trial_id)
            return
        if not asks_at(watch, decide_at, epoch):
            write_rows(rows.add(trial_id, attempt, epoch, metrics) or [])
            return
        rows.keep(trial_id, attempt, epoch, metrics)
        write_rows(rows.take())
        if decides(decide_at, epoch):
            beats.await_decision({trial_id: attempt}, epoch)
        else:
            beats.check({trial_id: attempt})

    state, result, error, extra = TrialState.FAILED, None, None, {"versions": versions()}
    kind = kind_of(doc["config"])
    checkpoints = None
    if artifacts is not None:
        policy = sweep_policy(artifacts, doc["sweep_id"], options.artifacts_keep,
                              options.artifacts_top_k, budget)  # fmt: skip
        checkpoints = TrialCheckpoints(artifacts, lifecycle, doc, policy,
                                       lambda: write_rows(rows.take()), budget,
                                       objective)  # fmt: skip
    run = Training(
        trial_id=trial_id,
        attempt=attempt,
        on_epoch=on_epoch,
        should_stop=lambda: beats.should_stop(trial_id) or shutdown.stop_training(checkpoints),
        data_dir=options.data_dir,
        objective=objective,
        extra=extra,
        checkpoints=checkpoints,
        hosts=_hosts(gang, trial_id, attempt, doc["config"]),
    )
    recorded = False
    try:
        try:
            outcome = TRAINERS[kind.trainer](doc["config"], run)
            if outcome.stopped_early and handing_back(beats, trial_id):
                write_rows(rows.take())
                if checkpoints is not None:
                    checkpoints.wait()
                if with_retry(lifecycle.hand_back, trial_id, attempt, shutdown.REASON,
                              budget=budget):  # fmt: skip
                    return HANDED_BACK
                return "lost"
            extra["macs"] = kind.macs(doc["config"], outcome.dataset or {})
            state, result, error = settle(
                outcome,
                objective,
                extra,
                stopping=beats.stopping(trial_id),
                pruning=beats.pruning(trial_id),
                counts_parameters=kind.counts_parameters,
            )
        except RanksNotGathered as exc:
            # Not enough free workers: back to the queue, freeing this one (`workers.gang`).
            log.warning("trial %s: %s; handing it back", trial_id, exc.reason)
            if with_retry(lifecycle.hand_back, trial_id, attempt,
                          f"its ranks on other hosts were not gathered: {exc.reason}",
                          budget=budget):  # fmt: skip
                return NOT_GATHERED
            return "lost"
        except AttemptLost as exc:
            # Not the trial's result: leave the attempt running and silent, as a dead
            # worker's is, so that the stale requeue retakes it (counting the loss).
            log.warning("trial %s: attempt %s lost: %s", trial_id, attempt, exc.reason)
            write_rows(rows.take())
            return "lost"
        except SoftTimeLimitExceeded:
            limit = doc.get("config", {}).get("execution", {}).get("time_limit")
            error = f"time limit exceeded: execution.time_limit is {limit} s"
        except Exception as exc:  # a training error is a result, whatever its kind
            error = failure_reason(exc)
            log.info("trial %s failed: %s", trial_id, error.splitlines()[0])
        write_rows(rows.take())  # every row before the finish, so none is left behind
        if checkpoints is not None:
            checkpoints.wait()
        if beats.lost(trial_id):
            log.warning("trial %s: attempt %s lost its claim; not recording", trial_id, attempt)
            return "lost"
        if checkpoints is not None and result is not None:
            checkpoints.keep_model(state.value, objective, result.get("objective"))
        finish = Finish(trial_id, attempt, state, result, error, extra)
        if not with_retry(lifecycle.finish_many, [finish], budget=budget).get(trial_id):
            # The store did not let this attempt end the trial: it holds the claim no more
            # (it vanished with a store's lost writes, or another attempt took it over).
            log.warning("trial %s: attempt %s no longer holds its claim; not recorded",
                        trial_id, attempt)  # fmt: skip
            return "lost"
        recorded = True
    finally:
        beats.release(trial_id)
        if checkpoints is not None:
            checkpoints.ended(recorded)
    return state.value
