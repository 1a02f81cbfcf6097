"""``/api/v1/sweeps``: submit, list, show, cancel, pause, resume, change (more trials, more
values, a narrower range: `core.spec.changes`), retry, delete, page trials, export,
what a sweep found (``/analysis``: `core.analysis`), the Pareto front of its objectives
(``/front``: `core.analysis.pareto`; ``/trials?front=true`` pages the trials on it) and
the models it kept (``/models``, best first; each downloads from
``/api/v1/trials/{id}/model``).

Every route needs a bearer token, and a sweep is visible only to the name of the token
that submitted it: anyone else gets the same 404 as for a sweep that does not exist.

Submit and retry first check that the broker answers (503 if not, nothing changed). If the
broker fails part way through a submit's enqueueing, the sweep is cancelled
(`submit_sweep`): accepted whole or not at all.

Deleting is refused (409) while any trial is queued or running: a queued trial still has
a message on the broker. Cancel first (queued trials end ``cancelled`` at once, running
ones are asked to stop), then delete once the running ones have stopped.

Retry queues the sweep's ``failed`` trials again and requeues its stale ``running`` ones
(heartbeat older than ``SWEEPSTACK_STALE_AFTER_SECONDS``), then sends a message for each
(`scheduler.retry.retry_sweep`, which the dashboard's retry button runs too).
Should the broker fail between those two steps, the answer is 503 and those trials stay
queued without a message; nothing resends them yet (a known gap).
"""

from __future__ import annotations

import functools
from typing import Any
from urllib.parse import urlencode

from flask import Blueprint, Response, request

from api.auth import owner, require_token
from api.params import accept, choice, cursor, descending, page_limit, param_filters, single
from api.params import states as state_filter
from api.serialize import (
    PREFIX,
    TRIAL_FIELDS,
    sweep_detail,
    sweep_links,
    sweep_view,
    trial_view,
)
from api.shares import check_submit
from api.submission import check_limits, read_spec
from core.analysis import sweep_analysis
from core.analysis.pareto import read_reference
from core.analysis.sweep import sweep_front
from core.store import changes, export
from core.store.kept_models import model_entry
from scheduler.retry import broker_reachable, retry_sweep
from scheduler.submit import submit_sweep
from web.context import AppContext, context
from web.errors import bad_parameter

blueprint = Blueprint("sweeps", __name__, url_prefix=f"{PREFIX}/sweeps")
blueprint.before_request(require_token)


def page(items: list[dict[str, Any]], next_cursor: str | None) -> dict[str, Any]:
    """One page of a list, with the cursor and link of the next (None at the end)."""
    link = None
    if next_cursor is not None:
        args = [(k, v) for k, v in request.args.items(multi=True) if k != "cursor"]
        link = f"{request.path}?{urlencode([*args, ('cursor', next_cursor)])}"
    return {"items": items, "next_cursor": next_cursor, "links": {"next": link}}


def _broker_reachable(ctx: AppContext) -> None:
    """503 now, rather than after storing every trial, if the broker does not answer."""
    broker_reachable(ctx.sender, ctx.settings.api_timeout_seconds)


@blueprint.post("")
def create() -> tuple[dict[str, Any], int, dict[str, str]]:
    """Submit a spec (JSON or YAML): store the sweep and its trials, enqueue every trial."""
    accept(())
    ctx = context()
    spec = read_spec(ctx.settings)
    check_submit(ctx.store, ctx.settings, owner(), spec)
    _broker_reachable(ctx)
    sweep_id, count = submit_sweep(
        spec,
        ctx.store,
        ctx.sender,
        owner=owner(),
        window=ctx.settings.feed_window,
        quota_running=ctx.settings.quota_running,
    )
    body = {"id": sweep_id, "name": spec.name, "trials": count, "links": sweep_links(sweep_id)}
    return body, 201, {"Location": f"{PREFIX}/sweeps/{sweep_id}"}


@blueprint.get("")
def index() -> dict[str, Any]:
    """The caller's sweeps, newest first, a page at a time."""
    accept(("limit", "cursor"))
    ctx = context()
    limit = page_limit(ctx.settings)
    docs, nxt = ctx.store.reads.list_sweeps(owner=owner(), limit=limit, cursor=cursor())
    return page([sweep_view(doc) for doc in docs], nxt)


@blueprint.get("/<sweep_id>")
def show(sweep_id: str) -> dict[str, Any]:
    """A sweep: its spec, counts by state, best trial, throughput and ETA."""
    accept(())
    store = context().store
    doc = store.reads.get_sweep(sweep_id, owner=owner())
    best = store.reads.best(sweep_id, 1)
    return sweep_detail(doc, best[0] if best else None, store.reads.throughput(sweep_id))


@blueprint.post("/<sweep_id>/cancel")
def cancel(sweep_id: str) -> dict[str, Any]:
    """Cancel: queued trials end cancelled, running ones are asked to stop (idempotent)."""
    accept(())
    store = context().store
    store.reads.get_sweep(sweep_id, owner=owner())
    changed = store.admin.cancel_sweep(sweep_id)
    return {**changed, "sweep": sweep_view(store.reads.get_sweep(sweep_id))}


@blueprint.post("/<sweep_id>/pause")
def pause(sweep_id: str) -> dict[str, Any]:
    """Pause: nothing new starts, running trials finish (idempotent: ``changed`` false)."""
    accept(())
    done = changes.pause_sweep(context().store, sweep_id, owner=owner(), by=owner())
    return {"changed": done["changed"], "sweep": sweep_view(done["sweep"])}


@blueprint.post("/<sweep_id>/resume")
def resume(sweep_id: str) -> dict[str, Any]:
    """Resume a paused sweep (idempotent: ``changed`` false when it was not paused)."""
    accept(())
    done = changes.resume_sweep(context().store, sweep_id, owner=owner(), by=owner())
    return {"changed": done["changed"], "sweep": sweep_view(done["sweep"])}


@blueprint.post("/<sweep_id>/change")
def change(sweep_id: str) -> dict[str, Any]:
    """Change a sweep's spec: more trials, values added, a range narrowed
    (`core.spec.changes`); 422 naming the field and rule, 409 if cancelled."""
    accept(())
    ctx = context()
    ctx.store.reads.get_sweep(sweep_id, owner=owner())
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise bad_parameter("body", 'must be a JSON object such as {"trials": 60}')
    check = functools.partial(check_limits, settings=ctx.settings)
    done = changes.change_sweep(ctx.store, sweep_id, body, owner=owner(), by=owner(), check=check)
    return {"summary": done["summary"], "spec_rev": done["spec_rev"],
            "sweep": sweep_view(done["sweep"])}  # fmt: skip


@blueprint.post("/<sweep_id>/retry")
def retry(sweep_id: str) -> dict[str, Any]:
    """Queue failed and stale trials again and enqueue them; 409 if the sweep is cancelled."""
    accept(())
    ctx = context()
    ctx.store.reads.get_sweep(sweep_id, owner=owner())
    body = retry_sweep(ctx.store, ctx.sender, ctx.settings, sweep_id)
    return {**body, "sweep": sweep_view(ctx.store.reads.get_sweep(sweep_id))}


@blueprint.delete("/<sweep_id>")
def delete(sweep_id: str) -> dict[str, Any]:
    """Remove a sweep with its trials and metrics; 409 while any trial is queued or running."""
    accept(())
    removed = context().store.admin.delete_sweep(sweep_id, owner=owner())
    return {"id": sweep_id, "deleted": True, **removed}


@blueprint.get("/<sweep_id>/trials")
def trials(sweep_id: str) -> dict[str, Any]:
    """A page of the sweep's trials, filtered by state and parameters, in any order; with
    ``front=true``, the trials on the Pareto front, by the first objective, on one page."""
    accept(("state", "param", "sort", "order", "limit", "cursor", "front"))
    ctx = context()
    ctx.store.reads.get_sweep(sweep_id, owner=owner())
    if choice("front", ("true", "false"), "false") == "true":
        ids = [t["id"] for t in sweep_front(ctx.store.reads, sweep_id)["trials"]]
        found = ctx.store.reads.trials_by_id(ids, ["_id", *TRIAL_FIELDS, "params"])
        return page([trial_view(found[t]) for t in ids], None)
    docs, nxt = ctx.store.reads.trials(
        sweep_id,
        state=state_filter(),
        params=param_filters(),
        sort=single("sort") or "index",
        descending=descending(),
        limit=page_limit(ctx.settings),
        cursor=cursor(),
    )
    return page([trial_view(doc) for doc in docs], nxt)


@blueprint.get("/<sweep_id>/export")
def export_trials(sweep_id: str) -> Response:
    """Every trial of the sweep as CSV or JSON Lines, streamed."""
    accept(("format",))
    fmt = choice("format", ("csv", "jsonl"), "csv")
    store = context().store
    sweep = store.reads.get_sweep(sweep_id, owner=owner())
    if fmt == "csv":
        body, mimetype = export.csv_text(store.reads, sweep), "text/csv"
    else:
        body, mimetype = export.jsonl(store.reads, sweep_id), "application/x-ndjson"
    filename = f"sweep-{sweep_id}.{fmt}"
    headers = {"Content-Disposition": f'attachment; filename="{filename}"'}
    return Response(body, mimetype=mimetype, headers=headers)


#: The most kept models `models` lists (a sweep keeps at most `top_k`, itself at most
#: 1,000, unless its spec asks for ``keep: all``).
MAX_MODELS = 1000


@blueprint.get("/<sweep_id>/models")
def models(sweep_id: str) -> dict[str, Any]:
    """The sweep's kept models, best objective first, each with its download link."""
    accept(())
    store = context().store
    sweep = store.reads.get_sweep(sweep_id, owner=owner())
    docs = store.artifacts.models(sweep_id, sweep["objective"]["direction"])
    items = [
        {**model_entry(doc), "links": {"download": f"{PREFIX}/trials/{doc['trial_id']}/model"}}
        for doc in docs[:MAX_MODELS]
    ]
    return {"items": items, "total": len(docs)}


@blueprint.get("/<sweep_id>/front")
def front(sweep_id: str) -> dict[str, Any]:
    """The Pareto front of the sweep's objectives (feasible complete trials only) and the
    hypervolume it dominates up to ``reference`` (default: `core.analysis.pareto`)."""
    accept(("reference",))
    store = context().store
    sweep = store.reads.get_sweep(sweep_id, owner=owner())
    reference = _reference(len(sweep.get("objectives") or [sweep.get("objective")]))
    return sweep_front(store.reads, sweep_id, reference=reference)


def _reference(count: int) -> list[float] | None:
    """``reference``: one finite number per objective, comma-separated; 400 otherwise."""
    raw = single("reference")
    if raw is None:
        return None
    try:
        return read_reference(raw, count)
    except ValueError as exc:
        raise bad_parameter("reference", str(exc)) from None


@blueprint.get("/<sweep_id>/analysis")
def analysis(sweep_id: str) -> dict[str, Any]:
    """What the sweep found: plateaus, cost laws, importance and the accuracy-cost front."""
    accept(())
    ctx = context()
    return sweep_analysis(ctx.store.reads, sweep_id, owner=owner(), importance=ctx.importance,
                          memo=ctx.analyses)  # fmt: skip
