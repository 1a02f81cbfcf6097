"""Pause, resume and change a stored sweep: one call each for the API, the dashboard and
the CLI (over `core.store.roles.SweepAdmin`'s `pause_sweep`, `resume_sweep`, `change_spec`,
and `core.spec.changes` for what a change may be).

Each checks the owner first (`owner` None: the operator's CLI, any sweep), so another
user's sweep is the same `NotFound` as a missing one, and answers the sweep as it is now
with what happened (``changed``: False when the sweep already was paused, or not paused).
A spec change is refused with `SpecError` naming the field and the rule (nothing changes),
or `InvalidTransition` for a cancelled sweep or one changed meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from core.spec.changes import apply_change
from core.spec.sweep import SweepSpec, load_spec
from core.store.store import Store

__all__ = ["change_sweep", "pause_sweep", "resume_sweep"]


def pause_sweep(
    store: Store, sweep_id: str, *, owner: str | None, by: str | None
) -> dict[str, Any]:
    """Pause the sweep: nothing new starts; running trials finish."""
    return _switch(store, store.admin.pause_sweep, sweep_id, owner, by)


def resume_sweep(
    store: Store, sweep_id: str, *, owner: str | None, by: str | None
) -> dict[str, Any]:
    """Resume a paused sweep: its feeder sends the trials held meanwhile, then new ones."""
    return _switch(store, store.admin.resume_sweep, sweep_id, owner, by)


def _switch(
    store: Store, switch: Callable[..., bool], sweep_id: str, owner: str | None, by: str | None
) -> dict[str, Any]:
    """`switch` (pause or resume) on `owner`'s sweep (`NotFound` for another's): whether it
    changed anything, and the sweep after it."""
    store.reads.get_sweep(sweep_id, owner=owner)
    changed = switch(sweep_id, by=by)
    return {"changed": changed, "sweep": store.reads.get_sweep(sweep_id)}


def change_sweep(
    store: Store,
    sweep_id: str,
    change: Mapping[str, Any],
    *,
    owner: str | None,
    by: str | None,
    check: Callable[[SweepSpec], Any] | None = None,
) -> dict[str, Any]:
    """Make `change` to the sweep's spec (`core.spec.changes`); what changed, in words.
    `check` applies the caller's limits to the changed spec, as to a submit (the API's
    `api.submission.check_limits`), raising `SpecError`."""
    doc = store.reads.get_sweep(sweep_id, owner=owner)
    spec, summary = apply_change(doc["spec"], change)
    if check is not None:
        check(load_spec(spec))
    rev = store.admin.change_spec(sweep_id, int(doc.get("spec_rev") or 0), spec, summary, by=by)
    return {"changed": True, "summary": summary, "spec_rev": rev,
            "sweep": store.reads.get_sweep(sweep_id)}  # fmt: skip
