"""Store records → rows for one trial's page: its record, timings and per-epoch series."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from core.store.records import finite_number, flatten_params
from dashboard.data import pruned_stop, to_ms

#: Per-epoch values that are not curves of the model's quality.
# Not quality measures: drawn in "Time per epoch" (the last three by data-parallel trials).
# A Caffe trial's rows count evaluations as epochs and carry the solver's iteration.
_NOT_METRICS = frozenset(
    {
        "epoch",
        "iteration",
        "lr",
        "epoch_seconds",
        "train_seconds",
        "compute_seconds",
        "comm_seconds",
        "comm_bytes",
    }
)


def jsonable(value: Any) -> Any:
    """`value` with datetimes as ISO-8601 text and non-finite floats as None, for JSON."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, float):
        return finite_number(value)
    return value


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return round((end - start).total_seconds(), 3)


def timings(doc: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """When the trial was queued, started and finished, and how long it waited and ran.

    A running trial's ``run_seconds`` counts up to `now`; ``train_seconds`` is what the
    training loop measured (without data loading and the store's round trips).
    """
    queued, started, finished = doc.get("queued_at"), doc.get("started_at"), doc.get("finished_at")
    return {
        "queued_at": to_ms(queued),
        "started_at": to_ms(started),
        "finished_at": to_ms(finished),
        "heartbeat_at": to_ms(doc.get("heartbeat_at")),
        "wait_seconds": _seconds(queued, started),
        "run_seconds": _seconds(started, finished or (now if started else None)),
        "train_seconds": finite_number(doc.get("train_seconds")),
    }


def trial_detail(doc: Mapping[str, Any], sweep: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """What the trial page shows of a trial document (`Reads.get_trial`)."""
    worker = doc.get("worker") or {}
    return {
        "id": doc["_id"],
        "index": doc["index"],
        "sweep_id": doc["sweep_id"],
        "sweep_name": sweep.get("name"),
        "objective_metric": (sweep.get("objective") or {}).get("metric"),
        "direction": (sweep.get("objective") or {}).get("direction"),
        "state": doc.get("state"),
        "attempt": doc.get("attempt"),
        "params": jsonable(flatten_params(doc.get("params"))),
        "config": jsonable(doc.get("config") or {}),
        "seed": doc.get("seed"),
        "objective": finite_number(doc.get("objective")),
        "result": jsonable(doc.get("result")),
        "error": doc.get("error"),
        "worker": {key: worker.get(key) for key in ("host", "pid", "name")},
        "device": doc.get("device"),
        "device_info": jsonable(doc.get("device_info")),
        "dtype": doc.get("dtype"),
        "param_count": doc.get("param_count"),
        "layer_table": jsonable(doc.get("layer_table")),
        "versions": jsonable(doc.get("versions")),
        "progress": jsonable(doc.get("progress")),
        "pruned_epoch": pruned_stop(doc),
        "planned_epochs": ((doc.get("config") or {}).get("training") or {}).get("epochs"),
        "timings": timings(doc, now),
        "history": [
            {
                "attempt": h.get("attempt"),
                "state": h.get("state"),
                "worker": (h.get("worker") or {}).get("name"),
                "started_at": to_ms(h.get("started_at")),
                "finished_at": to_ms(h.get("finished_at")),
                "error": h.get("error"),
                "notes": attempt_notes(doc, h.get("attempt")),
            }
            for h in doc.get("history") or []
        ],
    }


def attempt_notes(doc: Mapping[str, Any], attempt: Any) -> list[str]:
    """What the trial's record says of how an attempt ran: where it resumed from
    (``resumed``, `core.store.lifecycle`) and its notes (a checkpoint it could not use)."""
    out = [
        f"resumed after epoch {r.get('epoch')} from attempt {r.get('from_attempt')}'s checkpoint"
        for r in doc.get("resumed") or []
        if r.get("attempt") == attempt
    ]
    out += [str(n.get("text", "")) for n in doc.get("notes") or [] if n.get("attempt") == attempt]
    return out


def epoch_series(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The latest attempt's per-epoch metrics as series: one list per metric, by epoch.

    ``losses`` names the loss-like series (``loss``, ``rmse`` in the name) and
    ``metrics`` the other quality measures; ``epoch_seconds``, ``lr`` and a data-parallel
    trial's ``compute_seconds``, ``comm_seconds`` and ``comm_bytes`` are kept in ``values``
    but in neither list. ``last`` is the (attempt, epoch) of the last row.
    """
    rows = list(rows)
    attempt = max((r["attempt"] for r in rows), default=0)
    mine = sorted((r for r in rows if r["attempt"] == attempt), key=lambda r: r["epoch"])
    names: dict[str, None] = {}
    for row in mine:
        for name in row.get("metrics") or {}:
            names.setdefault(name, None)
    values = {
        name: [finite_number((r.get("metrics") or {}).get(name)) for r in mine] for name in names
    }
    quality = [n for n in names if n not in _NOT_METRICS]
    return {
        "attempt": attempt,
        "epochs": [r["epoch"] for r in mine],
        "values": values,
        "losses": [n for n in quality if "loss" in n or "rmse" in n],
        "metrics": [n for n in quality if "loss" not in n and "rmse" not in n],
        "last": [attempt, mine[-1]["epoch"]] if mine else [attempt, -1],
    }
