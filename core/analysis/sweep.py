"""One sweep's analysis from the store, computed once per state of the sweep.

The trials are read through the store's read interface only (`Reads.get_sweep`, with the
owner check, and `Reads.sweep_rows`, mostly from the finish log). An analysis is valid for
one *version* of the sweep: `ANALYSIS_VERSION`, the sweep's ``counts_rev`` (bumped by
every transition of every trial) and whether importance was computed. So:

- a finished sweep (nothing queued or running) is analysed once: the result is stored
  with the sweep (`Reads.keep_view_snapshot`, removed with it), and any process (the
  API, the dashboard, ``sweepstack report``) serves it from there while the version holds;
- a live sweep is analysed again as trials finish; a `Memo` keeps the last result per
  sweep in the process, served for `max_age` seconds even if trials finished meanwhile
  (the dashboard's panel polls: 50,000 trials cost a few seconds of analysis each time).
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from typing import Any

from core.analysis.pareto import front_rows
from core.analysis.report import ANALYSIS_VERSION, Importance, analyse
from core.analysis.rows import FIELDS
from core.spec.objectives import Goals
from core.states import TrialState
from core.store.roles import Reads

#: The name of the stored analysis among the sweep's view snapshots.
SNAPSHOT = "analysis"


class Memo:
    """The latest analysis of each sweep in this process (at most `size` sweeps)."""

    def __init__(self, size: int = 32) -> None:
        self.size = size
        self._items: OrderedDict[str, tuple[str, float, dict[str, Any]]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, sweep_id: str, version: str, max_age: float = 0.0) -> dict[str, Any] | None:
        """The kept analysis if it is of `version`, or younger than `max_age` seconds."""
        with self._lock:
            item = self._items.get(sweep_id)
            if item is None:
                return None
            kept_version, at, value = item
            if kept_version == version or time.monotonic() - at < max_age:
                self._items.move_to_end(sweep_id)
                return value
            return None

    def put(self, sweep_id: str, version: str, value: dict[str, Any]) -> None:
        with self._lock:
            self._items[sweep_id] = (version, time.monotonic(), value)
            self._items.move_to_end(sweep_id)
            while len(self._items) > self.size:
                self._items.popitem(last=False)


def version_of(sweep: dict[str, Any], importance: Importance | None) -> str:
    """The version of the sweep an analysis is valid for (see the module doc)."""
    with_importance = "i" if importance is not None else "-"
    return f"{ANALYSIS_VERSION}:{int(sweep.get('counts_rev') or 0)}:{with_importance}"


def _live(sweep: dict[str, Any]) -> bool:
    counts = sweep.get("counts") or {}
    return counts.get(TrialState.QUEUED.value, 0) + counts.get(TrialState.RUNNING.value, 0) > 0


def sweep_analysis(
    reads: Reads,
    sweep_id: str,
    *,
    owner: str | None = None,
    importance: Importance | None = None,
    memo: Memo | None = None,
    max_age: float = 0.0,
) -> dict[str, Any]:
    """The analysis of sweep `sweep_id` (`core.analysis.report.analyse`) with its
    ``version``; `NotFound` if there is none or it is not `owner`'s (None: anyone's)."""
    sweep = reads.get_sweep(sweep_id, owner=owner)
    version = version_of(sweep, importance)
    live = _live(sweep)
    if memo is not None:
        kept = memo.get(sweep_id, version, max_age if live else 0.0)
        if kept is not None:
            return kept
    if not live:
        stored = reads.view_snapshot(sweep_id, SNAPSHOT)
        if stored is not None and stored[0] == version:
            value = json.loads(stored[1])
            if memo is not None:
                memo.put(sweep_id, version, value)
            return value
    docs, _ = reads.sweep_rows(sweep_id, FIELDS)
    value = analyse(sweep, docs, importance=importance)
    value["version"] = version
    if not live:
        data = json.dumps(value, separators=(",", ":"), allow_nan=False).encode()
        reads.keep_view_snapshot(sweep_id, SNAPSHOT, version, data)
    if memo is not None:
        memo.put(sweep_id, version, value)
    return value


#: What the front reads of each trial (`core.analysis.pareto.front_rows`).
FRONT_FIELDS = ("state", "objective", "objectives", "feasible", "params")


def sweep_front(
    reads: Reads,
    sweep_id: str,
    *,
    owner: str | None = None,
    reference: list[float] | None = None,
) -> dict[str, Any]:
    """The Pareto front of sweep `sweep_id`'s objectives (`core.analysis.pareto.front_rows`),
    with the sweep's ``counts_rev`` as ``version``; `NotFound` if there is none or it is not
    `owner`'s (None: anyone's). A single-objective sweep's front is its best trials."""
    sweep = reads.get_sweep(sweep_id, owner=owner)
    docs, _ = reads.sweep_rows(sweep_id, FRONT_FIELDS)
    value = front_rows(docs, Goals.of(sweep), reference)
    value["sweep_id"] = sweep_id
    value["version"] = int(sweep.get("counts_rev") or 0)
    return value
