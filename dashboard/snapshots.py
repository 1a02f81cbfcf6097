"""A finished sweep's first page, kept in the store for the next server process.

A finished sweep's page is the same until a trial moves again, so `first_payload` stores
what `payloads.sweep_payload` answered (`Reads.keep_view_snapshot`, compressed), under a
version made of the sweep's counts (`snapshot_version`), and serves it to a page opened
after a server start without reading the sweep's trials. The first page of the trials
table (`trials.FIRST_QUERY`), which the sweep page asks for as soon as its figures' data
has come, is kept beside it (`first_table_page`): else that request would read the whole
sweep (~4 s of server and store CPU at 50,000 trials) while the browser draws, and on a
2-core machine the page took ~0.4-0.8 s longer to draw. The sweep is then read on the
page's first poll, after it is drawn.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs

from werkzeug.datastructures import MultiDict

from core.store.roles import Reads
from dashboard import data, trials
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
#: The first page of the trials table, kept under the same version.
TABLE_SNAPSHOT_NAME = "trials_first_page"
_FIRST_QUERY = parse_qs(trials.FIRST_QUERY)


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
    (`Reads.keep_view_snapshot`, compressed: ~0.3 MB at 50,000 trials) and the next
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


def first_table_page(
    state: DashboardState, reads: Reads, sweep_id: str, args: MultiDict
) -> dict[str, Any] | None:
    """The trials table's first page (`trials.table_payload` for `trials.FIRST_QUERY`) as
    stored for a finished sweep, for a server process that has not read the sweep yet;
    None for any other query, a sweep in memory, or one whose stored page is stale."""
    if args.to_dict(flat=False) != _FIRST_QUERY or state.tables.peek(sweep_id) is not None:
        return None
    version = snapshot_version(reads.get_sweep(sweep_id))
    kept = reads.view_snapshot(sweep_id, TABLE_SNAPSHOT_NAME) if version is not None else None
    if kept is None or kept[0] != version:
        return None
    return json.loads(zlib.decompress(kept[1]))


def _keep_snapshot(
    reads: Reads,
    table: SweepTable,
    sweep: Mapping[str, Any],
    payload: Mapping[str, Any],
) -> None:
    """Store the first payload of a finished sweep and its table's first page (made from
    the table's latest rows, read after `sweep`), unless stored already at this version."""
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
        _keep(reads, table.sweep_id, SNAPSHOT_NAME, version, {**payload, "activity": active})
    kept = reads.view_snapshot(table.sweep_id, TABLE_SNAPSHOT_NAME)
    if kept is None or kept[0] != version:
        page = trials.table_payload(table, MultiDict(_FIRST_QUERY))
        _keep(reads, table.sweep_id, TABLE_SNAPSHOT_NAME, version, page)
    table.memo_set("snapshot", version)


def _keep(reads: Reads, sweep_id: str, name: str, version: str, value: Any) -> None:
    body = json.dumps(value, separators=(",", ":"), allow_nan=False)
    reads.keep_view_snapshot(sweep_id, name, version, zlib.compress(body.encode(), 1))
