"""The dashboard's in-memory copy of each open sweep, kept up to date from the store.

Why a copy: reading a whole sweep from SecantusDB takes seconds (50,000 trials: 7-11 s
on the 2-core test machine; see `core.store.store`), far over the two seconds a sweep page may
take to draw. So the first visit reads the sweep once, mostly from its finish log
(`Reads.sweep_rows`, projected to `data.FIELDS`: ~0.5 s for 50,000 finished trials), and
from then on each sync reads only what changed since the last watermark
(`Reads.changed_rows`). All pages of a sweep share one `SweepTable`, and the
store is asked at most once per `min_interval`, however many browsers poll.

Cursors are store times, not anything of this process, so that any server process (the
API runs several) can answer any page: each row remembers ``changed``, the store's
``updated_at`` of the version in which its content last changed (a heartbeat moves
``updated_at`` but changes nothing shown, so it is not a change). A page's cursor is the
watermark of the sync its data came from (``changed_rows``': the store's clock less
its change lag), so it asks for rows changed after it, and gets a row again while the
change is younger than the lag (a write can land after a later one was read). A page
places rows by trial index, so a repeat changes nothing.

`Tables` holds the tables of one app, syncs each at most every `min_interval` seconds,
forgets those unused for `idle_seconds`, and evicts the least recently used when they
hold more than `max_rows` trials together (~1 KB each in memory).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from core.store.roles import Reads
from dashboard.data import FIELDS, to_ms, trial_row
from dashboard.param_axes import Prepared, prepare

log = logging.getLogger(__name__)
T = TypeVar("T")


def digest(value: Any) -> str:
    """A short digest of a JSON value: pages send it back to say which version they have."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


class SweepTable:
    """One sweep's trial rows by index, when each last changed, and the sweep document."""

    def __init__(self, sweep_id: str) -> None:
        self.sweep_id = sweep_id
        self.rows: dict[int, dict[str, Any]] = {}
        self.changed: dict[int, int] = {}
        self.sweep: dict[str, Any] = {}
        self.version = 0
        self.loaded = False
        self.used = time.monotonic()
        self._watermark: datetime | None = None
        self._synced = 0.0
        self._lock = threading.Lock()
        # (table version, when, rows prepared, the sweep document read with them), and
        # name -> (version, digest, value) of what was computed from them
        self._prep: tuple[int, float, Prepared, dict[str, Any]] | None = None
        self._memo: dict[str, tuple[int, str | None, Any]] = {}
        self._notes: dict[str, Any] = {}

    def sync(self, reads: Reads, min_interval: float = 1.0) -> None:
        """Read what changed in the store since the last sync, unless one ran recently."""
        with self._lock:
            self.used = time.monotonic()
            if self.loaded and time.monotonic() - self._synced < min_interval:
                return
            started = time.perf_counter()
            # The sweep first: every transition its counts (and `counts_rev`) show is then
            # in the rows read after, so a snapshot of the page is never older than them.
            sweep = reads.get_sweep(self.sweep_id)
            if self.loaded:
                docs, watermark = reads.changed_rows(self.sweep_id, self._watermark, FIELDS)
            else:
                docs, watermark = reads.sweep_rows(self.sweep_id, FIELDS)
            self.sweep = sweep
            for doc in docs:
                row = trial_row(doc)
                if self.rows.get(row["index"]) == row:
                    continue
                self.rows[row["index"]] = row
                self.changed[row["index"]] = to_ms(doc["updated_at"]) or 0
                self.version += 1
            self._watermark = watermark
            self._synced = time.monotonic()
            if not self.loaded:
                log.info(
                    "sweep %s: read %d trials in %.2f s",
                    self.sweep_id,
                    len(docs),
                    time.perf_counter() - started,
                )
            self.loaded = True

    def snapshot(self) -> tuple[int, list[dict[str, Any]]]:
        """A page cursor covering every row now, and every row (shared: do not change them)."""
        with self._lock:
            return self._cursor(), list(self.rows.values())

    def _cursor(self) -> int:
        return to_ms(self._watermark) or 0

    def changed_after(self, since: int) -> tuple[int, list[dict[str, Any]]]:
        """The next cursor, and the rows whose content changed after store time `since` (ms)."""
        with self._lock:
            rows = [self.rows[i] for i, at in self.changed.items() if at > since]
            rows.sort(key=lambda r: (self.changed[r["index"]], r["index"]))
            return max(self._cursor(), since), rows

    def prepared(self, max_age: float = 0.0) -> Prepared:
        """The rows sorted and measured for the figures (`param_axes.prepare`), cached until the
        table changes and at least `max_age` s have passed."""
        return self._prepared(max_age)[1]

    def prepared_sweep(self, max_age: float = 0.0) -> tuple[Prepared, dict[str, Any], bool]:
        """`prepared`, the sweep document read with its rows, and whether they are the
        table's latest (not a snapshot kept for `max_age`)."""
        self._prepared(max_age)
        cached = self._prep
        assert cached is not None
        return cached[2], cached[3], cached[0] == self.version

    def _prepared(self, max_age: float) -> tuple[int, Prepared]:
        cached = self._prep
        if cached is not None and (
            cached[0] == self.version or time.monotonic() - cached[1] < max_age
        ):
            return cached[0], cached[2]
        with self._lock:
            version = self.version
            since, rows, sweep = self._cursor(), list(self.rows.values()), self.sweep
        direction = (sweep.get("objective") or {}).get("direction", "maximize")
        prep = prepare(rows, direction, since)
        self._prep = (version, time.monotonic(), prep, sweep)
        return version, prep

    def memo(
        self,
        name: str,
        compute: Callable[[Prepared], T],
        max_age: float = 0.0,
        *,
        versioned: bool = True,
    ) -> tuple[str, T]:
        """``(digest, compute(prepared))`` for the table's `prepared` rows (same `max_age`),
        cached with them. The digest lets a page say which version it has, whatever
        process computed it; it costs a serialisation of the value, so a caller that does
        not need it passes ``versioned=False`` (and gets "")."""
        version, prep = self._prepared(max_age)
        cached = self._memo.get(name)
        if cached is None or cached[0] != version:
            cached = (version, None, compute(prep))
        if versioned and cached[1] is None:
            cached = (version, digest(cached[2]), cached[2])
        self._memo[name] = cached
        return cached[1] or "", cached[2]

    def memo_get(self, name: str) -> Any:
        """A note kept with the table (`memo_set`), or None."""
        return self._notes.get(name)

    def memo_set(self, name: str, value: Any) -> None:
        """Keep a note with the table, e.g. which snapshot of it was stored."""
        self._notes[name] = value


class Tables:
    """The sweep tables of one app: created on first use, forgotten when idle or too many."""

    def __init__(
        self, max_rows: int = 500_000, idle_seconds: float = 3600.0, min_interval: float = 1.0
    ) -> None:
        self.max_rows = max_rows
        self.idle_seconds = idle_seconds
        self.min_interval = min_interval
        self._tables: dict[str, SweepTable] = {}
        self._lock = threading.Lock()

    def get(self, reads: Reads, sweep_id: str) -> SweepTable:
        """The sweep's table, synced unless it was less than `min_interval` s ago
        (`NotFound` from the store if there is no such sweep)."""
        with self._lock:
            table = self._tables.get(sweep_id)
            if table is None:
                table = self._tables[sweep_id] = SweepTable(sweep_id)
        try:
            table.sync(reads, self.min_interval)
        except Exception:
            if not table.loaded:
                with self._lock:
                    if self._tables.get(sweep_id) is table:
                        del self._tables[sweep_id]
            raise
        self._evict(keep=sweep_id)
        return table

    def peek(self, sweep_id: str) -> SweepTable | None:
        """The sweep's table if one is loaded; reads nothing."""
        table = self._tables.get(sweep_id)
        return table if table is not None and table.loaded else None

    def _evict(self, keep: str) -> None:
        with self._lock:
            now = time.monotonic()
            for sweep_id, table in list(self._tables.items()):
                if sweep_id != keep and now - table.used > self.idle_seconds:
                    del self._tables[sweep_id]
            by_use = sorted(self._tables.values(), key=lambda t: t.used)
            total = sum(len(t.rows) for t in by_use)
            for table in by_use:
                if total <= self.max_rows or table.sweep_id == keep:
                    continue
                total -= len(table.rows)
                del self._tables[table.sweep_id]
                log.info(
                    "evicted the table of sweep %s (%d trials)", table.sweep_id, len(table.rows)
                )
