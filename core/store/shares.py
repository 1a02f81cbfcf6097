"""The shares role on MongoDB (`core.store.roles.Shares`): the active sweeps as the fair
share sees them, the users' settings and the workers online.

Collections: ``users`` (``_id`` the user's name: ``weight``, ``high_priority``, ``quotas``;
a user nobody set anything for has no document), and ``scheduling`` (one document,
``_id: "workers"``: ``count`` and ``at``, written by the schedulers when they ask the
workers). A sweep's ``priority`` and ``weight`` are fields of its own document, written at
submit (`scheduler.submit`) and by admins.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from core.errors import InvalidQuery, NotFound
from core.shares import DEFAULT_PRIORITY, Claim, Share, fair_shares
from core.states import TrialState
from core.store.query import check_id
from core.store.roles import Shares
from core.store.state import StoreState, available

__all__ = ["QUOTAS", "MongoShares", "claims", "current_shares", "running_quotas", "share_rows"]

_QUEUED = TrialState.QUEUED.value
_RUNNING = TrialState.RUNNING.value
#: The quotas a user may have: trials running at once, trials stored, sweeps active.
QUOTAS = ("running", "trials", "sweeps")
_FIELDS = {
    "paused_at": 1,
    "owner": 1,
    "priority": 1,
    "weight": 1,
    "counts": 1,
    "planned": 1,
    "trial_count": 1,
    "created_at": 1,
    "spec.search.parallelism": 1,
}


def _active(doc: Mapping[str, Any]) -> bool:
    counts = doc.get("counts") or {}
    return bool(doc.get("planned") or counts.get(_QUEUED) or counts.get(_RUNNING))


def claims(docs: list[dict[str, Any]], users: Mapping[str, Mapping[str, Any]]) -> list[Claim]:
    """The active sweeps (`Shares.active_sweeps`) as `core.shares.Claim`: demand is the
    trials in flight and planned (``counts.queued`` counts the planned ones), capped by
    ``search.parallelism``. A paused sweep starts nothing new: its demand is its trials
    running."""
    out = []
    for doc in docs:
        counts = doc.get("counts") or {}
        running = int(counts.get(_RUNNING) or 0)
        queued = 0 if doc.get("paused_at") is not None else int(counts.get(_QUEUED) or 0)
        demand = queued + running
        cap = ((doc.get("spec") or {}).get("search") or {}).get("parallelism")
        if isinstance(cap, int) and cap > 0:
            demand = min(demand, cap)
        owner = doc.get("owner") or ""
        out.append(Claim(
            sweep_id=doc["_id"],
            owner=owner,
            demand=max(demand, 0),
            running=max(running, 0),
            priority=doc.get("priority") or DEFAULT_PRIORITY,
            weight=float(doc.get("weight") or 1.0),
            user_weight=float((users.get(owner) or {}).get("weight") or 1.0),
            order=doc.get("created_at") or 0,
        ))  # fmt: skip
    return out


def check_weight(weight: Any) -> float:
    """A weight: a finite number > 0 (`InvalidQuery` naming ``weight`` otherwise)."""
    if isinstance(weight, bool) or not isinstance(weight, int | float):
        raise InvalidQuery("weight", f"must be a number > 0, got {weight!r}")
    if not math.isfinite(weight) or weight <= 0 or weight > 1e6:
        raise InvalidQuery("weight", f"must be > 0 and <= 1000000, got {weight!r}")
    return float(weight)


class MongoShares(Shares):
    """`Shares` on the store's shared state (`core.store.state`)."""

    def __init__(self, state: StoreState) -> None:
        self._s = state
        self._users = state.db["users"]
        self._scheduling = state.db["scheduling"]

    @available
    def active_sweeps(self, owner: str | None = None) -> list[dict[str, Any]]:
        query: dict[str, Any] = {"cancelled_at": None}
        if owner is not None:
            query["owner"] = check_id("owner", owner)
        return [doc for doc in self._s.sweeps.find(query, _FIELDS) if _active(doc)]

    @available
    def users(self) -> dict[str, dict[str, Any]]:
        return {doc.pop("_id"): doc for doc in self._users.find({})}

    @available
    def user(self, name: str) -> dict[str, Any]:
        doc = self._users.find_one({"_id": check_id("user", name)}) or {}
        doc.pop("_id", None)
        return doc

    @available
    def set_user(self, name: str, fields: Mapping[str, Any]) -> dict[str, Any]:
        check_id("user", name)
        update: dict[str, Any] = {}
        unset: dict[str, Any] = {}
        for key, value in fields.items():
            if key == "weight":
                update["weight"] = check_weight(value)
            elif key == "high_priority":
                if not isinstance(value, bool):
                    raise InvalidQuery("high_priority", f"must be true or false, got {value!r}")
                update["high_priority"] = value
            elif key == "quotas":
                if not isinstance(value, Mapping):
                    raise InvalidQuery("quotas", f"must be an object, got {value!r}")
                for quota, limit in value.items():
                    if quota not in QUOTAS:
                        raise InvalidQuery(
                            f"quotas.{quota}", f"is not a quota (known: {', '.join(QUOTAS)})"
                        )
                    if limit is None:
                        unset[f"quotas.{quota}"] = ""
                    elif isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
                        raise InvalidQuery(
                            f"quotas.{quota}", f"must be an integer > 0 or null, got {limit!r}"
                        )
                    else:
                        update[f"quotas.{quota}"] = limit
            else:
                raise InvalidQuery(key, "unknown field (known: weight, high_priority, quotas)")
        change: dict[str, Any] = {"$set": {**update, "updated_at": self._s.clock()}}
        if unset:
            change["$unset"] = unset
        self._users.update_one({"_id": name}, change, upsert=True)
        return self.user(name)

    @available
    def set_sweep(self, sweep_id: str, *, weight: float) -> None:
        check_id("sweep_id", sweep_id)
        found = self._s.sweeps.update_one(
            {"_id": sweep_id}, {"$set": {"weight": check_weight(weight)}}
        )
        if not found.matched_count:
            raise NotFound("sweep", sweep_id)

    @available
    def usage(self, owner: str) -> dict[str, int]:
        running = trials = sweeps = 0
        for doc in self._s.sweeps.find(
            {"owner": check_id("owner", owner)},
            {"counts": 1, "planned": 1, "trial_count": 1, "cancelled_at": 1},
        ):
            counts = doc.get("counts") or {}
            running += int(counts.get(_RUNNING) or 0)
            trials += int(doc.get("trial_count") or 0)
            if doc.get("cancelled_at") is None and _active(doc):
                sweeps += 1
        return {"running": running, "trials": trials, "sweeps": sweeps}

    @available
    def note_workers(self, count: int | None) -> None:
        self._scheduling.update_one(
            {"_id": "workers"}, {"$set": {"count": count, "at": self._s.clock()}}, upsert=True
        )

    @available
    def workers(self, max_age_seconds: float = 300.0) -> int | None:
        doc = self._scheduling.find_one({"_id": "workers"})
        if not doc or not doc.get("count"):
            return None
        if doc["at"] < self._s.clock() - timedelta(seconds=max_age_seconds):
            return None
        return int(doc["count"])


def running_quotas(
    users: Mapping[str, Mapping[str, Any]], owners: Iterable[str], default: int | None
) -> dict[str, int]:
    """Each owner's quota of trials running at once: an admin's setting, else `default`
    (None: no quota)."""
    out = {}
    for owner in owners:
        limit = ((users.get(owner) or {}).get("quotas") or {}).get("running", default)
        if limit is not None:
            out[owner] = int(limit)
    return out


def current_shares(
    shares: Shares,
    workers: int,
    default_running: int | None = None,
    extra: Sequence[Claim] = (),
) -> dict[str, Share]:
    """Every active sweep's fair share of `workers` now (`core.shares.fair_shares`), from
    what the store holds; `extra`: sweeps not stored yet (a submit's own)."""
    users = shares.users()
    found = [*claims(shares.active_sweeps(), users), *extra]
    quotas = running_quotas(users, {c.owner for c in found}, default_running)
    return fair_shares(found, workers, quotas)


def share_rows(
    shares: Shares, owner: str | None = None, default_running: int | None = None
) -> dict[str, Any]:
    """What the API (``GET /api/v1/shares``) and the dashboard's Sweeps page show of the
    fair share: ``workers`` (online, as a scheduler last counted them; None: unknown) and
    ``items``, the active sweeps (`owner`'s only, when given), each with ``share`` (its
    exact share of the workers now), ``slots`` (whole workers), ``window`` (trials in
    flight at most), ``position`` (its place in the line for the next free worker, 1 the
    next), ``priority``, ``weight`` and ``running``; in line order."""
    workers = shares.workers()
    users = shares.users()
    docs = shares.active_sweeps()
    found = claims(docs, users)
    quotas = running_quotas(users, {c.owner for c in found}, default_running)
    fair = fair_shares(found, workers, quotas) if workers else {}
    rows = []
    for doc in docs:
        if owner is not None and doc.get("owner") != owner:
            continue
        share = fair.get(doc["_id"])
        rows.append({
            "id": doc["_id"],
            "owner": doc.get("owner"),
            "priority": doc.get("priority") or DEFAULT_PRIORITY,
            "weight": float(doc.get("weight") or 1.0),
            "running": int((doc.get("counts") or {}).get(_RUNNING) or 0),
            "share": round(share.exact, 3) if share else None,
            "slots": share.slots if share else None,
            "window": share.window if share else None,
            "position": share.position if share and share.position else None,
        })  # fmt: skip
    rows.sort(key=lambda r: (r["position"] is None, r["position"] or 0, r["id"]))
    return {"workers": workers, "items": rows}
