"""The trial lifecycle role on MongoDB (`core.store.roles.TrialLifecycle`, for the workers):
claim, heartbeat, report, finish.

Every transition is an ``update_one`` (or ``update_many``) whose filter names the state
and attempt it expects, so of concurrent callers exactly one changes the trial; that caller
then moves the sweep's counts. Why this shape, and not ``find_one_and_update``, is in
`core.store.store`; see `core.states` for the diagram of states.

A worker that holds several trials (a fused group, or one process's trials) pays one round
trip per step for all of them, not one per trial. A write that is the same for every trial
(claim, heartbeat) is one ``update_many`` by ``_id $in`` per attempt number (there is
usually one); one that differs per trial (progress, finish) is one ``bulk_write``
(ordered=False) of conditional ``UpdateOne``s; metric rows are one ``insert_many``
(ordered=False). On SecantusDB a bulk write saves only the round trips (the server works
statement by statement, ~0.5 ms each), while an ``update_many`` is one statement. Every
invariant holds trial by trial:

- each filter names the state and attempt it expects (a bulk write is atomic per document,
  not as a whole);
- the sweep's counts move by the caller that made the change, one ``$inc`` per sweep;
- a metric row is unique on (trial_id, attempt, epoch): a repeated report changes nothing.

When a bulk write changes fewer trials than it names, one read finds out which (rare: a
trial taken over, requeued or cancelled meanwhile). Round trips for K trials:
`claim_queued` 2 (the claims; the counts, if the sweep is neither cancelled nor paused),
`heartbeat_many`
1, `report_many` 2 (progress, rows), `finish_many` 2 (the finishes, each building its
history entry on the server, and the counts). The careful `claim` reads the trial first and
writes one trial.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from pymongo import UpdateOne
from pymongo.errors import BulkWriteError

from core.errors import InvalidQuery, InvalidTransition, NotFound
from core.settings import DEFAULT_MAX_ATTEMPTS
from core.states import FINISH_STATES, Heartbeat, TrialState
from core.store.query import (
    check_attempt,
    check_id,
    check_keys,
    check_max_attempts,
    check_seconds,
)
from core.store.records import (
    JUDGED_FIELDS,
    REQUEUED_FIELDS,
    RESERVED_TRIAL_FIELDS,
    Verdict,
    finite_number,
    history_entry,
    sweep_of,
    verdict,
)
from core.store.roles import CompleteCurves, EpochRow, Finish, TrialLifecycle
from core.store.state import StoreState, available

__all__ = ["HANDED_BACK", "PRUNE_ATTEMPT", "MongoTrialLifecycle", "not_pruned", "poison_reason"]

log = logging.getLogger(__name__)

_QUEUED = TrialState.QUEUED.value
_RUNNING = TrialState.RUNNING.value
_FAILED = TrialState.FAILED.value
_CANCELLED = TrialState.CANCELLED.value
_COMPLETE = TrialState.COMPLETE.value
_STATES = frozenset(s.value for s in TrialState)
# What a finish accepts: a finish state, or cancelled after a stop request.
_FINISHES = frozenset(s.value for s in FINISH_STATES) | {_CANCELLED}
_DUPLICATE_KEY = 11000
#: The ``history`` state of an attempt whose worker shut down and gave the trial back.
HANDED_BACK = "handed_back"
#: The path of the attempt a prune request names (`core.store.admin`'s `request_prune`).
PRUNE_ATTEMPT = "prune_requested.attempt"


def not_pruned(attempt: int) -> dict[str, Any]:
    """The filter clause of an attempt that no prune request names (an older attempt's
    request, or none at all, leaves it alone)."""
    return {PRUNE_ATTEMPT: {"$ne": attempt}}


def poison_reason(doc: Mapping[str, Any], max_attempts: int) -> str:
    """Why a trial whose worker died `max_attempts` times ended failed: what is known of the
    last holder (host, pid, worker name, last heartbeat)."""
    holder = doc.get("worker") or {}
    beat = doc.get("heartbeat_at")
    known = [key for key in ("host", "pid", "name") if holder.get(key) not in (None, "")]
    where = ", ".join(f"{key} {holder[key]}" for key in known)
    return (
        f"its worker died {max_attempts} times: attempt {doc.get('attempt')} "
        f"({where or 'holder unknown'}) last sent a heartbeat at "
        f"{beat.isoformat() if beat else 'its start'}; killed by the out-of-memory killer, a "
        "crash or a signal? (SWEEPSTACK_MAX_ATTEMPTS sets the limit; retry to try again)"
    )


def _running_fields(worker: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """What a claim sets on a trial that starts an attempt (with the attempt's number moved
    by the caller): one shape for the careful claim and the batched one."""
    return {
        "state": _RUNNING,
        "worker": worker,
        "started_at": now,
        "heartbeat_at": now,
        "updated_at": now,
        "progress": None,
    }


def _by_attempt(attempts: Mapping[str, int]) -> dict[int, list[str]]:
    """Trial ids by attempt: one ``update_many`` per attempt (usually one in all)."""
    out: dict[int, list[str]] = {}
    for trial_id, attempt in attempts.items():
        out.setdefault(attempt, []).append(trial_id)
    return out


class MongoTrialLifecycle(TrialLifecycle):
    """`TrialLifecycle` on the store's shared state (`core.store.state`)."""

    def __init__(self, state: StoreState) -> None:
        self._s = state

    # -- claims --------------------------------------------------------------------------

    @available
    def claim(
        self,
        trial_id: str,
        worker: Mapping[str, Any],
        *,
        stale_after: float,
        takeover_attempt: int | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> dict[str, Any] | None:
        check_id("trial_id", trial_id)
        worker = check_keys("worker", worker)
        stale = timedelta(seconds=check_seconds("stale_after", stale_after))
        if takeover_attempt is not None:
            check_attempt(takeover_attempt)
        check_max_attempts(max_attempts)
        doc = self._s.trials.find_one({"_id": trial_id})
        if doc is None:
            raise NotFound("trial", trial_id)
        now = self._s.clock()
        if doc["state"] == _QUEUED:
            if self._s.cancelled(doc["sweep_id"]):
                self._cancel_queued(doc, now)
                return None
            expect = {"_id": trial_id, "state": _QUEUED, "attempt": doc["attempt"]}
            if not self._start_attempt(expect, worker, now):
                return None
            if not self._claimed_in_live_sweep(doc["sweep_id"], [trial_id], now):
                return None
            return self._claimed(trial_id)
        if doc["state"] != _RUNNING:
            return None
        attempt, beat = doc["attempt"], doc.get("heartbeat_at")
        dead = takeover_attempt is not None and takeover_attempt == attempt
        if not dead and beat is not None and beat >= now - stale:
            return None
        expect = {"_id": trial_id, "state": _RUNNING, "attempt": attempt}
        if not dead:
            expect["heartbeat_at"] = beat  # unchanged since read: no heartbeat came in between
        why = (
            f"attempt {attempt} was taken over: its process is gone"
            if dead
            else f"no heartbeat since {beat.isoformat() if beat else 'the start'}"
        )
        lost = history_entry(doc, "lost", now, why)
        if doc.get("stop_requested") or self._s.cancelled(doc["sweep_id"]):
            ended = self._s.trials.update_one(
                expect,
                {
                    "$set": {"state": _CANCELLED, "finished_at": now, "updated_at": now},
                    "$push": {"history": lost},
                },
            )
            if ended.modified_count:
                self._s.bump(doc["sweep_id"], {_RUNNING: -1, _CANCELLED: 1}, now)
            return None
        if doc.get("lost_attempts", 0) + 1 >= max_attempts:
            self._end_poisoned(doc, expect, lost, max_attempts, now)
            return None
        if not self._start_attempt(expect, worker, now, lost=lost):
            return None
        log.info("trial %s: attempt %d lost (%s); taken over", trial_id, attempt, why)
        return self._claimed(trial_id)

    def _claimed(self, trial_id: str) -> dict[str, Any] | None:
        """The trial just claimed, its config's texts in place (`core.store.texts`)."""
        doc = self._s.trials.find_one({"_id": trial_id})
        return None if doc is None else self._s.texts.resolve_docs([doc])[0]

    @available
    def resolve_texts(self, sweep_id: str, config: Mapping[str, Any]) -> dict[str, Any]:
        check_id("sweep_id", sweep_id)
        return self._s.texts.resolve(sweep_id, config)

    def _start_attempt(
        self,
        expect: dict[str, Any],
        worker: dict[str, Any],
        now: datetime,
        lost: dict[str, Any] | None = None,
    ) -> bool:
        update: dict[str, Any] = {"$set": _running_fields(worker, now), "$inc": {"attempt": 1}}
        if lost is not None:
            update["$push"] = {"history": lost}
            update["$inc"]["lost_attempts"] = 1
        return self._s.trials.update_one(expect, update).modified_count == 1

    def _end_poisoned(
        self,
        doc: Mapping[str, Any],
        expect: dict[str, Any],
        lost: dict[str, Any],
        max_attempts: int,
        now: datetime,
    ) -> bool:
        """End a running trial `failed` whose attempts died `max_attempts` times; True if
        this call did (`expect` is the filter that proves the attempt is still the dead one)."""
        error = poison_reason(doc, max_attempts)
        ended = self._s.trials.update_one(
            expect,
            {
                "$set": {
                    "state": _FAILED,
                    "finished_at": now,
                    "updated_at": now,
                    "error": error,
                    "progress": None,
                },
                "$inc": {"lost_attempts": 1},
                "$push": {"history": lost},
            },
        )
        if not ended.modified_count:
            return False
        self._s.bump(doc["sweep_id"], {_RUNNING: -1, _FAILED: 1}, now)
        self._s.log_finished([doc["_id"]])
        log.warning("trial %s failed: %s", doc["_id"], error)
        return True

    def _cancel_queued(self, doc: Mapping[str, Any], now: datetime) -> None:
        done = self._s.trials.update_one(
            {"_id": doc["_id"], "state": _QUEUED, "attempt": doc["attempt"]},
            {"$set": {"state": _CANCELLED, "finished_at": now, "updated_at": now}},
        )
        if done.modified_count:
            self._s.bump(doc["sweep_id"], {_QUEUED: -1, _CANCELLED: 1}, now)

    @available
    def claim_queued(self, expected: Mapping[str, int], worker: Mapping[str, Any]) -> list[str]:
        for trial_id, attempt in expected.items():
            check_id("trial_id", trial_id)
            if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 0:
                raise InvalidQuery("attempt", f"must be an integer >= 0, got {attempt!r}")
        worker = check_keys("worker", worker)
        if not expected:
            return []
        wanted = dict(expected)
        now = self._s.call_time()
        modified = 0
        for attempt, ids in _by_attempt(wanted).items():
            done = self._s.trials.update_many(
                {"_id": {"$in": ids}, "state": _QUEUED, "attempt": attempt},
                {"$set": {**_running_fields(worker, now), "attempt": attempt + 1}},
            )
            modified += done.modified_count
        if modified == len(wanted):
            claimed = list(wanted)
        elif modified == 0:
            claimed = []
        else:
            claimed = self._s.changed_by(
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
        cancelled (or deleted), and the trials are then cancelled instead, or paused, and
        the trials are then put back (`_hold`).

        The counter write asks that the sweep is neither cancelled nor paused, so the usual
        claim needs no read of the sweep, and a pause is exact: a claim whose counter write
        came after the pause's starts nothing. A queued trial of a cancelled sweep exists
        only when a requeue or retry raced the cancel (`cancel_sweep` cancels every queued
        trial after setting its flag): such a trial, just claimed, ends cancelled, as
        `claim` ends it.
        """
        n = len(ids)
        moved = self._s.sweeps.update_one(
            {"_id": sweep_id, "cancelled_at": None, "paused_at": None},
            {"$inc": {f"counts.{_QUEUED}": -n, f"counts.{_RUNNING}": n, "counts_rev": 1},
             "$set": {"updated_at": now}},
        )  # fmt: skip
        if moved.matched_count:
            return True
        sweep = self._s.sweeps.find_one({"_id": sweep_id}, {"cancelled_at": 1, "paused_at": 1})
        if sweep is not None and sweep.get("cancelled_at") is None:
            self._hold(sweep_id, ids, now)
            return False
        ended = self._s.trials.update_many(
            {"_id": {"$in": ids}, "state": _RUNNING, "started_at": now},
            {"$set": {"state": _CANCELLED, "finished_at": now, "updated_at": now}},
        )
        gone = ended.modified_count
        self._s.bump(sweep_id, {_QUEUED: -n, _RUNNING: n - gone, _CANCELLED: gone}, now)
        log.info("%d trial(s) of cancelled sweep %s cancelled at their claim", gone, sweep_id)
        return False

    def _hold(self, sweep_id: str, ids: list[str], now: datetime) -> None:
        """Put trials of a paused sweep that this call just claimed back in the queue, as
        they were (attempt, start and worker unset), and note them in the sweep's ``held``
        list: their messages are acked, and the sweep's feeder sends them again once it is
        resumed (`scheduler.feed`). Their counts never moved."""
        put_back = self._s.trials.find(
            {"_id": {"$in": ids}, "state": _RUNNING, "started_at": now}, {"attempt": 1}
        )
        back = []
        for doc in put_back:
            attempt = doc["attempt"]
            done = self._s.trials.update_one(
                {"_id": doc["_id"], "state": _RUNNING, "attempt": attempt, "started_at": now},
                {"$set": {"state": _QUEUED, "attempt": attempt - 1, "worker": None,
                          "started_at": None, "heartbeat_at": None, "updated_at": now}},
            )  # fmt: skip
            if done.modified_count:
                back.append(doc["_id"])
        if back:
            self._s.sweeps.update_one({"_id": sweep_id}, {"$addToSet": {"held": {"$each": back}}})
            log.info("%d trial(s) of paused sweep %s held at their claim", len(back), sweep_id)

    # -- while an attempt runs -----------------------------------------------------------

    @available
    def heartbeat_many(self, attempts: Mapping[str, int]) -> dict[str, Heartbeat]:
        for trial_id, attempt in attempts.items():
            check_id("trial_id", trial_id)
            check_attempt(attempt)
        if not attempts:
            return {}
        now = self._s.clock()
        beat = {"$set": {"heartbeat_at": now, "updated_at": now}}
        matched = 0
        for attempt, ids in _by_attempt(attempts).items():
            holders = {"_id": {"$in": ids}, "state": _RUNNING, "attempt": attempt}
            matched += self._s.trials.update_many(
                {**holders, "stop_requested": False, **not_pruned(attempt)}, beat
            ).matched_count
        if matched == len(attempts):
            return dict.fromkeys(attempts, Heartbeat.OK)
        docs = self._s.docs(attempts, JUDGED_FIELDS)
        out = {t: verdict(docs.get(t, {}), attempt).answer for t, attempt in attempts.items()}
        # Those told to stop still hold their claim until they finish: beat them too.
        stopping = {
            t: attempt for t, attempt in attempts.items()
            if out[t] in (Heartbeat.STOP, Heartbeat.PRUNE)
        }  # fmt: skip
        for attempt, ids in _by_attempt(stopping).items():
            self._s.trials.update_many(
                {"_id": {"$in": ids}, "state": _RUNNING, "attempt": attempt}, beat
            )
        return out

    @available
    def report_many(self, rows: Sequence[EpochRow]) -> None:
        rows = [_checked_row(row) for row in rows]
        if not rows:
            return
        now = self._s.clock()
        latest: dict[tuple[str, int], EpochRow] = {}
        for row in rows:
            key = (row.trial_id, row.attempt)
            if key not in latest or row.epoch >= latest[key].epoch:
                latest[key] = row
        shown = self._s.trials.bulk_write(
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
        late: set[tuple[str, int]] = set()
        if shown.matched_count < len(latest):
            late = self._superseded(list(latest))
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
            if (row.trial_id, row.attempt) not in late
        ]
        if not inserts:
            return
        try:
            self._s.metrics.insert_many(inserts, ordered=False)
        except BulkWriteError as exc:
            others = [e for e in exc.details.get("writeErrors", []) if e["code"] != _DUPLICATE_KEY]
            if others:
                raise

    @available
    def hand_back(self, trial_id: str, attempt: int, reason: str) -> bool:
        check_id("trial_id", trial_id)
        check_attempt(attempt)
        if not isinstance(reason, str):
            raise InvalidQuery("reason", f"must be a string, got {type(reason).__name__}")
        doc = self._s.trials.find_one(
            {"_id": trial_id, "state": _RUNNING, "attempt": attempt},
            {"sweep_id": 1, "attempt": 1, "worker": 1, "started_at": 1},
        )
        if doc is None:
            return False
        now = self._s.clock()
        entry = history_entry(doc, HANDED_BACK, now, reason[:1000])
        moved = self._s.trials.update_one(
            {"_id": trial_id, "state": _RUNNING, "attempt": attempt},
            {
                "$set": {**REQUEUED_FIELDS, "queued_at": now, "updated_at": now},
                "$push": {"history": entry},
            },
        )
        if not moved.modified_count:
            return False
        self._s.bump(doc["sweep_id"], {_RUNNING: -1, _QUEUED: 1}, now)
        log.info("trial %s: attempt %d handed back (%s)", trial_id, attempt, reason)
        return True

    @available
    def resume(self, trial_id: str, attempt: int, from_attempt: int, epoch: int) -> bool:
        check_id("trial_id", trial_id)
        check_attempt(attempt)
        check_attempt(from_attempt)
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise InvalidQuery("epoch", f"must be an integer >= 0, got {epoch!r}")
        if from_attempt >= attempt:
            raise InvalidQuery(
                "from_attempt", f"must be below attempt {attempt}, got {from_attempt}"
            )
        entry = {"attempt": attempt, "from_attempt": from_attempt, "epoch": epoch,
                 "at": self._s.clock()}  # fmt: skip
        held = self._s.trials.update_one(
            {"_id": trial_id, "state": _RUNNING, "attempt": attempt},
            {"$push": {"resumed": entry}},
        )
        if not held.matched_count:
            return False
        # The checkpoint's rows are `from_attempt`'s, unless an attempt between resumed from
        # the same checkpoint and took them over, then died before a checkpoint of its own
        # (a resume of a resume): they are then that attempt's, the latest such first. Rows
        # this attempt has already (a resume begun before, its reply lost) stay: each epoch
        # is moved once, never written twice.
        doc = self._s.trials.find_one({"_id": trial_id}, {"resumed": 1}) or {}
        holders = {from_attempt} | {
            int(r["attempt"]) for r in doc.get("resumed") or []
            if r.get("from_attempt") == from_attempt and from_attempt < r["attempt"] < attempt
        }  # fmt: skip
        for holder in sorted(holders, reverse=True):
            mine = [row["epoch"] for row in self._s.metrics.find(
                {"trial_id": trial_id, "attempt": attempt, "epoch": {"$lte": epoch}},
                {"epoch": 1})]  # fmt: skip
            self._s.metrics.update_many(
                {"trial_id": trial_id, "attempt": holder, "epoch": {"$lte": epoch, "$nin": mine}},
                {"$set": {"attempt": attempt}},
            )
        return True

    @available
    def note(self, trial_id: str, attempt: int, text: str) -> bool:
        check_id("trial_id", trial_id)
        check_attempt(attempt)
        if not isinstance(text, str):
            raise InvalidQuery("text", f"must be a string, got {type(text).__name__}")
        entry = {"attempt": attempt, "text": text[:1000], "at": self._s.clock()}
        held = self._s.trials.update_one(
            {"_id": trial_id, "state": _RUNNING, "attempt": attempt},
            {"$push": {"notes": entry}},
        )
        return bool(held.matched_count)

    def _superseded(self, reported: Collection[tuple[str, int]]) -> set[tuple[str, int]]:
        """Which (trial, attempt) pairs of a report came late: the attempt was taken over
        (the trial is at a later attempt) or requeued (queued again, as the stale-heartbeat
        scan leaves it). Their rows are refused by attempt, as their finish will be (a
        worker cut off beyond the stale limit sends them once its link is back); an attempt
        that is still the trial's, ended or not (cancelled), keeps its rows. Raises what
        `_check_attempts` raises."""
        attempts = dict(reported)
        docs = self._check_attempts(attempts)
        return {
            (trial_id, attempt)
            for trial_id, attempt in reported
            if docs[trial_id]["attempt"] > attempt or docs[trial_id].get("state") == _QUEUED
        }

    def _check_attempts(self, attempts: Mapping[str, int]) -> dict[str, dict[str, Any]]:
        """`NotFound` for a trial the store does not have, `InvalidQuery` for an attempt it
        has not had: why a progress write matched fewer trials than it named. The trials'
        attempts and states, by id."""
        docs = self._s.docs(attempts, {"attempt": 1, "state": 1})
        for trial_id, attempt in attempts.items():
            if trial_id not in docs:
                raise NotFound("trial", trial_id)
            if attempt > docs[trial_id]["attempt"]:
                raise InvalidQuery(
                    "attempt",
                    f"trial {trial_id} has had {docs[trial_id]['attempt']} attempts, got {attempt}",
                )
        return docs

    # -- finishes ------------------------------------------------------------------------

    @available
    def finish_many(self, finishes: Sequence[Finish]) -> dict[str, bool]:
        # Each finish is one conditional update that builds the attempt's history entry on
        # the server (a pipeline update: no read first).
        checked = [_checked_finish(f) for f in finishes]
        if len({f.trial_id for f in checked}) != len(checked):
            raise InvalidQuery("finishes", "name each trial at most once")
        if not checked:
            return {}
        now = self._s.call_time()
        ops = []
        for f in checked:
            expect: dict[str, Any] = {"_id": f.trial_id, "state": _RUNNING, "attempt": f.attempt}
            if f.state == _CANCELLED:
                expect["stop_requested"] = True
            ops.append(UpdateOne(expect, [{"$set": self._finish_fields(f, now)}]))
        done = self._s.trials.bulk_write(ops, ordered=False)
        wanted = {f.trial_id: f.attempt for f in checked}
        states = {f.trial_id: str(f.state) for f in checked}
        if done.modified_count == len(checked):
            ended = list(wanted)
        else:
            ended = self._ended_by(wanted, states, now)
        self._s.bump_many(((t, {_RUNNING: -1, states[t]: 1}) for t in ended), now)
        self._s.log_finished(ended)
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
            "objective": self._s.objective_of(sweep_of(f.trial_id), f.result),
            **self._s.measured(sweep_of(f.trial_id), f.result, f.extra),
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

    def _ended_by(
        self, wanted: Mapping[str, int], states: Mapping[str, str], now: datetime
    ) -> list[str]:
        """Which of `wanted` (id -> attempt) a partial finish write ended: those at that
        attempt whose last history entry is this call's (its state, at its time). A trial
        another caller ended at the same millisecond (a poisoned attempt's end, a cancel at a
        claim) has a ``lost`` entry last; only the holder finishes an attempt, so no other
        finish of it writes the same time (`core.store.state.StoreState.call_time`)."""
        docs = self._s.docs(wanted, {"attempt": 1, "history": 1})
        out = []
        for trial_id, attempt in wanted.items():
            doc = docs.get(trial_id)
            last = ((doc or {}).get("history") or [{}])[-1]
            if (
                doc is not None
                and doc["attempt"] == attempt
                and last.get("state") == states[trial_id]
                and last.get("finished_at") == now
            ):
                out.append(trial_id)
        return out

    def _explain_unfinished(self, unfinished: list[Finish]) -> None:
        """Raise for an unfinished trial the store does not have, or a cancelled finish
        without a stop request; an attempt that lost its claim is only logged."""
        docs = self._s.docs([f.trial_id for f in unfinished], {"state": 1, "attempt": 1})
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

    # -- what a worker reads -------------------------------------------------------------

    @available
    def trial(self, trial_id: str) -> dict[str, Any]:
        check_id("trial_id", trial_id)
        doc = self._s.trials.find_one({"_id": trial_id})
        if doc is None:
            raise NotFound("trial", trial_id)
        return doc

    @available
    def judged(self, attempts: Mapping[str, int]) -> dict[str, Verdict]:
        for trial_id, attempt in attempts.items():
            check_id("trial_id", trial_id)
            check_attempt(attempt)
        if not attempts:
            return {}
        docs = self._s.docs(attempts, JUDGED_FIELDS)
        return {t: verdict(docs.get(t, {}), attempt) for t, attempt in attempts.items()}

    @available
    def objective(self, sweep_id: str) -> dict[str, Any]:
        metric, direction = self._s.objective(sweep_id)
        return {"metric": metric, "direction": direction,
                "measure": [list(m) for m in self._s.goals_of(sweep_id).measures]}  # fmt: skip

    @available
    def pruning(self, sweep_id: str) -> dict[str, Any]:
        check_id("sweep_id", sweep_id)
        doc = self._s.sweeps.find_one({"_id": sweep_id}, {"spec.pruning": 1})
        if doc is None:
            raise NotFound("sweep", sweep_id)
        section = (doc.get("spec") or {}).get("pruning")
        return dict(section) if isinstance(section, Mapping) else {}

    @available
    def complete_curves(
        self, sweep_id: str, metric: str, known: Collection[str], since: datetime | None
    ) -> CompleteCurves:
        check_id("sweep_id", sweep_id)
        if not isinstance(metric, str) or not metric:
            raise InvalidQuery("metric", f"must be a metric name, got {metric!r}")
        if since is not None and not isinstance(since, datetime):
            raise InvalidQuery("since", f"must be a datetime or None, got {since!r}")
        doc = self._s.sweeps.find_one({"_id": sweep_id}, {"counts.complete": 1})
        if doc is None:
            raise NotFound("sweep", sweep_id)
        if int((doc.get("counts") or {}).get(_COMPLETE, 0)) == len(known):
            return CompleteCurves({}, since)
        # From before the read: a trial that completes after it has a later updated_at;
        # the change lag covers the clocks of other hosts (`Reads.changed_rows`).
        next_since = self._s.clock() - self._s.change_lag
        query: dict[str, Any] = {"state": _COMPLETE, "sweep_id": sweep_id}
        if since is not None:  # the change-feed index: only the trials written since
            query = {"sweep_id": sweep_id, "updated_at": {"$gte": since}}
        fields = {"state": 1, "attempt": 1, "objective": 1}
        found = {
            d["_id"]: d for d in self._s.trials.find(query, fields)
            if d.get("state") == _COMPLETE and d["_id"] not in known
        }  # fmt: skip
        rows = self._s.epoch_rows({tid: d.get("attempt", 0) for tid, d in found.items()})
        curves: dict[str, tuple[float | None, dict[int, float]]] = {}
        for tid, doc in found.items():
            values = {e: finite_number(m.get(metric)) for e, m in rows[tid].items()}
            curve = {e: float(v) for e, v in values.items() if v is not None}
            curves[tid] = (finite_number(doc.get("objective")), curve)
        return CompleteCurves(curves, next_since)


# -- what a worker sends, checked before anything is written ---------------------------


def _finish_state(state: Any) -> str:
    """A finish's state as a string; `InvalidTransition` for one a finish cannot reach."""
    value = getattr(state, "value", state)
    names = ", ".join(sorted(s.value for s in FINISH_STATES))
    if value not in _STATES:
        raise InvalidTransition(_RUNNING, str(value), f"not a trial state; finish accepts {names}")
    if value not in _FINISHES:
        raise InvalidTransition(_RUNNING, value, f"not a finish; finish accepts {names}")
    return value


def _checked_row(row: EpochRow) -> EpochRow:
    check_id("trial_id", row.trial_id)
    check_attempt(row.attempt)
    epoch = row.epoch
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise InvalidQuery("epoch", f"must be an integer >= 0, got {epoch!r}")
    return EpochRow(row.trial_id, row.attempt, epoch, check_keys("metrics", row.metrics))


def _checked_finish(f: Finish) -> Finish:
    check_id("trial_id", f.trial_id)
    check_attempt(f.attempt)
    state = _finish_state(f.state)
    result = check_keys("result", f.result) if f.result is not None else None
    extra = check_keys("extra", f.extra) if f.extra else {}
    reserved = sorted(set(extra) & RESERVED_TRIAL_FIELDS)
    if reserved:
        raise InvalidQuery(f"extra.{reserved[0]}", "is a lifecycle field that finish sets")
    if f.error is not None and not isinstance(f.error, str):
        raise InvalidQuery("error", f"must be a string, got {f.error!r}")
    return Finish(f.trial_id, f.attempt, state, result, f.error, extra)
