"""Store records and Celery's replies → rows for the Workers page.

Two sources, because each knows what the other does not: Celery's remote control
(``inspect active`` and ``inspect stats``, with a short timeout) says which workers are
online now and what they run; the store says what each worker finished recently, on
which device, and when it was last heard of (claims, heartbeats, reports and finishes
all move a trial's ``updated_at``). Without a broker (no sender), the page shows what
the store saw, and says so.

A worker is *online* only while it was heard from lately (`ONLINE_SECONDS`): it answered
the inspect just now, or one of its trials moved in the store (a training trial beats
every few seconds). One that was heard from longer ago is shown as offline with when it
was last seen, never as "online" beside "last seen 3 min ago".
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from celery import Celery
from kombu.exceptions import OperationalError

from core.states import FINISH_STATES
from core.store.roles import Reads
from dashboard.data import RUNNING, to_ms

log = logging.getLogger(__name__)

#: Trial fields the Workers page reads of recent changes.
WORKER_FIELDS = ("state", "worker.name", "worker.host", "device", "finished_at")
_FINISHED = frozenset(s.value for s in FINISH_STATES)
#: A worker heard from within this many seconds is online (trials beat every 10 s).
ONLINE_SECONDS = 60
_TRIAL_ID = re.compile(r"[0-9a-f]{12}-[0-9a-f]{16}")


def _trial_ids(args: Any) -> list[str]:
    """The trial ids in a task's arguments (a list, or its text as older Celery sends)."""
    if isinstance(args, list | tuple):
        return [a for a in args if isinstance(a, str)]
    return _TRIAL_ID.findall(str(args))


def sweep_of(trial_id: str) -> str:
    """The sweep a trial id belongs to (``f"{sweep_id}-{point id}"``)."""
    return trial_id.partition("-")[0]


def inspect_workers(sender: Celery | None, timeout: float = 1.0) -> dict[str, Any]:
    """Ask the online workers what they run: ``{"workers": {name: info}, "error": text}``.

    ``workers`` is None when there is no sender (no broker configured). A broker that
    cannot be reached gives an empty ``workers`` and the reason in ``error``.
    """
    if sender is None:
        return {"workers": None, "error": None}
    try:
        inspector = sender.control.inspect(timeout=timeout)
        active = inspector.active() or {}
        stats = inspector.stats() or {}
    except (OSError, OperationalError) as exc:
        log.warning("inspecting workers failed: %s", exc)
        return {"workers": {}, "error": f"the broker did not answer: {exc}"}
    workers: dict[str, Any] = {}
    for name in set(active) | set(stats):
        tasks = active.get(name) or []
        info = stats.get(name) or {}
        pool = info.get("pool") or {}
        workers[name] = {
            "trials": [t for task in tasks for t in _trial_ids(task.get("args"))],
            "pid": info.get("pid"),
            "concurrency": pool.get("max-concurrency"),
        }
    return {"workers": workers, "error": None}


def recent_activity(
    reads: Reads, now: datetime, minutes: int = 10, max_sweeps: int = 20
) -> list[dict[str, Any]]:
    """Trials of the newest `max_sweeps` sweeps that changed in the last `minutes`."""
    since = now - timedelta(minutes=minutes)
    sweeps, _ = reads.list_sweeps(limit=max_sweeps)
    rows = []
    for sweep in sweeps:
        docs, _ = reads.changed_rows(sweep["_id"], since, WORKER_FIELDS)
        for doc in docs:
            worker = doc.get("worker") or {}
            rows.append({
                "id": doc["_id"],
                "sweep_id": sweep["_id"],
                "state": doc.get("state"),
                "worker": worker.get("name"),
                "host": worker.get("host"),
                "device": doc.get("device"),
                "finished_at": to_ms(doc.get("finished_at")),
                "updated_at": to_ms(doc.get("updated_at")),
            })
    return rows


def worker_rows(
    inspected: Mapping[str, Any] | None,
    activity: Iterable[Mapping[str, Any]],
    now_ms: int,
    minutes: int = 10,
) -> list[dict[str, Any]]:
    """One row per worker, online ones first: current trials and the sweeps they belong to
    (``sweeps``), device, trials per minute.

    `inspected` is `inspect_workers`' ``workers`` (None: no broker to ask). ``answered``:
    whether the worker answered it (None without a broker); ``last_activity``: the last
    change of one of its trials (ms); ``last_seen``: now if it answered, else its last
    activity; ``online``: whether it was last seen within `ONLINE_SECONDS`.
    """
    activity = list(activity)
    since = now_ms - minutes * 60_000
    names = set(inspected or {}) | {r["worker"] for r in activity if r["worker"]}
    rows = []
    for name in names:
        mine = [r for r in activity if r["worker"] == name]
        finished = sorted(
            (r for r in mine if r["state"] in _FINISHED and (r["finished_at"] or 0) >= since),
            key=lambda r: r["finished_at"],
        )
        live = (inspected or {}).get(name)
        running = [r["id"] for r in mine if r["state"] == RUNNING]
        devices = [r["device"] for r in finished if r["device"]]
        seen = [r["updated_at"] for r in mine if r["updated_at"]]
        active = max(seen) if seen else None
        last_seen = now_ms if live is not None else active
        rows.append({
            "name": name,
            "host": next((r["host"] for r in mine if r["host"]), name.partition("@")[2] or None),
            "online": last_seen is not None and now_ms - last_seen <= ONLINE_SECONDS * 1000,
            "answered": None if inspected is None else live is not None,
            "current": live["trials"] if live is not None else running,
            "sweeps": sorted({sweep_of(t) for t in (live["trials"] if live is not None
                                                      else running)}),
            "concurrency": live["concurrency"] if live is not None else None,
            "device": devices[-1] if devices else None,
            "finished": len(finished),
            "per_minute": round(len(finished) / minutes, 2),
            "last_seen": last_seen,
            "last_activity": active,
        })
    rows.sort(key=lambda r: (not r["online"], r["name"]))
    return rows
