"""The trial lifecycle's writes for many trials at once: claim, heartbeat, report, finish.

A worker that holds several trials (a fused group, or one process's trials) pays one round
trip per step for all of them, not one per trial. A write that is the same for every trial
(claim, heartbeat) is one ``update_many`` by ``_id $in`` per attempt number (there is
usually one); one that differs per trial (progress, finish) is one ``bulk_write``
(ordered=False) of the conditional ``UpdateOne`` the single methods of `core.lifecycle`
send; metric rows are one ``insert_many`` (ordered=False). On SecantusDB a bulk write
saves only the round trips (the server works statement by statement, ~0.5 ms each), while
an ``update_many`` is one statement. Every invariant holds trial by trial:

- each filter names the state and attempt it expects, so of concurrent callers exactly one
  changes a trial (a bulk write is atomic per document, not as a whole);
- the sweep's counts move by the caller that made the change, one ``$inc`` per sweep;
- a metric row is unique on (trial_id, attempt, epoch): a repeated report changes nothing.

When a bulk write changes fewer trials than it names, one read finds out which (rare: a
trial taken over, requeued or cancelled meanwhile).

Round trips for K trials: `claim_queued` 2 (the claims; the counts, if the sweep is not
cancelled),
`heartbeat_many` 1, `report_many` 2 (progress, rows), `finish_many` 2 (the finishes, each
building its history entry on the server, and the counts).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pymongo import UpdateOne
from pymongo.errors import BulkWriteError

from core.errors import InvalidQuery, InvalidTransition, NotFound
from core.lifecycle import PRUNE_ATTEMPT, Lifecycle, not_pruned, running_fields
from core.query import check_attempt, check_id, check_keys
from core.records import RESERVED_TRIAL_FIELDS
from core.states import Heartbeat, TrialState
from core.views import available

log = logging.getLogger(__name__)

_QUEUED = TrialState.QUEUED.value
_RUNNING = TrialState.RUNNING.value
_CANCELLED = TrialState.CANCELLED.value
_DUPLICATE_KEY = 11000


def _by_attempt(attempts: Mapping[str, int]) -> dict[int, list[str]]:
    """Trial ids by attempt: one ``update_many`` per attempt (usually one in all)."""
    out: dict[int, list[str]] = {}
    for trial_id, attempt in attempts.items():
        out.setdefault(attempt, []).append(trial_id)
    return out


def sweep_of(trial_id: str) -> str:
    """The sweep id inside a trial id (``f"{sweep_id}-{key}"``, `core.records`)."""
    return trial_id.partition("-")[0]


@dataclass(frozen=True)
class EpochRow:
    """One epoch's metrics of one attempt, for `BatchWrites.report_many`."""

    trial_id: str
    attempt: int
    epoch: int
    metrics: Mapping[str, Any]


@dataclass(frozen=True)
class Finish:
    """How one attempt ended, for `BatchWrites.finish_many` (fields as `Lifecycle.finish`)."""

    trial_id: str
    attempt: int
    state: TrialState | str
    result: Mapping[str, Any] | None = None
    error: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


class BatchWrites(Lifecycle):
    """Claim, heartbeat, report and finish many trials in one round trip each."""

    _call_times = threading.Lock()
    _last_call: datetime | None = None

    @available
    def claim_queued(self, expected: Mapping[str, int], worker: Mapping[str, Any]) -> list[str]:
        """Claim queued trials for `worker` in one write; the ids this call claimed, in order.

        `expected` maps each trial id to the attempt it is queued at (0 for a new trial; a
        message carries it, `scheduler.enqueue`); a claimed trial runs attempt
        ``expected + 1`` and its document need not be read. A trial in another state or at
        another attempt, unknown, or of a cancelled sweep is left alone and not returned:
        the caller asks `Lifecycle.claim`, which takes over dead attempts and cancels.
        """
        for trial_id, attempt in expected.items():
            check_id("trial_id", trial_id)
            if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 0:
                raise InvalidQuery("attempt", f"must be an integer >= 0, got {attempt!r}")
        worker = check_keys("worker", worker)
        if not expected:
            return []
        wanted = dict(expected)
        now = self._call_time()
        modified = 0
        for attempt, ids in _by_attempt(wanted).items():
            done = self._trials.update_many(
                {"_id": {"$in": ids}, "state": _QUEUED, "attempt": attempt},
                {"$set": {**running_fields(worker, now), "attempt": attempt + 1}},
            )
            modified += done.modified_count
        if modified == len(wanted):
            claimed = list(wanted)
        elif modified == 0:
            claimed = []
        else:
            claimed = self._changed_by(
                wanted, {"state": _RUNNING, "worker": worker, "started_at": now}, offset=1
            )
        by_sweep: dict[str, list[str]] = {}
        for trial_id in claimed:
            by_sweep.setdefault(sweep_of(trial_id), []).append(trial_id)
        for sweep_id, ids in by_sweep.items():
            if not self._claimed_in_live_sweep(sweep_id, ids, now):
                claimed = [t for t in claimed if t not in set(ids)]
        return claimed

    def _claimed_in_live_sweep(self, sweep_id: str, ids: list[str], now: datetime) -> bool:
        """Move the counts for trials of `sweep_id` this call claimed; False if the sweep was
        cancelled (or deleted), and the trials are then cancelled instead.

        The counter write asks that the sweep is not cancelled, so the usual claim needs no
        read of the sweep. A queued trial of a cancelled sweep exists only when a requeue
        or retry raced the cancel (`cancel_sweep` cancels every queued trial after setting
        its flag): such a trial, just claimed, ends cancelled, as `Lifecycle.claim` ends it.
        """
        n = len(ids)
        moved = self._sweeps.update_one(
            {"_id": sweep_id, "cancelled_at": None},
            {"$inc": {f"counts.{_QUEUED}": -n, f"counts.{_RUNNING}": n, "counts_rev": 1},
             "$set": {"updated_at": now}},
        )  # fmt: skip
        if moved.matched_count:
            return True
        ended = self._trials.update_many(
            {"_id": {"$in": ids}, "state": _RUNNING, "started_at": now},
            {"$set": {"state": _CANCELLED, "finished_at": now, "updated_at": now}},
        )
        gone = ended.modified_count
        self._bump(sweep_id, {_QUEUED: -n, _RUNNING: n - gone, _CANCELLED: gone}, now)
        log.info("%d trial(s) of cancelled sweep %s cancelled at their claim", gone, sweep_id)
        return False

    @available
    def heartbeat_many(self, attempts: Mapping[str, int]) -> dict[str, Heartbeat]:
        """Record that each attempt is alive, in one write; what each should do (`Heartbeat`).

        As `Lifecycle.heartbeat`, except that a trial the store no longer has is ``lost``
        rather than `NotFound`: the claim is gone either way. ``stop`` wins over ``prune``.
        """
        for trial_id, attempt in attempts.items():
            check_id("trial_id", trial_id)
            check_attempt(attempt)
        if not attempts:
            return {}
        now = self._clock()
        beat = {"$set": {"heartbeat_at": now, "updated_at": now}}
        matched = 0
        for attempt, ids in _by_attempt(attempts).items():
            holders = {"_id": {"$in": ids}, "state": _RUNNING, "attempt": attempt}
            matched += self._trials.update_many(
                {**holders, "stop_requested": False, **not_pruned(attempt)}, beat
            ).matched_count
        if matched == len(attempts):
            return dict.fromkeys(attempts, Heartbeat.OK)
        fields = {"state": 1, "attempt": 1, "stop_requested": 1, PRUNE_ATTEMPT: 1}
        docs = self._docs(attempts, fields)
        out: dict[str, Heartbeat] = {}
        stopping: dict[str, int] = {}
        for trial_id, attempt in attempts.items():
            doc = docs.get(trial_id)
            if doc is None or doc["state"] != _RUNNING or doc["attempt"] != attempt:
                out[trial_id] = Heartbeat.LOST
            elif doc.get("stop_requested"):
                out[trial_id] = Heartbeat.STOP
                stopping[trial_id] = attempt
            elif (doc.get("prune_requested") or {}).get("attempt") == attempt:
                out[trial_id] = Heartbeat.PRUNE
                stopping[trial_id] = attempt
            else:
                out[trial_id] = Heartbeat.OK  # beaten by the write above
        for attempt, ids in _by_attempt(stopping).items():
            self._trials.update_many(
                {"_id": {"$in": ids}, "state": _RUNNING, "attempt": attempt}, beat
            )
        return out

    @available
    def report_many(self, rows: Sequence[EpochRow]) -> None:
        """Store many epochs' metrics (of any trials and attempts) in two writes.

        As `Lifecycle.report` row by row: the first row of an (attempt, epoch) is kept, a
        repeated one changes nothing, and each trial's ``progress`` shows its latest epoch
        of the batch while the attempt holds the claim. `NotFound` for an unknown trial and
        `InvalidQuery` for an attempt it has not had, before any row is written.
        """
        rows = [self._checked_row(row) for row in rows]
        if not rows:
            return
        now = self._clock()
        latest: dict[tuple[str, int], EpochRow] = {}
        for row in rows:
            key = (row.trial_id, row.attempt)
            if key not in latest or row.epoch >= latest[key].epoch:
                latest[key] = row
        shown = self._trials.bulk_write(
            [
                UpdateOne(
                    {"_id": row.trial_id, "state": _RUNNING, "attempt": row.attempt},
                    {
                        "$set": {
                            "progress": {"epoch": row.epoch, "metrics": row.metrics},
                            "updated_at": now,
                        }
                    },
                )
                for row in latest.values()
            ],
            ordered=False,
        )
        if shown.matched_count < len(latest):
            self._check_attempts({t: a for t, a in latest})
        inserts = [
            {
                "trial_id": row.trial_id,
                "attempt": row.attempt,
                "epoch": row.epoch,
                "sweep_id": sweep_of(row.trial_id),
                "metrics": row.metrics,
                "reported_at": now,
            }
            for row in rows
        ]
        try:
            self._metrics.insert_many(inserts, ordered=False)
        except BulkWriteError as exc:
            others = [e for e in exc.details.get("writeErrors", []) if e["code"] != _DUPLICATE_KEY]
            if others:
                raise

    @available
    def finish_many(self, finishes: Sequence[Finish]) -> dict[str, bool]:
        """End many running attempts, each as `Lifecycle.finish` would; True where this call did.

        The input is checked before anything is written (a bad field raises and changes
        nothing). Then each finish is one conditional update that builds the attempt's
        history entry on the server (a pipeline update: no read first); a finish by an
        attempt that no longer holds the claim is a no-op (False). A trial the store does
        not have (`NotFound`), or a cancelled finish without a stop request
        (`InvalidTransition`), is found after the write: the others of the call are
        written, and the error is raised.
        """
        checked = [self._checked_finish(f) for f in finishes]
        if len({f.trial_id for f in checked}) != len(checked):
            raise InvalidQuery("finishes", "name each trial at most once")
        if not checked:
            return {}
        now = self._call_time()
        ops = []
        for f in checked:
            expect: dict[str, Any] = {"_id": f.trial_id, "state": _RUNNING, "attempt": f.attempt}
            if f.state == _CANCELLED:
                expect["stop_requested"] = True
            ops.append(UpdateOne(expect, [{"$set": self._finish_fields(f, now)}]))
        done = self._trials.bulk_write(ops, ordered=False)
        wanted = {f.trial_id: f.attempt for f in checked}
        if done.modified_count == len(checked):
            ended = list(wanted)
        else:
            ended = self._changed_by(wanted, {"finished_at": now}, offset=0)
        states = {f.trial_id: str(f.state) for f in checked}
        self._bump_many(((t, {_RUNNING: -1, states[t]: 1}) for t in ended), now)
        self._log_finished(ended)
        out = dict.fromkeys(wanted, False) | dict.fromkeys(ended, True)
        if len(ended) < len(checked):
            self._explain_unfinished([f for f in checked if not out[f.trial_id]])
        return out

    def _finish_fields(self, f: Finish, now: datetime) -> dict[str, Any]:
        """The pipeline ``$set`` of a finish: the record as literals (a string of the caller's
        is never read as a field path), the history entry from the trial's own fields."""
        record = {
            **f.extra,
            "state": str(f.state),
            "finished_at": now,
            "updated_at": now,
            "result": f.result,
            "objective": self._objective_of(sweep_of(f.trial_id), f.result),
            "error": f.error,
        }
        ended = {
            "attempt": "$attempt",
            "state": {"$literal": str(f.state)},
            "worker": "$worker",
            "started_at": "$started_at",
            "finished_at": {"$literal": now},
            "error": {"$literal": f.error},
        }
        return {
            **{key: {"$literal": value} for key, value in record.items()},
            "history": {"$concatArrays": [{"$ifNull": ["$history", []]}, [ended]]},
        }

    def _explain_unfinished(self, unfinished: list[Finish]) -> None:
        """Raise for an unfinished trial the store does not have, or a cancelled finish
        without a stop request; an attempt that lost its claim is only logged."""
        docs = self._docs([f.trial_id for f in unfinished], {"state": 1, "attempt": 1})
        for f in unfinished:
            doc = docs.get(f.trial_id)
            if doc is None:
                raise NotFound("trial", f.trial_id)
            if doc["state"] == _RUNNING and doc["attempt"] == f.attempt:
                raise InvalidTransition(
                    _RUNNING,
                    _CANCELLED,
                    "only an attempt whose sweep was cancelled may finish cancelled; "
                    "use complete, failed or pruned",
                )
            log.info(
                "trial %s: finish by attempt %d ignored (%s)", f.trial_id, f.attempt, doc["state"]
            )

    # -- helpers ------------------------------------------------------------------------

    def _call_time(self) -> datetime:
        """Now, but later than every earlier call of this store's (by a millisecond if
        need be): the time a claim or finish writes tells which trials that call changed,
        when a bulk write changed only some (only the holder process finishes an attempt,
        so no other process writes the same time for it)."""
        with self._call_times:
            now = self._clock()
            last = self._last_call
            if last is not None and now <= last:
                now = last + timedelta(milliseconds=1)
            self._last_call = now
            return now

    def _docs(self, ids: Iterable[str], fields: Mapping[str, int]) -> dict[str, dict[str, Any]]:
        query = {"_id": {"$in": sorted(ids)}}
        return {doc["_id"]: doc for doc in self._trials.find(query, dict(fields))}

    def _changed_by(self, wanted: Mapping[str, int], marks: Mapping[str, Any], offset: int) -> list:
        """Which of `wanted` (id -> attempt before) a partial bulk write changed: those now at
        attempt + `offset` that carry every value of `marks` this call wrote."""
        docs = self._docs(wanted, {"attempt": 1, **dict.fromkeys(marks, 1)})
        return [
            t
            for t, a in wanted.items()
            if t in docs
            and docs[t]["attempt"] == a + offset
            and all(docs[t].get(k) == v for k, v in marks.items())
        ]

    def _bump_many(self, moves: Iterable[tuple[str, Mapping[str, int]]], now: datetime) -> None:
        """Move the counts of the sweeps of these trials: one ``$inc`` per sweep."""
        by_sweep: dict[str, Counter[str]] = {}
        for trial_id, move in moves:
            by_sweep.setdefault(sweep_of(trial_id), Counter()).update(move)
        for sweep_id, move in by_sweep.items():
            self._bump(sweep_id, move, now)

    def _check_attempts(self, attempts: Mapping[str, int]) -> None:
        docs = self._docs(attempts, {"attempt": 1})
        for trial_id, attempt in attempts.items():
            if trial_id not in docs:
                raise NotFound("trial", trial_id)
            if attempt > docs[trial_id]["attempt"]:
                raise InvalidQuery(
                    "attempt",
                    f"trial {trial_id} has had {docs[trial_id]['attempt']} attempts, got {attempt}",
                )

    @staticmethod
    def _checked_row(row: EpochRow) -> EpochRow:
        check_id("trial_id", row.trial_id)
        check_attempt(row.attempt)
        epoch = row.epoch
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise InvalidQuery("epoch", f"must be an integer >= 0, got {epoch!r}")
        return EpochRow(row.trial_id, row.attempt, epoch, check_keys("metrics", row.metrics))

    def _checked_finish(self, f: Finish) -> Finish:
        check_id("trial_id", f.trial_id)
        check_attempt(f.attempt)
        state = self._finish_state(f.state)
        result = check_keys("result", f.result) if f.result is not None else None
        extra = check_keys("extra", f.extra) if f.extra else {}
        reserved = sorted(set(extra) & RESERVED_TRIAL_FIELDS)
        if reserved:
            raise InvalidQuery(f"extra.{reserved[0]}", "is a lifecycle field that finish sets")
        if f.error is not None and not isinstance(f.error, str):
            raise InvalidQuery("error", f"must be a string, got {f.error!r}")
        return Finish(f.trial_id, f.attempt, state, result, f.error, extra)
