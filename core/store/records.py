"""The shapes of the documents the store keeps: sweeps, trials and metric rows.

A **sweep** document::

    _id (12 hex), name, description, spec (the submitted document), objective {metric,
    direction} (the primary objective, the first of) objectives [{metric, direction}],
    constraints [{metric, op, bound, text}], owner, created_at, updated_at, cancelled_at,
    trial_count, max_index (the highest trial index), counts {state: n, every state},
    counts_rev (bumped with every change to counts); for sweeps fed in windows
    (`core.store.feeding`): planned (trials not yet created, counted as queued), sending
    (ids of the window being sent), lease {owner, expires}, study_attrs (the search's
    Optuna study state), warm_trials (the earlier sweeps' trial ids its search is told
    first: `scheduler.warm`). A fed trial also has optuna {number, system_attrs}. Once
    paused, resumed or changed (`core.store.changes`): paused_at (None unless paused), held
    (ids of queued trials a claim left queued while it was paused, for the feeder to send
    again), spec_rev (the spec's revision, 0 or absent as submitted), applied_rev (the
    revision whose planned trials the feeder set: `Feeding.replan`), changes [{kind, summary,
    by, at, rev}] (its history: `change_entry`).

A **trial** document (``_id`` is ``f"{sweep_id}-{key}"``)::

    sweep_id, key (the stable 16-hex point id), index, params (nested by path: {"model":
    {"hidden_units": 64}}; dotted keys cannot be queried), config (the full resolved config,
    each string of 1 KiB or more as a reference ``{"$text": sha256}`` to its sweep's ``texts``,
    `core.store.texts`), seed, state, attempt (the number of the latest claim; 0 = never
    claimed), history (one entry per ended attempt: {attempt, state, worker, started_at,
    finished_at, error}, state being a finish state or "lost"), worker {host, pid, name},
    stop_requested, progress {epoch, metrics} (the latest report), queued_at, started_at,
    heartbeat_at, finished_at, updated_at, result (final metrics, and ``values``: each metric
    the sweep's objectives and constraints name, as the worker measured it), objective (the
    primary objective's value, also at top level, for sorting), objectives (every objective's
    value, in the spec's order), constraints (each constraint's violation, at most 0 when it
    holds, None when unmeasured), feasible (whether every constraint holds; true without
    constraints), error, train_seconds, param_count, macs (one sample's forward multiply-adds),
    device, dtype, versions, and any other `extra` a worker records at finish; prune_requested
    {attempt, epoch, at} (the attempt asked to stop early, the epoch the decision was taken at,
    and when; absent or null until `SweepAdmin.request_prune` asks, kept by the finish) and, on
    a pruned trial, pruned_epoch (the last epoch it trained).

A **metrics** row: ``trial_id, sweep_id, attempt, epoch, metrics, reported_at``; one per
(trial, attempt, epoch), which a unique index enforces.

Times are timezone-aware UTC, cut to milliseconds as BSON stores them, so a value read
back compares equal to the value written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, NamedTuple, Protocol

from core.states import ALL_STATES, TERMINAL_STATES, Heartbeat, TrialState


class TrialPointLike(Protocol):
    """What a new trial is made from (``scheduler.expand.TrialPoint`` is one)."""

    index: int
    id: str
    params: dict[str, Any]
    seed: int
    config: dict[str, Any]


#: Trial fields that a `Finish`'s `extra` may not overwrite: the lifecycle's own.
RESERVED_TRIAL_FIELDS = frozenset(
    {
        "_id",
        "sweep_id",
        "key",
        "index",
        "params",
        "config",
        "seed",
        "state",
        "attempt",
        "history",
        "lost_attempts",
        "worker",
        "stop_requested",
        "prune_requested",
        "progress",
        "queued_at",
        "started_at",
        "heartbeat_at",
        "finished_at",
        "updated_at",
        "result",
        "objective",
        "objectives",
        "constraints",
        "feasible",
        "error",
    }
)


#: The epoch a `Verdict` names for an attempt no longer running or asked to stop: every
#: epoch is judged, as far as its worker is concerned.
JUDGED_ALL = 1 << 62
#: The trial fields `verdict` reads.
JUDGED_FIELDS = {"state": 1, "attempt": 1, "judged": 1, "prune_requested": 1, "stop_requested": 1}


class Verdict(NamedTuple):
    """Where an attempt stands with the scheduler, read from its trial document.

    `answer` is the one `TrialLifecycle.heartbeat_many` gives (`Heartbeat`); for ``ok``,
    `epoch` is the last epoch the pruner let it go on after (its ``judged`` mark, -1 before
    one); for ``prune``, ``stop`` and ``lost`` the decision stands: `JUDGED_ALL`."""

    epoch: int
    answer: Heartbeat


def verdict(doc: Mapping[str, Any], attempt: int) -> Verdict:
    """The `Verdict` on `attempt` in a trial document (its `JUDGED_FIELDS`; {} for a trial
    that is gone). A cancelled sweep's stop wins over a prune request."""
    if doc.get("state") != TrialState.RUNNING.value or doc.get("attempt") != attempt:
        return Verdict(JUDGED_ALL, Heartbeat.LOST)
    if doc.get("stop_requested"):
        return Verdict(JUDGED_ALL, Heartbeat.STOP)
    if (doc.get("prune_requested") or {}).get("attempt") == attempt:
        return Verdict(JUDGED_ALL, Heartbeat.PRUNE)
    judged = doc.get("judged") or {}
    return Verdict(
        int(judged.get("epoch", -1)) if judged.get("attempt") == attempt else -1, Heartbeat.OK
    )


def sweep_of(trial_id: str) -> str:
    """The sweep id inside a trial id (``f"{sweep_id}-{key}"``)."""
    return trial_id.partition("-")[0]


def utcnow() -> datetime:
    """Now, in UTC, to the millisecond (BSON's resolution)."""
    return truncate_to_millis(datetime.now(UTC))


def truncate_to_millis(moment: datetime) -> datetime:
    """`moment` cut to whole milliseconds, as BSON stores it."""
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def nest_params(params: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{"model.hidden_units": 64}`` -> ``{"model": {"hidden_units": 64}}``, at any depth
    (``execution.parallel.tau`` under ``{"execution": {"parallel": {...}}}``)."""
    nested: dict[str, dict[str, Any]] = {}
    for path, value in params.items():
        *parents, key = path.split(".")
        node: dict[str, Any] = nested
        for part in parents:
            node = node.setdefault(part, {})
        node[key] = value
    return nested


def flatten_params(nested: Mapping[str, Any] | None, prefix: str = "") -> dict[str, Any]:
    """The inverse of `nest_params`: dotted paths, as the spec and the CLI write them.

    Every mapping is a section or sub-section: a parameter's value is never a mapping
    (`core.spec.fields`), lists (per-layer widths) are values.
    """
    out: dict[str, Any] = {}
    for key, value in (nested or {}).items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            out.update(flatten_params(value, path))
        else:
            out[path] = value
    return out


def empty_counts() -> dict[str, int]:
    """A count of zero for every state."""
    return {state.value: 0 for state in ALL_STATES}


def full_counts(counts: Mapping[str, int] | None) -> dict[str, int]:
    """`counts` with every state present, in lifecycle order."""
    out = empty_counts()
    for state, n in (counts or {}).items():
        if state in out:
            out[state] = int(n)
    return out


def sweep_status(doc: dict[str, Any]) -> str:
    """``cancelled``, ``finished`` (nothing queued or running), ``paused`` (nothing new
    starts: `core.store.admin`'s `pause_sweep`), ``running`` or ``queued``."""
    counts = doc["counts"]
    if doc.get("cancelled_at") is not None:
        return "cancelled"
    # A spec change its scheduler has not planned yet (`core.spec.changes`) may add trials.
    pending = (doc.get("spec_rev") or 0) != (doc.get("applied_rev") or 0)
    if counts["queued"] + counts["running"] == 0 and not pending:
        return "finished"
    if doc.get("paused_at") is not None:
        return "paused"
    started = counts["running"] + sum(counts[s.value] for s in TERMINAL_STATES)
    return "running" if started else "queued"


def change_entry(kind: str, summary: str, by: str | None, at: datetime) -> dict[str, Any]:
    """One entry of a sweep's ``changes`` history: ``pause``, ``resume`` or ``change`` (of
    its spec: `core.spec.changes`), what changed in words, who asked and when."""
    return {"kind": kind, "summary": summary, "by": by, "at": at}


def finite_number(value: Any) -> float | int | None:
    """`value` if it is a finite int or float (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def sweep_document(
    sweep_id: str,
    *,
    name: str,
    description: str,
    spec: Mapping[str, Any],
    metric: str,
    direction: str,
    owner: str | None,
    trial_count: int,
    max_index: int,
    now: datetime,
    objectives: list[dict[str, str]] | None = None,
    constraints: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A new sweep, all its trials queued."""
    counts = empty_counts()
    counts[TrialState.QUEUED.value] = trial_count
    return {
        "_id": sweep_id,
        "name": name,
        "description": description,
        "spec": dict(spec),
        "objective": {"metric": metric, "direction": direction},
        "objectives": objectives or [{"metric": metric, "direction": direction}],
        "constraints": constraints or [],
        "owner": owner,
        "created_at": now,
        "updated_at": now,
        "cancelled_at": None,
        "trial_count": trial_count,
        "max_index": max_index,
        "counts": counts,
        "counts_rev": 0,
    }


def trial_document(
    sweep_id: str, point: TrialPointLike, config: Mapping[str, Any], now: datetime
) -> dict[str, Any]:
    """A new trial of `point` with its full `config`: queued, never claimed."""
    return {
        "_id": f"{sweep_id}-{point.id}",
        "sweep_id": sweep_id,
        "key": point.id,
        "index": point.index,
        "params": nest_params(point.params),
        "config": dict(config),
        "seed": point.seed,
        "state": TrialState.QUEUED.value,
        "attempt": 0,
        "history": [],
        "worker": None,
        "stop_requested": False,
        "progress": None,
        "queued_at": now,
        "started_at": None,
        "heartbeat_at": None,
        "finished_at": None,
        "updated_at": now,
        "result": None,
        "objective": None,
        "error": None,
        "train_seconds": None,
        "param_count": None,
        "device": None,
        "dtype": None,
        "versions": None,
    }


def history_entry(
    trial: Mapping[str, Any], state: str, finished_at: datetime, error: str | None
) -> dict[str, Any]:
    """The record of the attempt `trial` holds now, ending in `state` ("lost" or a finish)."""
    return {
        "attempt": trial.get("attempt"),
        "state": state,
        "worker": trial.get("worker"),
        "started_at": trial.get("started_at"),
        "finished_at": finished_at,
        "error": error,
    }


#: What a trial's current-attempt fields return to when it goes back to the queue.
REQUEUED_FIELDS: dict[str, Any] = {
    "state": TrialState.QUEUED.value,
    "worker": None,
    "progress": None,
    "started_at": None,
    "heartbeat_at": None,
    "finished_at": None,
    "result": None,
    "objective": None,
    "objectives": None,
    "constraints": None,
    "feasible": None,
    "error": None,
    "train_seconds": None,
}
