"""The reads role on MongoDB (`core.store.roles.Reads`, for the API, the dashboard, the CLI
and the analysis): sweeps, pages of trials, the best, a trial with its curve, what changed
since a watermark, and a sweep's pace.

How each read is shaped for SecantusDB's planner is in the `core.store.store` docstring;
the windows and orderings that pages of trials are read in are `core.store.pages`. The best
trials come from the sweep's top summary and a whole sweep's rows mostly from its finish log
(`core.store.summaries`); a sweep without summaries gets them from the first read that needs
them. A change feed read delivers each change at least once (the store's ``change_lag``).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from core.errors import InvalidQuery, NotFound
from core.states import FINISH_STATES, TrialState
from core.store import summaries
from core.store.pages import fetch, index_page, ordered
from core.store.query import (
    Position,
    check_attempt,
    check_id,
    check_limit,
    check_name,
    check_states,
    decode_cursor,
    encode_cursor,
    get_path,
    param_filters,
    query_digest,
    sort_field,
)
from core.store.records import finite_number, full_counts
from core.store.roles import Reads
from core.store.state import StoreState, available, summaries_projection

__all__ = ["MongoReads"]

log = logging.getLogger(__name__)

_COMPLETE = TrialState.COMPLETE.value
_FINISHED = frozenset(s.value for s in FINISH_STATES)
#: The states a sweep's finish log does not hold: read from the trials themselves.
_LIVE = (TrialState.QUEUED.value, TrialState.RUNNING.value, TrialState.CANCELLED.value)


class MongoReads(Reads):
    """`Reads` on the store's shared state (`core.store.state`)."""

    #: On SecantusDB a range of indexes reads ~0.3 ms a trial, an ``$in`` of them ~2 ms a
    #: value (of ids, ~2.5 ms), so `trials_at` reads a range when it spans at most this many
    #: times the indexes asked for.
    RANGE_SPAN = 6

    def __init__(self, state: StoreState) -> None:
        self._s = state

    # -- sweeps --------------------------------------------------------------------------

    @available
    def list_sweeps(
        self, *, owner: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        check_limit(limit)
        query: dict[str, Any] = {}
        if owner is not None:
            query["owner"] = check_id("owner", owner)
        digest = query_digest("sweeps", owner)
        if cursor is not None:
            pos = decode_cursor(cursor, digest)
            if not isinstance(pos.value, list) or len(pos.value) != 2:
                raise InvalidQuery("cursor", "is not a cursor this store issued")
            created, last_id = pos.value
            if not isinstance(created, datetime) or not isinstance(last_id, str):
                raise InvalidQuery("cursor", "is not a cursor this store issued")
            query["$or"] = [
                {"created_at": {"$lt": created}},
                {"created_at": created, "_id": {"$lt": last_id}},
            ]
        docs = list(
            self._s.sweeps.find(query).sort([("created_at", -1), ("_id", -1)]).limit(limit + 1)
        )
        more = len(docs) > limit
        docs = docs[:limit]
        for doc in docs:
            doc["counts"] = full_counts(doc.get("counts"))
        nxt = None
        if more:
            nxt = encode_cursor(digest, Position(0, [docs[-1]["created_at"], docs[-1]["_id"]]))
        return docs, nxt

    @available
    def get_sweep(self, sweep_id: str, *, owner: str | None = None) -> dict[str, Any]:
        return self._s.sweep(sweep_id, owner)

    @available
    def counts(self, sweep_id: str) -> dict[str, int]:
        return self._s.sweep(sweep_id)["counts"]

    # -- trials --------------------------------------------------------------------------

    @available
    def trials(
        self,
        sweep_id: str,
        *,
        state: str | Sequence[str] | None = None,
        params: Mapping[str, Any] | None = None,
        sort: str = "index",
        descending: bool = False,
        limit: int = 50,
        cursor: str | None = None,
    ) -> tuple[list[dict[str, Any]], str | None]:
        states = check_states(state)
        filters = param_filters(params)
        field = sort_field(sort)
        check_limit(limit)
        descending = bool(descending)
        sweep = self._s.sweep(sweep_id)
        digest = query_digest(sweep_id, states, filters, field, descending)
        position = decode_cursor(cursor, digest) if cursor is not None else None
        if field == "index":
            docs, more = index_page(self._s, sweep, states, filters, descending, limit, position)
            last = Position(docs[-1]["index"]) if docs else None
        else:
            keyed = ordered(self._s, sweep_id, states, filters, field, descending, position)
            more = len(keyed) > limit
            keyed = keyed[:limit]
            docs = fetch(self._s, sweep_id, [index for _, index, _ in keyed], states, filters)
            last = Position(keyed[-1][1], get_path(keyed[-1][2], field)) if keyed else None
        nxt = encode_cursor(digest, last) if more and last is not None else None
        return docs, nxt

    @available
    def best(self, sweep_id: str, k: int = 10) -> list[dict[str, Any]]:
        check_limit(k, "k")
        _metric, direction = self._s.objective(sweep_id)
        summary = summaries.top_document(self._s.db, sweep_id)
        if summary is None:  # a sweep without summaries: built once, from its trials
            self._s.build_summaries(sweep_id, direction)
            summary = summaries.top_document(self._s.db, sweep_id) or {"top": []}
        entries = summaries.top_entries(summary)
        if len(entries) >= k or len(summary.get("top") or []) < summaries.TOP_K:
            chosen = [e["id"] for e in entries[:k]]
            docs = {d["_id"]: d for d in self._s.trials.find({"_id": {"$in": chosen}})}
            return [docs[t] for t in chosen if t in docs and docs[t]["state"] == _COMPLETE]
        return self._best_of_every_trial(sweep_id, k, direction)

    def _best_of_every_trial(self, sweep_id: str, k: int, direction: str) -> list[dict[str, Any]]:
        """`best` for a `k` past the summary: every complete trial read, remembered per
        complete count (a complete trial's objective never changes)."""
        counted = self._s.sweeps.find_one({"_id": sweep_id}, {f"counts.{_COMPLETE}": 1})
        if counted is None:
            raise NotFound("sweep", sweep_id)
        complete = (counted.get("counts") or {}).get(_COMPLETE, 0)
        remembered = self._s.best.get((sweep_id, k))
        if remembered is not None and remembered[0] == complete:
            return copy.deepcopy(remembered[1])
        keyed = ordered(
            self._s,
            sweep_id,
            [_COMPLETE],
            {},
            "objective",
            direction == "maximize",
            None,
            keep=lambda r: finite_number(r.get("objective")) is not None,
        )
        keyed.sort(key=lambda item: item[1])  # equal objectives: the earlier trial first
        keyed.sort(key=lambda item: item[0], reverse=direction == "maximize")
        best = fetch(self._s, sweep_id, [index for _, index, _ in keyed[:k]], [_COMPLETE])
        if len(self._s.best) > 1000:
            self._s.best.clear()
        self._s.best[(sweep_id, k)] = (complete, copy.deepcopy(best))
        return best

    @available
    def trials_by_id(
        self, trial_ids: Iterable[str], fields: Sequence[str]
    ) -> dict[str, dict[str, Any]]:
        ids = [check_id("trial_id", t) for t in trial_ids]
        for path in fields:
            for part in path.split("."):
                check_name("fields", part)
        out: dict[str, dict[str, Any]] = {}
        for start in range(0, len(ids), 1000):
            batch = ids[start : start + 1000]
            for doc in self._s.trials.find({"_id": {"$in": batch}}, dict.fromkeys(fields, 1)):
                out[doc["_id"]] = doc
        for trial_id in ids:
            if trial_id not in out:
                raise NotFound("trial", trial_id)
        return out

    @available
    def trials_at(
        self, sweep_id: str, indexes: Iterable[int], fields: Sequence[str]
    ) -> list[dict[str, Any]]:
        check_id("sweep_id", sweep_id)
        wanted = sorted(set(indexes))
        for index in wanted:
            if isinstance(index, bool) or not isinstance(index, int) or index < 0:
                raise InvalidQuery("indexes", f"must be trial indexes, got {index!r}")
        if not wanted:
            return []
        check_limit(len(wanted), "indexes")
        for path in fields:
            for part in path.split("."):
                check_name("fields", part)
        low, high = wanted[0], wanted[-1]
        if high - low + 1 <= len(wanted) * self.RANGE_SPAN:
            where: dict[str, Any] = {"$gte": low, "$lte": high}
        else:
            where = {"$in": wanted}
        keep = set(wanted)
        projection = {**dict.fromkeys(fields, 1), "index": 1}
        docs = self._s.trials.find({"sweep_id": sweep_id, "index": where}, projection)
        return sorted((d for d in docs if d["index"] in keep), key=lambda d: d["index"])

    @available
    def get_trial(self, trial_id: str, *, with_metrics: bool = True) -> dict[str, Any]:
        check_id("trial_id", trial_id)
        doc = self._s.trials.find_one({"_id": trial_id})
        if doc is None:
            raise NotFound("trial", trial_id)
        if with_metrics:
            rows = self._s.metrics.find(
                {"trial_id": trial_id},
                {"_id": 0, "attempt": 1, "epoch": 1, "metrics": 1, "reported_at": 1},
            ).sort([("attempt", 1), ("epoch", 1)])
            doc["metrics"] = list(rows)
        return self._s.texts.resolve_docs([doc])[0]

    @available
    def epoch_rows(self, attempts: Mapping[str, int]) -> dict[str, dict[int, dict[str, Any]]]:
        for trial_id, attempt in attempts.items():
            check_id("trial_id", trial_id)
            check_attempt(attempt)
        return self._s.epoch_rows(attempts)

    @available
    def metrics_after(
        self, trial_id: str, attempt: int = 0, epoch: int = -1
    ) -> list[dict[str, Any]]:
        check_id("trial_id", trial_id)
        for name, value, low in (("attempt", attempt, 0), ("epoch", epoch, -1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InvalidQuery(name, f"must be an integer >= {low}, got {value!r}")
        query: dict[str, Any] = {"trial_id": trial_id}
        if attempt > 0:
            query["attempt"] = {"$gte": attempt}
        rows = self._s.metrics.find(
            query, {"_id": 0, "attempt": 1, "epoch": 1, "metrics": 1, "reported_at": 1}
        )
        out = [r for r in rows if (r["attempt"], r["epoch"]) > (attempt, epoch)]
        out.sort(key=lambda r: (r["attempt"], r["epoch"]))
        return out

    # -- what a live page polls ----------------------------------------------------------

    @available
    def changed_rows(
        self, sweep_id: str, since: datetime | None, fields: Sequence[str]
    ) -> tuple[list[dict[str, Any]], datetime]:
        # The projection makes the first read cost about half of reading whole documents.
        _check_fields(fields)
        paths = {"_id", "index", "updated_at", *fields}
        # MongoDB refuses a projection naming both a path and a path inside it.
        kept = [p for p in paths if not any(p.startswith(q + ".") for q in paths)]
        return self._changes(sweep_id, since, dict.fromkeys(kept, 1))

    def _changes(
        self, sweep_id: str, since: datetime | None, projection: dict[str, int]
    ) -> tuple[list[dict[str, Any]], datetime]:
        """Trials changed after `since` (projected), in change order, and the watermark."""
        self._s.sweep(sweep_id)
        if since is not None and not isinstance(since, datetime):
            raise InvalidQuery("since", f"must be a datetime, got {since!r}")
        if since is not None and since.tzinfo is None:
            since = since.replace(tzinfo=UTC)
        start = self._s.clock()
        query: dict[str, Any] = {"sweep_id": sweep_id}
        if since is not None:
            query["updated_at"] = {"$gt": since}
        docs = sorted(
            self._s.trials.find(query, projection), key=lambda d: (d["updated_at"], d["index"])
        )
        watermark = start - self._s.change_lag
        if since is not None and since > watermark:
            watermark = since
        return docs, watermark

    @available
    def sweep_rows(
        self, sweep_id: str, fields: Sequence[str]
    ) -> tuple[list[dict[str, Any]], datetime]:
        # Finished trials come from the log, the others (queued, running, cancelled) from the
        # trials, then what changed during the read; the newest ``updated_at`` of a trial
        # wins. Should that not account for every trial, or should `fields` ask for more
        # than the log keeps, the trials are read (the slow path).
        _check_fields(fields)
        s = self._s
        sweep = s.sweep(sweep_id)
        direction = (sweep.get("objective") or {}).get("direction", "maximize")
        projection = summaries_projection(fields)
        start = s.clock()
        has_log = summaries.top_document(s.db, sweep_id) is not None
        if has_log and set(fields) <= set(summaries.ROW_FIELDS):
            rows: dict[int, dict[str, Any]] = {}
            for state in _LIVE:
                for doc in s.trials.find({"state": state, "sweep_id": sweep_id}, projection):
                    rows[doc["index"]] = doc
            _newest(rows, summaries.finished_rows(s.db, sweep_id).values())
            recent, _ = self._changes(sweep_id, start - s.change_lag, projection)
            _newest(rows, recent)
            if len(rows) >= sweep["trial_count"] - int(sweep.get("planned") or 0):
                docs = sorted(rows.values(), key=lambda d: (d["updated_at"], d["index"]))
                return docs, start - s.change_lag
            log.warning(
                "sweep %s: the finish log accounts for %d of %d trials; reading the trials",
                sweep_id, len(rows), sweep["trial_count"] - int(sweep.get("planned") or 0),
            )  # fmt: skip
        docs, watermark = self._changes(sweep_id, None, projection)
        if set(fields) <= set(summaries.ROW_FIELDS):
            if has_log:
                summaries.clear(s.db, sweep_id)
            finished = [d for d in docs if d.get("state") in _FINISHED]
            s.build_summaries(sweep_id, direction, finished)
        return docs, watermark

    @available
    def throughput(self, sweep_id: str, minutes: int = 10) -> dict[str, Any]:
        # Reads only trials changed in the window after creation (a trial never touched
        # since creation has ``updated_at == created_at``).
        if isinstance(minutes, bool) or not isinstance(minutes, int) or not 1 <= minutes <= 10080:
            raise InvalidQuery("minutes", f"must be an integer from 1 to 10080, got {minutes!r}")
        sweep = self._s.sweep(sweep_id)
        counts = sweep["counts"]
        remaining = counts[TrialState.QUEUED.value] + counts[TrialState.RUNNING.value]
        now = self._s.clock()
        start = max(now - timedelta(minutes=minutes), sweep["created_at"])
        window = max((now - start).total_seconds(), 1.0)
        out: dict[str, Any] = {
            "per_minute": None, "window_seconds": window, "remaining": remaining,
            "eta_seconds": 0.0 if remaining == 0 else None,
        }  # fmt: skip
        if remaining == 0 or sweep.get("cancelled_at") is not None:
            return out
        rows = self._s.trials.find(
            {"sweep_id": sweep_id, "updated_at": {"$gt": start}},
            {"_id": 0, "state": 1, "finished_at": 1},
        )
        done = sum(
            1
            for row in rows
            if row.get("state") in _FINISHED and (row.get("finished_at") or start) > start
        )
        if done:
            out["per_minute"] = done * 60.0 / window
            out["eta_seconds"] = remaining * window / done
        return out

    # -- views kept for the next reader --------------------------------------------------

    @available
    def view_snapshot(self, sweep_id: str, name: str) -> tuple[str, bytes] | None:
        check_id("sweep_id", sweep_id)
        return summaries.view_snapshot(self._s.db, sweep_id, check_name("name", name))

    @available
    def keep_view_snapshot(self, sweep_id: str, name: str, version: str, data: bytes) -> None:
        check_id("sweep_id", sweep_id)
        if not isinstance(data, bytes) or len(data) > 8 * 2**20:
            raise InvalidQuery("data", "must be bytes, at most 8 MB")
        summaries.keep_view_snapshot(self._s.db, sweep_id, check_name("name", name), version, data)


def _check_fields(fields: Sequence[str]) -> None:
    """`fields` must be a list of dotted paths of identifiers (`InvalidQuery` otherwise)."""
    if isinstance(fields, str) or not isinstance(fields, Sequence):
        raise InvalidQuery("fields", f"must be a list of field paths, got {fields!r}")
    for path in fields:
        if not isinstance(path, str):
            raise InvalidQuery("fields", f"must be field paths, got {path!r}")
        for part in path.split("."):
            check_name("fields", part)


def _newest(rows: dict[int, dict[str, Any]], docs: Iterable[dict[str, Any]]) -> None:
    """Put each of `docs` in `rows` (by index) unless the row there changed later."""
    for doc in docs:
        old = rows.get(doc["index"])
        if old is None or doc["updated_at"] >= old["updated_at"]:
            rows[doc["index"]] = doc
