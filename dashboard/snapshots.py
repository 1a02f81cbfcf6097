"""A finished sweep's first page, kept in the store for the next server process.

A finished sweep's page is the same until a trial moves again, so `first_payload` stores
what `payloads.sweep_payload` answered (`Store.keep_view_snapshot`, compressed), under a
version made of the sweep's counts (`snapshot_version`), and serves it to a page opened
after a server start without reading the sweep's trials.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from core.reads import Reads
from dashboard import data
from dashboard.payloads import (
    PREPARED_SECONDS,
    DashboardState,
    aggregate_functions,
    sweep_payload,
)
from dashboard.table import SweepTable

#: Bump when what `sweep_payload` answers changes shape: stored snapshots then go stale.
SNAPSHOT_FORMAT = 3
SNAPSHOT_NAME = "sweep_page"


def snapshot_version(sweep: Mapping[str, Any]) -> str | None:
    """What a stored first payload of a finished sweep is valid for: the same counts,
    revision of the counts (moved by every transition), cancellation and format. None
    while a trial is queued or running: a live sweep's page changes every moment."""
    counts = sweep.get("counts") or {}
    if counts.get(data.QUEUED, 0) or counts.get(data.RUNNING, 0):
        return None
    parts = [
        SNAPSHOT_FORMAT,
        sweep.get("counts_rev", 0),
        data.to_ms(sweep.get("cancelled_at")),
        sweep.get("trial_count"),
        sorted(counts.items()),
    ]
    return json.dumps(parts, separators=(",", ":"))


def first_payload(
    state: DashboardState,
    reads: Reads,
    sweep_id: str,
    now: datetime,
    *,
    param: str | None = None,
    mode: str = "best",
) -> dict[str, Any]:
    """What a sweep page draws first (`sweep_payload`), for a page that just opened.

    A finished sweep's page is the same until a trial moves again, so it is stored
    (`Store.keep_view_snapshot`, compressed: ~0.3 MB at 50,000 trials) and the next
    server process to start serves it without reading the sweep's trials: its first
    open takes what a warm server takes. The table is then read on the page's first poll.
    """
    default = param is None and mode == "best"
    if default and state.tables.peek(sweep_id) is None:
        sweep = reads.get_sweep(sweep_id)
        version = snapshot_version(sweep)
        kept = reads.view_snapshot(sweep_id, SNAPSHOT_NAME) if version is not None else None
        if kept is not None and kept[0] == version:
            payload = json.loads(zlib.decompress(kept[1]))
            active = payload.pop("activity")
            payload["summary"] = {
                **data.summary(sweep["counts"], active, data.to_ms(now) or 0),
                "best": payload["summary"]["best"],
            }
            return payload
    table = state.tables.get(reads, sweep_id)
    prep, sweep, latest = table.prepared_sweep(PREPARED_SECONDS)
    payload = sweep_payload(state, reads, table, now, param=param, mode=mode)
    if default and latest and table.prepared_sweep(PREPARED_SECONDS)[0] is prep:
        _keep_snapshot(reads, table, sweep, payload)
    return payload


def _keep_snapshot(
    reads: Reads,
    table: SweepTable,
    sweep: Mapping[str, Any],
    payload: Mapping[str, Any],
) -> None:
    """Store the first payload of a finished sweep (made from the table's latest rows,
    read after `sweep`), unless a snapshot of this version is stored already."""
    version = snapshot_version(sweep)
    if version is None or table.memo_get("snapshot") == version:
        return
    kept = reads.view_snapshot(table.sweep_id, SNAPSHOT_NAME)
    if kept is None or kept[0] != version:
        # The summary is recomputed when served (its ETA and active time move with the
        # clock while trials are left): keep what it is computed from.
        active = table.memo(
            "activity", aggregate_functions(sweep)["activity"], PREPARED_SECONDS, versioned=False
        )[1]
        body = json.dumps({**payload, "activity": active}, separators=(",", ":"), allow_nan=False)
        reads.keep_view_snapshot(
            table.sweep_id, SNAPSHOT_NAME, version, zlib.compress(body.encode(), 1)
        )
    table.memo_set("snapshot", version)
