"""The trials table's routes: its pages, the comparison, downloads, and the owner's actions.

A blueprint nested in the dashboard's (`dashboard.blueprint.create_blueprint` mounts it),
so the dashboard's guard runs first (anonymous: 401) and its error handlers answer (one
JSON shape); each view then checks the sweep is the caller's (`own_sweep`: another
owner's is 404, as if missing; an admin may act on any).

- ``GET  /dashboard/data/sweeps/<id>/table``: a page of the table (`dashboard.trials`); a
  finished sweep's first page, on a server that has not read the sweep yet, comes from
  the store (`dashboard.snapshots.first_table_page`), as the figures do.
- ``GET  /dashboard/data/sweeps/<id>/compare?indexes=3,17``: 2 to 5 trials side by side.
- ``GET  /dashboard/data/sweeps/<id>/download?format=csv|jsonl&…``: the trials the
  table's filters select (all, without filters), as `core.store.export` writes them, read by
  index (`core.store.roles.Reads.trials_at`: a whole sweep about as fast as the API's paged
  export, a selection in a share of that time; by id it took ~2.5 ms a trial).
- ``POST /dashboard/data/sweeps/<id>/cancel`` and ``…/retry``: cancel the sweep; queue its
  failed (and stale) trials again and enqueue them.
- ``POST /dashboard/data/sweeps/<id>/pause``, ``…/resume`` and ``…/change`` (a JSON body
  such as ``{"trials": 60}``, `core.spec.changes`): pause the sweep (nothing new starts),
  resume it, change its spec (`core.store.changes`, as the API does; the changed spec
  within the server's trial limit).

The POSTs are safe from other sites as every dashboard write is: a browser's session
needs the page's CSRF token in ``X-CSRF-Token`` (`web.auth`), and the session cookie is
SameSite=Strict; a bearer token (which no other site can make a browser send) needs none.
Retrying sends messages, which is the scheduler's work: the composition hands the
scheduler's `retry_sweep` in as `retry` (the dashboard may not import the scheduler).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from celery import Celery
from flask import Blueprint, Response, request

from core.errors import Problem, SpecError
from core.settings import Settings
from core.spec.sweep import SweepSpec
from core.store import changes, export
from core.store.store import Store
from dashboard import compare, snapshots, trials
from dashboard.payloads import DashboardState
from dashboard.table import SweepTable
from web.context import context, error_response, identity

#: `scheduler.retry.retry_sweep`: (store, sender, settings, sweep id) -> counts.
RetrySweep = Callable[[Store, Celery, Settings, str], dict[str, int]]
FORMATS = {"csv": "text/csv", "jsonl": "application/x-ndjson"}


def _json(payload: Any) -> Response:
    body = json.dumps(payload, separators=(",", ":"), allow_nan=False)
    response = Response(body, mimetype="application/json")
    response.headers["Cache-Control"] = "no-store"
    return response


def _within(settings: Settings) -> Callable[[SweepSpec], None]:
    """The server's trial limit on a changed spec's budget (the API applies all of a
    submit's limits: `api.submission.check_limits`; a grid's count is the scheduler's)."""

    def check(spec: SweepSpec) -> None:
        most = min(spec.limits.max_trials, settings.api_max_trials)
        if (spec.search.trials or 0) > most:
            rule = f"must be <= {most:,} on this server, got {spec.search.trials:,}"
            raise SpecError([Problem("search.trials", rule)])

    return check


def trials_blueprint(
    own_sweep: Callable[[str], None],
    state: Callable[[], DashboardState],
    retry: RetrySweep | None = None,
) -> Blueprint:
    """The table's routes; `own_sweep` raises `NotFound` unless the caller may see the
    sweep, `state` is the dashboard's, `retry` the scheduler's (None: retry answers 503)."""
    bp = Blueprint("trials", __name__)

    @bp.app_context_processor
    def limits() -> dict[str, Any]:
        """The table's limits, for the sweep page's template (`trials_panel.html`)."""
        return {
            "trials_limits": {
                "page_sizes": list(trials.PAGE_SIZES),
                "page_size": trials.DEFAULT_PAGE_SIZE,
                "max_page_size": trials.MAX_PAGE_SIZE,
                "compare_min": compare.MIN_TRIALS,
                "compare_max": compare.MAX_TRIALS,
                "first_query": trials.FIRST_QUERY,
            }
        }

    def table_of(sweep_id: str) -> SweepTable:
        own_sweep(sweep_id)
        return state().tables.get(context().store.reads, sweep_id)

    def fresh(sweep_id: str) -> dict[str, Any]:
        """The sweep's counts after an action, its table read again at once."""
        reads = context().store.reads
        table = state().tables.get(reads, sweep_id)
        table.sync(reads, min_interval=0)
        table.prepared(0)  # the next page shows the change, not a snapshot from before
        return dict(table.sweep.get("counts") or {})

    @bp.get("/dashboard/data/sweeps/<sweep_id>/table")
    def table(sweep_id: str) -> Response:
        own_sweep(sweep_id)
        kept = snapshots.first_table_page(state(), context().store.reads, sweep_id, request.args)
        if kept is not None:
            return _json(kept)
        return _json(trials.table_payload(table_of(sweep_id), request.args))

    @bp.get("/dashboard/data/sweeps/<sweep_id>/compare")
    def compare_trials(sweep_id: str) -> Response:
        indexes = compare.parse_indexes(request.args.get("indexes", ""))
        sweep_table = table_of(sweep_id)
        return _json(compare.compare_payload(context().store.reads, sweep_table, indexes))

    @bp.get("/dashboard/data/sweeps/<sweep_id>/download")
    def download(sweep_id: str) -> Response:
        fmt = request.args.get("format", "csv")
        if fmt not in FORMATS:
            return error_response(
                400,
                "invalid_parameter",
                f"format: must be csv or jsonl, got {fmt[:20]!r}",
                {"parameter": "format"},
            )
        sweep_table = table_of(sweep_id)
        indexes, filtered = trials.selected_indexes(sweep_table, request.args, extra=("format",))
        reads = context().store.reads
        if fmt == "csv":
            body = export.csv_text(reads, reads.get_sweep(sweep_id), indexes)
        else:
            body = export.jsonl(reads, sweep_id, indexes)
        name = f"sweep-{sweep_id}{'-filtered' if filtered else ''}.{fmt}"
        headers = {
            "Content-Disposition": f'attachment; filename="{name}"',
            "Cache-Control": "no-store",
        }
        return Response(body, mimetype=FORMATS[fmt], headers=headers)

    @bp.post("/dashboard/data/sweeps/<sweep_id>/cancel")
    def cancel(sweep_id: str) -> Response:
        own_sweep(sweep_id)
        changed = context().store.admin.cancel_sweep(sweep_id)
        return _json({**changed, "counts": fresh(sweep_id)})

    def by() -> str | None:
        who = identity()
        return who.name if who is not None else None

    @bp.post("/dashboard/data/sweeps/<sweep_id>/pause")
    def pause(sweep_id: str) -> Response:
        own_sweep(sweep_id)
        done = changes.pause_sweep(context().store, sweep_id, owner=None, by=by())
        return _json({"changed": done["changed"], "counts": fresh(sweep_id)})

    @bp.post("/dashboard/data/sweeps/<sweep_id>/resume")
    def resume(sweep_id: str) -> Response:
        own_sweep(sweep_id)
        done = changes.resume_sweep(context().store, sweep_id, owner=None, by=by())
        return _json({"changed": done["changed"], "counts": fresh(sweep_id)})

    @bp.post("/dashboard/data/sweeps/<sweep_id>/change")
    def change(sweep_id: str) -> Response:
        own_sweep(sweep_id)
        body = request.get_json(silent=True)
        if not isinstance(body, dict):
            return error_response(400, "invalid_parameter",
                                  'body: must be a JSON object such as {"trials": 60}',
                                  {"parameter": "body"})  # fmt: skip
        services = context()
        done = changes.change_sweep(services.store, sweep_id, body, owner=None, by=by(),
                                    check=_within(services.settings))  # fmt: skip
        return _json({"summary": done["summary"], "counts": fresh(sweep_id)})

    @bp.post("/dashboard/data/sweeps/<sweep_id>/retry")
    def retry_failed(sweep_id: str) -> Response:
        own_sweep(sweep_id)
        services = context()
        if retry is None or services.sender is None:
            return error_response(
                503,
                "broker_unavailable",
                "retrying needs the broker: this dashboard has no SWEEPSTACK_BROKER_URL",
            )
        counts = retry(services.store, services.sender, services.settings, sweep_id)
        return _json({**counts, "counts": fresh(sweep_id)})

    return bp
