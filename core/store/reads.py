"""Reads, the store's role for the API and the dashboard: sweeps, pages of trials, the
best, a trial with its curve, what changed since a watermark, and a sweep's pace.

`Reads` changes nothing the other roles write (its one write, `keep_view_snapshot`, is a
cache of a read). The longer reads are in `core.store.views` (trial pages, the best) and
`core.store.changes` (the change feed, a whole sweep's rows, throughput); how each is shaped for
SecantusDB's planner is in the `core.store.store` docstring.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from core.errors import InvalidQuery, NotFound
from core.store import changes, summaries, views
from core.store.query import (
    Position,
    check_id,
    check_limit,
    check_name,
    check_states,
    decode_cursor,
    encode_cursor,
    param_filters,
    query_digest,
    sort_field,
)
from core.store.records import full_counts
from core.store.state import StoreState, available


class Reads:
    """What a page or a client reads of the store: sweeps (`list_sweeps`, `get_sweep`,
    `counts`), trials (`trials`, `best`, `get_trial`, `trials_by_id`, `trials_at`), a
    running trial's curve (`metrics_after`), the change feed of a live page
    (`changed_rows`, `sweep_rows`), a sweep's pace (`throughput`) and views stored for
    the next reader (`view_snapshot`, `keep_view_snapshot`).
    """

    def __init__(self, state: StoreState) -> None:
        self._s = state

    @available
    def list_sweeps(
        self, *, owner: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Sweeps, newest first, each with ``counts`` by state; and the next page's cursor."""
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
        """A sweep with ``counts`` by state; `NotFound` if missing or not `owner`'s."""
        return self._s.sweep(sweep_id, owner)

    @available
    def counts(self, sweep_id: str) -> dict[str, int]:
        """How many trials of the sweep are in each state (every state a key)."""
        return self._s.sweep(sweep_id)["counts"]

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
        """One page of a sweep's trials, and the cursor of the next page (None at the end).

        `state`: a state or a list of them. `params`: ``{"model.hidden_units": 64}`` (or a
        sub-section's ``{"execution.parallel.tau": 5}``), exact values (strings, numbers,
        booleans, None for "not set"). `sort`: ``index``,
        ``objective``, ``train_seconds``, ``finished_at``, ``started_at``, ``updated_at``,
        ``param_count``, ``attempt``, ``result.<metric>`` or a parameter path; ties are
        broken by index; missing values sort first ascending (MongoDB's order). The cursor
        is only valid for the same sweep, filters and sort.
        """
        states = check_states(state)
        filters = param_filters(params)
        field = sort_field(sort)
        check_limit(limit)
        return views.trials_page(
            self._s, sweep_id, states, filters, field, bool(descending), limit, cursor
        )

    @available
    def best(self, sweep_id: str, k: int = 10) -> list[dict[str, Any]]:
        """The `k` complete trials with the best objective, by the sweep's direction.

        Read from the sweep's top summary (`core.store.summaries`: the `summaries.TOP_K` best,
        kept as trials finish), then the `k` trials by id: a few ms at any sweep size.
        A sweep without a summary gets one first (once, reading its finished trials).
        """
        check_limit(k, "k")
        return views.best(self._s, sweep_id, k)

    @available
    def trials_by_id(
        self, trial_ids: Iterable[str], fields: Sequence[str]
    ) -> dict[str, dict[str, Any]]:
        """`fields` (dotted paths) of these trials, by id, in batched reads; `NotFound` for an
        id that is not in the store."""
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

    #: On SecantusDB a range of indexes reads ~0.3 ms a trial, an ``$in`` of them ~2 ms a
    #: value (of ids, ~2.5 ms), so `trials_at` reads a range when it spans at most this many
    #: times the indexes asked for.
    RANGE_SPAN = 6

    @available
    def trials_at(
        self, sweep_id: str, indexes: Iterable[int], fields: Sequence[str]
    ) -> list[dict[str, Any]]:
        """`fields` (dotted paths; ``_id`` and ``index`` always) of the sweep's trials at
        these indexes (at most `MAX_LIMIT`), by index; an index it does not have is left
        out. One read: the range from the first index to the last when it is short enough
        (`RANGE_SPAN`), else the indexes themselves."""
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
        """A trial; with ``metrics``: its reports sorted by attempt and epoch."""
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
        return doc

    @available
    def changed_rows(
        self, sweep_id: str, since: datetime | None, fields: Sequence[str]
    ) -> tuple[list[dict[str, Any]], datetime]:
        """Trials of the sweep changed after `since` (every trial when None), `fields` of each,
        in change order, and the watermark to pass as the next `since`.

        `fields` are dotted paths (``state``, ``params``, ``config.model.hidden_units``);
        every row also has ``_id``, ``index`` and ``updated_at``. Each change comes at least
        once: those younger than the store's `change_lag` may come again, so replace rows by
        ``_id``. The projection makes the first read (`since` None: every trial) cost about
        half of reading whole documents (50,000 trials, 13 fields: ~7 s against ~13 s on
        SecantusDB on a busy 2-core machine); later reads cost what changed.
        """
        return changes.changed_rows(self._s, sweep_id, since, fields)

    @available
    def sweep_rows(
        self, sweep_id: str, fields: Sequence[str]
    ) -> tuple[list[dict[str, Any]], datetime]:
        """Every trial of a sweep, `fields` of each, and a watermark for `changed_rows`:
        what ``changed_rows(sweep_id, None, fields)`` answers, read mostly from the finish
        log rather than the trials (50,000 finished trials: ~0.5 s against ~7-11 s).

        Finished trials come from the log (`core.store.summaries.finished_rows`), the others
        (queued, running, cancelled) from the trials, then what changed during the read;
        the newest ``updated_at`` of a trial wins. Should that not account for every trial
        of the sweep (a finish whose log write was lost), or should `fields` ask for more
        than the log keeps, the trials are read (the slow path), and a sweep without
        summaries gets them from that read, once.
        """
        return changes.sweep_rows(self._s, sweep_id, fields)

    @available
    def throughput(self, sweep_id: str, minutes: int = 10) -> dict[str, Any]:
        """How fast a sweep finishes trials lately, and when it should be done.

        ``per_minute``: trials finished (complete, failed, pruned) per minute over the last
        `minutes`, or since the sweep was created if that is later (None before the first
        finish); ``window_seconds``: that span; ``remaining``: queued + running;
        ``eta_seconds``: remaining / rate (0 when nothing remains, None without a rate or
        once cancelled). Reads only trials changed in the window after creation (a trial
        never touched since creation has ``updated_at == created_at``), so it costs about
        what finished in the window, plus the running trials.
        """
        return changes.throughput(self._s, sweep_id, minutes)

    @available
    def metrics_after(
        self, trial_id: str, attempt: int = 0, epoch: int = -1
    ) -> list[dict[str, Any]]:
        """A trial's metric rows after (`attempt`, `epoch`), by attempt and epoch.

        The defaults give every row. A page following a running trial passes the last row
        it has, so each poll reads only the attempt in progress.
        """
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

    @available
    def view_snapshot(self, sweep_id: str, name: str) -> tuple[str, bytes] | None:
        """A view of the sweep a reader stored (`keep_view_snapshot`): (version, bytes)."""
        check_id("sweep_id", sweep_id)
        return summaries.view_snapshot(self._s.db, sweep_id, check_name("name", name))

    @available
    def keep_view_snapshot(self, sweep_id: str, name: str, version: str, data: bytes) -> None:
        """Store a view computed from a whole sweep (at most 8 MB), for the next process
        that starts: see `core.store.summaries`. Removed with the sweep."""
        check_id("sweep_id", sweep_id)
        if not isinstance(data, bytes) or len(data) > 8 * 2**20:
            raise InvalidQuery("data", "must be bytes, at most 8 MB")
        summaries.keep_view_snapshot(self._s.db, sweep_id, check_name("name", name), version, data)
