"""``/api/v1/workers``: the Celery workers consuming this deployment's queue, from Celery's
control API (``inspect``), with their device and the trials they are running (one per
``workers.run_trial`` task, several per fused ``workers.run_group`` task).

One broadcast (``stats``) finds the workers; it waits `INSPECT_TIMEOUT` seconds for
replies, since it cannot know how many will come. The next two (``active``,
``active_queues``) are addressed to the workers found and return as soon as all answered.
A worker's device comes from its name: ``sweepstack worker --gpus`` names them
``gpu<N>-<pid>@host`` (device ``gpu:<N>``), CPU workers ``cpu-<pid>@host`` (``cpu``); names
given with ``--name`` end ``-gpu<N>@host`` with ``--gpus``; other names give null. Needs a
bearer token (worker names are host names).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from flask import Blueprint

from api.auth import require_token
from api.params import accept
from api.serialize import PREFIX
from web.context import context

INSPECT_TIMEOUT = 1.0
_GPU = re.compile(r"^gpu(\d+)[-@]|-gpu(\d+)@")
_CPU = re.compile(r"^cpu[-@]")

blueprint = Blueprint("workers", __name__, url_prefix=f"{PREFIX}/workers")
blueprint.before_request(require_token)


def device(name: str) -> str | None:
    """The device a worker trains on, from the name `sweepstack worker` gives it."""
    match = _GPU.search(name)
    if match:
        return f"gpu:{match.group(1) or match.group(2)}"
    return "cpu" if _CPU.match(name) else None


def _trial_ids(args: Any) -> list[str]:
    """The trial ids of a task: `workers.run_trial`'s one, `workers.run_group`'s list."""
    first = args[0] if isinstance(args, list | tuple) and args else None
    if isinstance(first, str):
        return [first]
    return [i for i in first if isinstance(i, str)] if isinstance(first, list) else []


def _task(info: dict[str, Any]) -> dict[str, Any]:
    started = info.get("time_start")
    return {
        "task": info.get("name"),
        "trial_ids": _trial_ids(info.get("args")),
        "task_id": info.get("id"),
        "started_at": datetime.fromtimestamp(started, UTC) if started else None,
        "pid": info.get("worker_pid"),
    }


def _worker(name: str, stats: dict[str, Any], active: list[Any], queues: list[Any]) -> dict:
    pool = stats.get("pool") or {}
    return {
        "name": name,
        "device": device(name),
        "pid": stats.get("pid"),
        "concurrency": pool.get("max-concurrency"),
        "queues": [q.get("name") for q in queues if isinstance(q, dict)],
        "active": [_task(t) for t in active if isinstance(t, dict)],
    }


@blueprint.get("")
def index() -> dict[str, Any]:
    """Online workers on this deployment's queue, each with device and running trials."""
    accept(())
    ctx = context()
    control = ctx.sender.control
    stats = control.inspect(timeout=INSPECT_TIMEOUT).stats() or {}
    active: dict[str, Any] = {}
    queues: dict[str, Any] = {}
    if stats:
        names = sorted(stats)
        inspect = control.inspect(destination=names, limit=len(names), timeout=INSPECT_TIMEOUT)
        active = inspect.active() or {}
        queues = inspect.active_queues() or {}
    workers = [
        _worker(name, stats[name], active.get(name) or [], queues.get(name) or [])
        for name in sorted(stats)
    ]
    mine = [w for w in workers if ctx.settings.queue in w["queues"]]
    return {"queue": ctx.settings.queue, "workers": mine}
