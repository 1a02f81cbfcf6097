"""Who gets the workers: the fair share between sweeps (`core.shares`), priorities and
quotas, at the API.

- A submit (`check_submit`, from ``POST /api/v1/sweeps``) is refused, with nothing stored,
  when it asks for ``priority: high`` and its user is neither an admin
  (``SWEEPSTACK_ADMINS``) nor allowed it by one (403 ``priority_not_allowed``), or when it
  would pass one of its user's quotas (429 ``quota_exceeded``, naming the quota, its limit
  and the current use): ``sweeps`` (sweeps active at once) and ``trials`` (trials stored,
  the new sweep's included). The third quota, ``running`` (trials running at once), is
  not a refusal: the scheduler holds the user's share of the workers to it.
- ``GET /api/v1/shares``: the caller's active sweeps (an admin's: everyone's), each with its
  share of the workers now, its place in the line for the next free worker, its priority
  and weight; and the workers online as the schedulers last counted them.
- ``GET /api/v1/users/NAME`` (the user or an admin) and ``PUT /api/v1/users/NAME`` (admins):
  a user's weight in the fair share, allowance of high priority and quotas, with what the
  user uses now.
- ``PUT /api/v1/sweeps/ID/weight`` (admins): a sweep's weight among its owner's sweeps.

A quota or weight an admin set for a user wins over the deployment's default
(``SWEEPSTACK_QUOTA_RUNNING``, ``SWEEPSTACK_QUOTA_TRIALS``, ``SWEEPSTACK_QUOTA_SWEEPS``).
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, request

from api.auth import owner, require_token
from api.params import accept
from api.serialize import PREFIX
from core.errors import NotFound
from core.settings import Settings
from core.spec.sweep import SweepSpec
from core.store.shares import QUOTAS, share_rows
from core.store.store import Store
from scheduler.expand import check_count
from web.context import context, identity
from web.errors import ApiError

blueprint = Blueprint("shares", __name__, url_prefix=PREFIX)
blueprint.before_request(require_token)


def quota_limits(store: Store, settings: Settings, name: str) -> dict[str, int | None]:
    """A user's quotas: an admin's setting for the user, else the deployment's default."""
    own = store.shares.user(name).get("quotas") or {}
    defaults = {
        "running": settings.quota_running,
        "trials": settings.quota_trials,
        "sweeps": settings.quota_sweeps,
    }
    return {quota: own.get(quota, defaults[quota]) for quota in QUOTAS}


def may_ask_high(store: Store, name: str) -> bool:
    """Whether `name` may submit a high-priority sweep: an admin, or allowed by one."""
    who = identity()
    return bool(who is not None and who.admin) or bool(store.shares.user(name).get("high_priority"))


def check_submit(store: Store, settings: Settings, name: str, spec: SweepSpec) -> None:
    """403 or 429 (`ApiError`) where this submit may not go in (module docstring); nothing
    is stored either way."""
    if spec.priority == "high" and not may_ask_high(store, name):
        raise ApiError(
            403,
            "priority_not_allowed",
            "priority: high is for admins and users an admin allowed it; "
            f"{name!r} is neither (use normal or low)",
            {"field": "priority", "value": "high"},
        )
    limits = quota_limits(store, settings, name)
    if limits["sweeps"] is None and limits["trials"] is None:
        return
    used = store.shares.usage(name)
    trials = check_count(spec, min(spec.limits.max_trials, settings.api_max_trials))
    wanted = {"sweeps": used["sweeps"] + 1, "trials": used["trials"] + trials}
    for quota in ("sweeps", "trials"):
        limit = limits[quota]
        if limit is not None and wanted[quota] > limit:
            what = "sweeps active" if quota == "sweeps" else "trials stored"
            raise ApiError(
                429,
                "quota_exceeded",
                f"quota {quota} ({what}) of {name!r}: {used[quota]:,} used of {limit:,}; "
                f"this sweep would make it {wanted[quota]:,}",
                {"quota": quota, "limit": limit, "used": used[quota], "requested":
                 wanted[quota] - used[quota]},
            )  # fmt: skip


def _admin() -> None:
    who = identity()
    if who is None or not who.admin:
        raise ApiError(403, "admin_only", "only an admin (SWEEPSTACK_ADMINS) may do this")


@blueprint.get("/shares")
def shares() -> dict[str, Any]:
    """The caller's active sweeps with their share of the workers now (admins: all)."""
    accept(())
    ctx = context()
    who = identity()
    mine = None if who is not None and who.admin else owner()
    return share_rows(ctx.store.shares, mine, ctx.settings.quota_running)


@blueprint.get("/users/<name>")
def show_user(name: str) -> dict[str, Any]:
    """A user's weight, allowance and quotas, with the current use (the user or admins)."""
    accept(())
    who = identity()
    if name != owner() and not (who is not None and who.admin):
        raise NotFound("user", name)
    return _user_view(name)


@blueprint.put("/users/<name>")
def set_user(name: str) -> dict[str, Any]:
    """Set a user's ``weight``, ``high_priority`` or ``quotas`` (admins only)."""
    accept(())
    _admin()
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise ApiError(422, "invalid_body", "the body must be a JSON object")
    context().store.shares.set_user(name, body)
    return _user_view(name)


@blueprint.put("/sweeps/<sweep_id>/weight")
def set_sweep_weight(sweep_id: str) -> dict[str, Any]:
    """Set a sweep's weight among its owner's sweeps (admins only)."""
    accept(())
    _admin()
    body = request.get_json(silent=True)
    if not isinstance(body, dict) or set(body) != {"weight"}:
        raise ApiError(422, "invalid_body", 'the body must be {"weight": NUMBER}')
    context().store.shares.set_sweep(sweep_id, weight=body["weight"])
    return {"id": sweep_id, "weight": float(body["weight"])}


def _user_view(name: str) -> dict[str, Any]:
    ctx = context()
    own = ctx.store.shares.user(name)
    return {
        "name": name,
        "weight": float(own.get("weight") or 1.0),
        "high_priority": bool(own.get("high_priority")) or name in ctx.settings.admins,
        "quotas": quota_limits(ctx.store, ctx.settings, name),
        "used": ctx.store.shares.usage(name),
    }
