"""The reads a live page polls: what changed since a watermark, and aggregates over time.

`changed_since` / `changed_rows` deliver each change at least once (see `Store.change_lag`);
`sweep_rows` is every trial of a sweep, mostly from its finish log (`core.summaries`);
`metrics_after` follows a running trial's curve; `objective_by_param`, `finished_per_minute`
and `throughput` summarise a sweep.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from core import summaries
from core.errors import InvalidQuery
from core.query import check_id, check_name, get_path, param_field, sort_key
from core.records import finite_number
from core.states import FINISH_STATES, TrialState
from core.views import Views, available, summaries_projection

log = logging.getLogger(__name__)

_COMPLETE = TrialState.COMPLETE.value
_FINISHED = frozenset(s.value for s in FINISH_STATES)
#: The states a sweep's finish log does not hold: read from the trials themselves.
_LIVE = (TrialState.QUEUED.value, TrialState.RUNNING.value, TrialState.CANCELLED.value)


class DashboardReads(Views):
    """Changes and aggregates, for pages that follow sweeps and trials as they run."""

    @available
    def changed_since(
        self, sweep_id: str, since: datetime | None
    ) -> tuple[list[dict[str, Any]], datetime]:
        """Trials (without ``config``) changed after `since`, and the watermark for next time.

        Pass the returned watermark as the next `since`. Changes are delivered at least
        once: those younger than `change_lag` may come again, so replace rows by ``_id``.
        """
        return self._changes(sweep_id, since, {"config": 0})

    def _changes(
        self, sweep_id: str, since: datetime | None, projection: dict[str, int]
    ) -> tuple[list[dict[str, Any]], datetime]:
        """Trials changed after `since` (projected), in change order, and the watermark."""
        self._sweep(sweep_id)
        if since is not None and not isinstance(since, datetime):
            raise InvalidQuery("since", f"must be a datetime, got {since!r}")
        if since is not None and since.tzinfo is None:
            since = since.replace(tzinfo=UTC)
        start = self._clock()
        query: dict[str, Any] = {"sweep_id": sweep_id}
        if since is not None:
            query["updated_at"] = {"$gt": since}
        docs = sorted(
            self._trials.find(query, projection), key=lambda d: (d["updated_at"], d["index"])
        )
        watermark = start - self.change_lag
        if since is not None and since > watermark:
            watermark = since
        return docs, watermark

    @available
    def objective_by_param(self, sweep_id: str, param: str) -> list[dict[str, Any]]:
        """Objective mean, min, max and n of complete trials per value of one parameter."""
        path = param_field(param, "param")
        self._sweep(sweep_id)
        rows = self._trials.find(
            {"state": _COMPLETE, "sweep_id": sweep_id}, {"_id": 0, "objective": 1, path: 1}
        )
        groups: dict[str, tuple[Any, list[float]]] = {}
        for row in rows:
            objective = finite_number(row.get("objective"))
            if objective is None:
                continue
            value = get_path(row, path)
            groups.setdefault(repr(value), (value, []))[1].append(objective)
        out = [
            {"value": value, "mean": sum(v) / len(v), "min": min(v), "max": max(v), "n": len(v)}
            for value, v in groups.values()
        ]
        return sorted(out, key=lambda row: sort_key(row["value"]))

    @available
    def finished_per_minute(self, sweep_id: str, minutes: int = 60) -> list[dict[str, Any]]:
        """Trials finished (complete, failed, pruned) in each of the last `minutes` minutes.

        One row per minute, oldest first, the current minute last, zeros included.
        """
        if isinstance(minutes, bool) or not isinstance(minutes, int) or not 1 <= minutes <= 10080:
            raise InvalidQuery("minutes", f"must be an integer from 1 to 10080, got {minutes!r}")
        self._sweep(sweep_id)
        end = self._clock().replace(second=0, microsecond=0)
        start = end - timedelta(minutes=minutes - 1)
        # updated_at >= finished_at always, so the index on updated_at finds them.
        rows = self._trials.find(
            {"sweep_id": sweep_id, "updated_at": {"$gte": start}},
            {"_id": 0, "state": 1, "finished_at": 1},
        )
        finished = _FINISHED
        per: Counter[datetime] = Counter()
        for row in rows:
            at = row.get("finished_at")
            if row.get("state") in finished and at is not None and at >= start:
                per[at.replace(second=0, microsecond=0)] += 1
        return [
            {"minute": start + timedelta(minutes=i), "n": per[start + timedelta(minutes=i)]}
            for i in range(minutes)
        ]

    # -- API reads ------------------------------------------------------------------------

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
        if isinstance(minutes, bool) or not isinstance(minutes, int) or not 1 <= minutes <= 10080:
            raise InvalidQuery("minutes", f"must be an integer from 1 to 10080, got {minutes!r}")
        sweep = self._sweep(sweep_id)
        counts = sweep["counts"]
        remaining = counts[TrialState.QUEUED.value] + counts[TrialState.RUNNING.value]
        now = self._clock()
        start = max(now - timedelta(minutes=minutes), sweep["created_at"])
        window = max((now - start).total_seconds(), 1.0)
        out: dict[str, Any] = {
            "per_minute": None, "window_seconds": window, "remaining": remaining,
            "eta_seconds": 0.0 if remaining == 0 else None,
        }  # fmt: skip
        if remaining == 0 or sweep.get("cancelled_at") is not None:
            return out
        rows = self._trials.find(
            {"sweep_id": sweep_id, "updated_at": {"$gt": start}},
            {"_id": 0, "state": 1, "finished_at": 1},
        )
        finished = _FINISHED
        done = sum(
            1
            for row in rows
            if row.get("state") in finished and (row.get("finished_at") or start) > start
        )
        if done:
            out["per_minute"] = done * 60.0 / window
            out["eta_seconds"] = remaining * window / done
        return out

    @available
    def changed_rows(
        self, sweep_id: str, since: datetime | None, fields: Sequence[str]
    ) -> tuple[list[dict[str, Any]], datetime]:
        """`changed_since` reading only `fields` of each trial; for views of a whole sweep.

        `fields` are dotted paths (``state``, ``params``, ``config.model.hidden_units``);
        every row also has ``_id``, ``index`` and ``updated_at``. Rows come in change order
        with the same watermark and at-least-once rule as `changed_since`. The projection
        makes the first read (`since` None: every trial) cost about half of reading whole
        documents (50,000 trials, 13 fields: ~7 s against ~13 s on SecantusDB on a busy
        2-core machine); later reads cost what changed.
        """
        if isinstance(fields, str) or not isinstance(fields, Sequence):
            raise InvalidQuery("fields", f"must be a list of field paths, got {fields!r}")
        paths = {"_id", "index", "updated_at"}
        for path in fields:
            if not isinstance(path, str):
                raise InvalidQuery("fields", f"must be field paths, got {path!r}")
            for part in path.split("."):
                check_name("fields", part)
            paths.add(path)
        # MongoDB refuses a projection naming both a path and a path inside it.
        kept = [p for p in paths if not any(p.startswith(q + ".") for q in paths)]
        return self._changes(sweep_id, since, dict.fromkeys(kept, 1))

    @available
    def sweep_rows(
        self, sweep_id: str, fields: Sequence[str]
    ) -> tuple[list[dict[str, Any]], datetime]:
        """Every trial of a sweep, `fields` of each, and a watermark for `changed_rows`:
        what ``changed_rows(sweep_id, None, fields)`` answers, read mostly from the finish
        log rather than the trials (50,000 finished trials: ~0.5 s against ~7-11 s).

        Finished trials come from the log (`core.summaries.finished_rows`), the others
        (queued, running, cancelled) from the trials, then what changed during the read;
        the newest ``updated_at`` of a trial wins. Should that not account for every trial
        of the sweep (a finish whose log write was lost), or should `fields` ask for more
        than the log keeps, the trials are read (the slow path), and a sweep without
        summaries gets them from that read, once.
        """
        self._check_fields(fields)
        sweep = self._sweep(sweep_id)
        direction = (sweep.get("objective") or {}).get("direction", "maximize")
        projection = summaries_projection(fields)
        start = self._clock()
        has_log = summaries.top_document(self.db, sweep_id) is not None
        if has_log and set(fields) <= set(summaries.ROW_FIELDS):
            rows: dict[int, dict[str, Any]] = {}
            for state in _LIVE:
                for doc in self._trials.find({"state": state, "sweep_id": sweep_id}, projection):
                    rows[doc["index"]] = doc
            _newest(rows, summaries.finished_rows(self.db, sweep_id).values())
            recent, _ = self._changes(sweep_id, start - self.change_lag, projection)
            _newest(rows, recent)
            if len(rows) >= sweep["trial_count"] - int(sweep.get("planned") or 0):
                docs = sorted(rows.values(), key=lambda d: (d["updated_at"], d["index"]))
                return docs, start - self.change_lag
            log.warning(
                "sweep %s: the finish log accounts for %d of %d trials; reading the trials",
                sweep_id, len(rows), sweep["trial_count"] - int(sweep.get("planned") or 0),
            )  # fmt: skip
        docs, watermark = self._changes(sweep_id, None, projection)
        if set(fields) <= set(summaries.ROW_FIELDS):
            if has_log:
                summaries.clear(self.db, sweep_id)
            finished = [d for d in docs if d.get("state") in _FINISHED]
            self._build_summaries(sweep_id, direction, finished)
        return docs, watermark

    @available
    def rebuild_summaries(self, sweep_id: str) -> None:
        """Make the sweep's summaries again from its trials (slow: reads every finished
        trial); for a summary left short by a process killed mid-finish (see `recount`)."""
        _metric, direction = self._objective(sweep_id)
        summaries.clear(self.db, sweep_id)
        self._build_summaries(sweep_id, direction)

    @available
    def view_snapshot(self, sweep_id: str, name: str) -> tuple[str, bytes] | None:
        """A view of the sweep a reader stored (`keep_view_snapshot`): (version, bytes)."""
        check_id("sweep_id", sweep_id)
        return summaries.view_snapshot(self.db, sweep_id, check_name("name", name))

    @available
    def keep_view_snapshot(self, sweep_id: str, name: str, version: str, data: bytes) -> None:
        """Store a view computed from a whole sweep (at most 8 MB), for the next process
        that starts: see `core.summaries`. Removed with the sweep."""
        check_id("sweep_id", sweep_id)
        if not isinstance(data, bytes) or len(data) > 8 * 2**20:
            raise InvalidQuery("data", "must be bytes, at most 8 MB")
        summaries.keep_view_snapshot(self.db, sweep_id, check_name("name", name), version, data)

    @staticmethod
    def _check_fields(fields: Sequence[str]) -> None:
        if isinstance(fields, str) or not isinstance(fields, Sequence):
            raise InvalidQuery("fields", f"must be a list of field paths, got {fields!r}")
        for path in fields:
            if not isinstance(path, str):
                raise InvalidQuery("fields", f"must be field paths, got {path!r}")
            for part in path.split("."):
                check_name("fields", part)

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
        rows = self._metrics.find(
            query, {"_id": 0, "attempt": 1, "epoch": 1, "metrics": 1, "reported_at": 1}
        )
        out = [r for r in rows if (r["attempt"], r["epoch"]) > (attempt, epoch)]
        out.sort(key=lambda r: (r["attempt"], r["epoch"]))
        return out


def _newest(rows: dict[int, dict[str, Any]], docs: Iterable[dict[str, Any]]) -> None:
    """Put each of `docs` in `rows` (by index) unless the row there changed later."""
    for doc in docs:
        old = rows.get(doc["index"])
        if old is None or doc["updated_at"] >= old["updated_at"]:
            rows[doc["index"]] = doc
