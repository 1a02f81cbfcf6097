"""The dashboard's Flask blueprint: four pages, their JSON, and plotly.js from the package.

Pages: ``/`` (sweeps, a page at a time), ``/sweeps/<id>``, ``/trials/<id>``,
``/workers``; ``/trials/<id>/model`` downloads a trial's kept model (`dashboard.models`),
behind the same login as its page. Their data is under ``/dashboard/data/…`` and their
files under ``/dashboard/static/…``; plotly.js is served from the installed ``plotly``
package at ``/dashboard/plotly.min.js`` (gzipped where accepted: `dashboard.plotlyjs`), so
pages need no network beyond this server; the states' colours are a stylesheet,
``/dashboard/states.css`` (`STATES_CSS`). Each view parses its arguments, calls `payloads`,
and answers; data errors get the one JSON shape of the API (``{"code", "message",
"details"}``), pages an HTML page with the same status.
The sweep page's trials table has its routes in a nested blueprint (`trial_routes`), under
the same guard and error handlers.

Who may see what (`_guard`, before every view but the static files): an anonymous
request for a page is sent to ``/login``, one for data answered 401; a logged-in owner
sees their own sweeps and trials, and another owner's are 404, as if missing; an admin
sees all. The caller comes from `web.context.identity`, which the composition's auth
layer (`web.auth`) sets; the shared context (`web.context.AppContext`: settings,
store, sender) from `web.context.context`. The blueprint keeps its own state (the
sweep tables) in ``current_app.extensions["sweepstack.dashboard"]``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from datetime import UTC, datetime
from typing import Any

import plotly
from flask import (
    Blueprint,
    Response,
    current_app,
    redirect,
    render_template,
    request,
    url_for,
)
from flask.blueprints import BlueprintSetupState

from core.errors import InvalidQuery, NoModel, NotFound, StoreUnavailable
from core.store.kept_models import kept_model
from core.store.shares import share_rows
from dashboard import models, payloads, plotlyjs, snapshots
from dashboard.analysis import panel_payload
from dashboard.figures import STATE_COLOURS
from dashboard.payloads import DashboardState
from dashboard.trial_routes import RetrySweep, trials_blueprint
from web.context import AppContext, Identity, context, error_response, identity
from web.downloads import model_response

log = logging.getLogger(__name__)

STATE_KEY = "sweepstack.dashboard"


#: Sweeps per page of the Sweeps page.
SWEEPS_PAGE = 50
#: Paths open to anonymous requests (the files pages load; they hold no data).
_OPEN_PREFIXES = ("/dashboard/static/", "/dashboard/plotly.min.js", "/dashboard/states.css")
#: The trial states' colours as CSS variables (``--complete: #27ae60``), which the pages'
#: stylesheets use: a stylesheet served from `STATE_COLOURS` rather than an inline
#: ``<style>``, which the CSP's style-src refuses (`web.headers`). Its URL carries
#: `STATES_VERSION`, so browsers may keep it as long as plotly.js.
STATES_CSS = ":root { " + " ".join(f"--{s}: {c};" for s, c in STATE_COLOURS.items()) + " }\n"
STATES_VERSION = hashlib.sha256(STATES_CSS.encode()).hexdigest()[:12]


def _services() -> AppContext:
    return context()


def _owner() -> str | None:
    """The owner whose sweeps this request may read; None for an admin (`_guard` ran)."""
    who = identity()
    assert who is not None, "_guard runs before every data view"
    return who.owner_filter


def _guard() -> Response | None:
    """Anonymous: pages go to the login form, data gets 401."""
    if identity() is not None or request.path.startswith(_OPEN_PREFIXES):
        return None
    if request.path.startswith("/dashboard/data/"):
        return error_response(401, "unauthorized", "log in first (POST /login) or send a "
                              "bearer token")
    return redirect(url_for("auth.login_form", next=request.full_path.rstrip("?")), 302)


def _shares() -> dict[str, Any]:
    """The fair share of the caller's active sweeps (an admin's: all) now."""
    services = _services()
    return share_rows(services.store.shares, _owner(), services.settings.quota_running)


def _own_sweep(sweep_id: str) -> None:
    """`NotFound` unless the caller may read sweep `sweep_id` (admins may read all)."""
    owner = _owner()
    if owner is None:
        return
    table = _state().tables.peek(sweep_id)
    if table is not None:
        if table.sweep.get("owner") != owner:
            raise NotFound("sweep", sweep_id)
        return
    _services().store.reads.get_sweep(sweep_id, owner=owner)


def _state() -> DashboardState:
    return current_app.extensions[STATE_KEY]


def _now() -> datetime:
    return datetime.now(UTC)


def _json(payload: Any, status: int = 200) -> Response:
    body = json.dumps(payload, separators=(",", ":"), allow_nan=False)
    response = Response(body, status=status, mimetype="application/json")
    response.headers["Cache-Control"] = "no-store"
    return response


#: The largest integer a query argument may be: what a MongoDB (BSON) integer holds.
MAX_INT_ARG = 2**63 - 1


def _int_arg(name: str, default: int | None = None, low: int = 0) -> int:
    raw = request.args.get(name)
    if raw is None or raw == "":
        if default is None:
            raise InvalidQuery(name, "is required")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidQuery(name, f"must be an integer, got {raw!r}") from None
    if not low <= value <= MAX_INT_ARG:
        raise InvalidQuery(name, f"must be an integer from {low} to {MAX_INT_ARG}, got {raw}")
    return value


def _error(status: int, code: str, message: str, details: dict[str, Any] | None = None
           ) -> Response | tuple[str, int]:
    if request.path.startswith("/dashboard/data/"):
        return error_response(status, code, message, details)
    return render_template("dashboard/error.html", status=status, message=message,
                           **_page_context()), status


def _page_context() -> dict[str, Any]:
    who: Identity | None = identity()
    return {
        "viewer": who,
        "flower_url": _services().settings.flower_url,
        "states_version": STATES_VERSION,
        "plotly_version": plotly.__version__,
    }


def _setup(state: BlueprintSetupState) -> None:
    state.app.extensions.setdefault(STATE_KEY, DashboardState())
    plotlyjs.start_gzip()


def create_blueprint(retry: RetrySweep | None = None) -> Blueprint:
    """The dashboard blueprint (pages at ``/``), ready for ``app.register_blueprint``;
    `retry` is the scheduler's `retry_sweep`, for the trials table's retry button."""
    bp = Blueprint(
        "dashboard",
        __name__,
        url_prefix="/",
        template_folder="templates",
        static_folder="static",
        static_url_path="/dashboard/static",
    )
    bp.record_once(_setup)
    bp.before_request(_guard)
    bp.register_blueprint(trials_blueprint(_own_sweep, _state, retry))

    @bp.errorhandler(NotFound)
    def not_found(exc: NotFound) -> Any:
        data = request.path.startswith("/dashboard/data/")
        message = f"no {exc.kind} {exc.ident}" if data else str(exc)
        return _error(404, "not_found", message, {"kind": exc.kind})

    @bp.errorhandler(NoModel)
    def no_model(exc: NoModel) -> Any:
        return _error(404, "not_found", str(exc), {"kind": "model", "reason": exc.reason})

    @bp.errorhandler(InvalidQuery)
    def invalid(exc: InvalidQuery) -> Any:
        return _error(400, "invalid_parameter", str(exc), {"parameter": exc.field})

    @bp.errorhandler(StoreUnavailable)
    def unavailable(exc: StoreUnavailable) -> Any:
        log.warning("dashboard: %s", exc)
        return _error(503, "store_unavailable", "the store is not reachable; retrying")

    # -- pages -------------------------------------------------------------------------

    @bp.get("/")
    def sweeps() -> str:
        cursor = request.args.get("cursor") or None
        initial = payloads.sweeps_payload(_state(), _services().store.reads, _now(), owner=_owner(),
                                          cursor=cursor, limit=SWEEPS_PAGE, shares=_shares())
        return render_template("dashboard/sweeps.html", initial=initial, cursor=cursor,
                               **_page_context())

    @bp.get("/sweeps/<sweep_id>")
    def sweep(sweep_id: str) -> str:
        doc = _services().store.reads.get_sweep(sweep_id, owner=_owner())
        return render_template("dashboard/sweep.html", sweep=payloads.sweep_meta(doc),
                               spec=doc.get("spec") or {}, **_page_context())

    @bp.get("/trials/<trial_id>")
    def trial(trial_id: str) -> str:
        initial = payloads.trial_payload(_services().store.reads, trial_id, _now(), owner=_owner())
        initial["model"] = _model_info(trial_id)
        return render_template("dashboard/trial.html", initial=initial, **_page_context())

    @bp.get("/trials/<trial_id>/model")
    def trial_model(trial_id: str) -> Response:
        services = _services()
        settings = services.settings
        doc = kept_model(services.store.reads, services.store.artifacts, trial_id,
                         owner=_owner(), default_keep=settings.artifacts_keep,
                         default_top_k=settings.artifacts_top_k)  # fmt: skip
        return model_response(services.store.artifacts, doc)

    @bp.get("/sweeps/<sweep_id>/trials/<int:index>")
    def trial_by_index(sweep_id: str, index: int) -> Response:
        _own_sweep(sweep_id)
        table = _state().tables.get(_services().store.reads, sweep_id)
        row = table.rows.get(index)
        if row is None:
            raise NotFound("trial", f"{sweep_id} #{index}")
        return redirect(url_for("dashboard.trial", trial_id=row["id"]))

    @bp.get("/workers")
    def workers() -> str:
        return render_template("dashboard/workers.html", **_page_context())

    @bp.get("/dashboard/plotly.min.js")
    def plotly_js() -> Response:
        return plotlyjs.response(request)

    @bp.get("/dashboard/states.css")
    def states_css() -> Response:
        response = Response(STATES_CSS, mimetype="text/css")
        response.cache_control.public = True
        response.cache_control.max_age = plotlyjs.MAX_AGE
        return response

    # -- data --------------------------------------------------------------------------

    @bp.get("/dashboard/data/sweeps")
    def sweeps_data() -> Response:
        since = request.args.get("since")
        since_ms = _int_arg("since") if since else None
        return _json(payloads.sweeps_payload(
            _state(), _services().store.reads, _now(), since_ms, owner=_owner(),
            cursor=request.args.get("cursor") or None, limit=SWEEPS_PAGE, shares=_shares()))

    @bp.get("/dashboard/data/sweeps/<sweep_id>")
    def sweep_data(sweep_id: str) -> Response:
        _own_sweep(sweep_id)
        mode = request.args.get("mode", "best")
        if mode not in ("best", "recent"):
            raise InvalidQuery("mode", f"must be best or recent, got {mode!r}")
        payload = snapshots.first_payload(_state(), _services().store.reads, sweep_id, _now(),
                                          param=request.args.get("param"), mode=mode)
        payload["models"] = models.kept_ids(_services().store.artifacts, payload["top"])
        return _json(payload)

    @bp.get("/dashboard/data/sweeps/<sweep_id>/summary")
    def sweep_summary(sweep_id: str) -> Response:
        _own_sweep(sweep_id)
        table = _state().tables.get(_services().store.reads, sweep_id)
        return _json(payloads.sweep_summary(table, _now()))

    @bp.get("/dashboard/data/sweeps/<sweep_id>/changes")
    def sweep_changes(sweep_id: str) -> Response:
        _own_sweep(sweep_id)
        table = _state().tables.get(_services().store.reads, sweep_id)
        versions = {name: request.args.get(name, "") for name in payloads.AGGREGATES}
        changes = payloads.sweep_changes(table, _now(), _int_arg("since"), versions)
        if "top" in changes:  # which of them have a model changes only with them
            changes["models"] = models.kept_ids(_services().store.artifacts, changes["top"])
        return _json(changes)

    @bp.get("/dashboard/data/sweeps/<sweep_id>/scatter")
    def sweep_scatter(sweep_id: str) -> Response:
        return _json(_partial(sweep_id, "scatter"))

    @bp.get("/dashboard/data/sweeps/<sweep_id>/parallel")
    def sweep_parallel(sweep_id: str) -> Response:
        return _json(_partial(sweep_id, "parallel"))

    @bp.get("/dashboard/data/sweeps/<sweep_id>/front")
    def sweep_front(sweep_id: str) -> Response:
        _own_sweep(sweep_id)
        table = _state().tables.get(_services().store.reads, sweep_id)
        return _json(payloads.front_payload(table, request.args))

    @bp.get("/dashboard/data/sweeps/<sweep_id>/analysis")
    def sweep_analysis(sweep_id: str) -> Response:
        _own_sweep(sweep_id)
        return _json(panel_payload(_services(), sweep_id, request.args.get("version")))

    @bp.get("/dashboard/data/sweeps/<sweep_id>/curves")
    def sweep_curves(sweep_id: str) -> Response:
        raw = request.args.get("indexes", "")
        try:
            indexes = [int(i) for i in raw.split(",") if i][: payloads.TOP_N]
        except ValueError:
            raise InvalidQuery(
                "indexes", f"must be trial indexes, comma-separated, got {raw!r}"
            ) from None
        _own_sweep(sweep_id)
        reads = _services().store.reads
        table = _state().tables.get(reads, sweep_id)
        return _json(payloads.curves_payload(_state(), reads, table, indexes))

    @bp.get("/dashboard/data/trials/<trial_id>")
    def trial_data(trial_id: str) -> Response:
        reads = _services().store.reads
        if request.args.get("attempt") is None:
            payload = payloads.trial_payload(reads, trial_id, _now(), owner=_owner())
        else:
            payload = payloads.trial_changes(reads, trial_id, _now(), _int_arg("attempt"),
                                             _int_arg("epoch", -1, low=-1), owner=_owner())
        payload["model"] = _model_info(trial_id)
        return _json(payload)

    @bp.get("/dashboard/data/workers")
    def workers_data() -> Response:
        services = _services()
        return _json(payloads.workers_payload(
            _state(), services.store.reads, services.sender, _now(), services.settings.flower_url,
        ))

    return bp


def _model_info(trial_id: str) -> dict[str, Any] | None:
    """The trial's kept model for its page (`dashboard.models.model_info`), once the
    caller's right to the trial was checked."""
    url = url_for("dashboard.trial_model", trial_id=trial_id)
    return models.model_info(_services().store.artifacts, trial_id, url)


def _partial(sweep_id: str, which: str) -> dict[str, Any]:
    """One figure of the sweep page again, for another parameter or parallel mode."""
    _own_sweep(sweep_id)
    table = _state().tables.get(_services().store.reads, sweep_id)
    mode = request.args.get("mode", "best")
    if mode not in ("best", "recent"):
        raise InvalidQuery("mode", f"must be best or recent, got {mode!r}")
    return payloads.figure_payload(table, which, param=request.args.get("param"), mode=mode)
