"""What the API sends: store documents as JSON resources, and the JSON encoder for them.

Times are RFC 3339 strings in UTC (``2030-01-01T12:00:00.000Z``); non-finite floats (a NaN
loss) become null, so every body is valid JSON. Ids are ``id`` (never ``_id``); parameters
are flat dotted paths (``{"model.hidden_units": 64}``), as specs and the CLI write them.
"""

from __future__ import annotations

from typing import Any

from flask.json.provider import DefaultJSONProvider

from core.spec.search_settings import pruning_settings, search_settings
from core.store.export import plain
from core.store.records import flatten_params, sweep_status

PREFIX = "/api/v1"

#: The fields of a trial in lists; a single trial adds everything else it holds.
TRIAL_FIELDS = (
    "sweep_id", "key", "index", "state", "attempt", "seed", "objective", "result", "error",
    "progress", "worker", "stop_requested", "queued_at", "started_at", "heartbeat_at",
    "finished_at", "updated_at", "train_seconds", "param_count", "device", "dtype",
    "pruned_epoch", "objectives", "constraints", "feasible", "macs",
)  # fmt: skip


class JSONProvider(DefaultJSONProvider):
    """Flask's JSON provider, through `plain`, keeping key order, refusing NaN."""

    sort_keys = False

    def dumps(self, obj: Any, **kwargs: Any) -> str:
        kwargs.setdefault("allow_nan", False)
        return super().dumps(plain(obj), **kwargs)


def trial_view(doc: dict[str, Any], *, detail: bool = False) -> dict[str, Any]:
    """A trial: the list fields, or (with `detail`) every field it has."""
    out: dict[str, Any] = {"id": doc["_id"]}
    out.update({name: doc.get(name) for name in TRIAL_FIELDS})
    out["params"] = flatten_params(doc.get("params"))
    if detail:
        out.update({k: v for k, v in doc.items() if k not in out and k not in ("_id", "params")})
    return out


def sweep_links(sweep_id: str) -> dict[str, str]:
    """Where to find a sweep and what hangs off it."""
    base = f"{PREFIX}/sweeps/{sweep_id}"
    return {
        "self": base,
        "trials": f"{base}/trials",
        "export": f"{base}/export?format=csv",
        "cancel": f"{base}/cancel",
        "retry": f"{base}/retry",
        "models": f"{base}/models",
        "front": f"{base}/front",
    }


def sweep_view(doc: dict[str, Any]) -> dict[str, Any]:
    """A sweep in a list: what it is, whose, how it searches and prunes (`search`,
    `pruning`: ``grid`` and ``none`` for sweeps stored before those settings existed),
    and how far it got."""
    return {
        "id": doc["_id"],
        "name": doc.get("name"),
        "description": doc.get("description") or "",
        "owner": doc.get("owner"),
        "status": sweep_status(doc),
        "objective": doc.get("objective"),
        "objectives": doc.get("objectives") or [doc.get("objective")],
        "constraints": [c.get("text") for c in doc.get("constraints") or []],
        "trial_count": doc.get("trial_count", 0),
        "search": search_settings(doc),
        "pruning": pruning_settings(doc),
        "counts": doc["counts"],
        "created_at": doc.get("created_at"),
        "updated_at": doc.get("updated_at"),
        "cancelled_at": doc.get("cancelled_at"),
        "paused_at": doc.get("paused_at"),
        "links": sweep_links(doc["_id"]),
    }


def change_view(entry: dict[str, Any]) -> dict[str, Any]:
    """One entry of a sweep's history of pauses, resumes and spec changes."""
    return {k: entry.get(k) for k in ("at", "kind", "summary", "by", "rev")}


def sweep_detail(
    doc: dict[str, Any], best: dict[str, Any] | None, throughput: dict[str, Any]
) -> dict[str, Any]:
    """A sweep with its spec, best trial, throughput and ETA."""
    return {
        **sweep_view(doc),
        "spec": doc.get("spec", {}),
        "spec_rev": doc.get("spec_rev") or 0,
        "changes": [change_view(c) for c in doc.get("changes") or []],
        "best": trial_view(best) if best else None,
        "throughput": throughput,
    }
