"""The dashboard's Flask blueprint: four pages, their JSON, and plotly.js from the package.

Pages: ``/`` (sweeps), ``/sweeps/<id>``, ``/trials/<id>``, ``/workers``. Their data is
under ``/dashboard/data/…`` and their files under ``/dashboard/static/…``; plotly.js is
served from the installed ``plotly`` package at ``/dashboard/plotly.min.js``, so pages
need no network beyond this server. Each view parses its arguments, calls `payloads`,
and answers; errors get one JSON shape (``{"error": {"code", "message"}}``) or an HTML
page with the same status.

The blueprint reads shared services from ``current_app.extensions["sweepstack"]`` (an
object with ``settings``, ``store`` and ``sender``), which `api.create_app` and
`dashboard.app.create_dashboard_app` both set, and keeps its own state (the sweep
tables) in ``current_app.extensions["sweepstack.dashboard"]``.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from importlib import resources
from typing import Any

import plotly
from flask import (
    Blueprint,
    Response,
    current_app,
    redirect,
    render_template,
    request,
    send_file,
    url_for,
)
from flask.blueprints import BlueprintSetupState

from core.errors import InvalidQuery, NotFound, StoreUnavailable
from dashboard import payloads
from dashboard.figures import STATE_COLOURS
from dashboard.payloads import DashboardState

log = logging.getLogger(__name__)

STATE_KEY = "sweepstack.dashboard"
PLOTLY_JS = resources.files("plotly") / "package_data" / "plotly.min.js"


def _services() -> Any:
    return current_app.extensions["sweepstack"]


def _state() -> DashboardState:
    return current_app.extensions[STATE_KEY]


def _now() -> datetime:
    return datetime.now(UTC)


def _json(payload: Any, status: int = 200) -> Response:
    body = json.dumps(payload, separators=(",", ":"), allow_nan=False)
    response = Response(body, status=status, mimetype="application/json")
    response.headers["Cache-Control"] = "no-store"
    return response


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
    if value < low:
        raise InvalidQuery(name, f"must be an integer >= {low}, got {value}")
    return value


def _error(status: int, code: str, message: str) -> Response | tuple[str, int]:
    if request.path.startswith("/dashboard/data/"):
        return _json({"error": {"code": code, "message": message}}, status)
    return render_template("dashboard/error.html", status=status, message=message,
                           **_page_context()), status


def _page_context() -> dict[str, Any]:
    settings = getattr(_services(), "settings", None)
    return {
        "flower_url": getattr(settings, "flower_url", None),
        "state_colours": STATE_COLOURS,
        "plotly_version": plotly.__version__,
    }


def _setup(state: BlueprintSetupState) -> None:
    state.app.extensions.setdefault(STATE_KEY, DashboardState())


def create_blueprint() -> Blueprint:
    """The dashboard blueprint (pages at ``/``), ready for ``app.register_blueprint``."""
    bp = Blueprint(
        "dashboard",
        __name__,
        url_prefix="/",
        template_folder="templates",
        static_folder="static",
        static_url_path="/dashboard/static",
    )
    bp.record_once(_setup)

    @bp.errorhandler(NotFound)
    def not_found(exc: NotFound) -> Any:
        return _error(404, "not_found", str(exc))

    @bp.errorhandler(InvalidQuery)
    def invalid(exc: InvalidQuery) -> Any:
        return _error(400, "invalid", str(exc))

    @bp.errorhandler(StoreUnavailable)
    def unavailable(exc: StoreUnavailable) -> Any:
        log.warning("dashboard: %s", exc)
        return _error(503, "store_unavailable", "the store is not reachable; retrying")

    # -- pages -------------------------------------------------------------------------

    @bp.get("/")
    def sweeps() -> str:
        initial = payloads.sweeps_payload(_state(), _services().store, _now())
        return render_template("dashboard/sweeps.html", initial=initial, **_page_context())

    @bp.get("/sweeps/<sweep_id>")
    def sweep(sweep_id: str) -> str:
        meta = payloads.sweep_meta(_services().store.get_sweep(sweep_id))
        return render_template("dashboard/sweep.html", sweep=meta, **_page_context())

    @bp.get("/trials/<trial_id>")
    def trial(trial_id: str) -> str:
        initial = payloads.trial_payload(_services().store, trial_id, _now())
        return render_template("dashboard/trial.html", initial=initial, **_page_context())

    @bp.get("/sweeps/<sweep_id>/trials/<int:index>")
    def trial_by_index(sweep_id: str, index: int) -> Response:
        table = _state().tables.get(_services().store, sweep_id)
        row = table.rows.get(index)
        if row is None:
            raise NotFound("trial", f"{sweep_id} #{index}")
        return redirect(url_for("dashboard.trial", trial_id=row["id"]))

    @bp.get("/workers")
    def workers() -> str:
        return render_template("dashboard/workers.html", **_page_context())

    @bp.get("/dashboard/plotly.min.js")
    def plotly_js() -> Response:
        with resources.as_file(PLOTLY_JS) as path:
            return send_file(path, mimetype="text/javascript", max_age=7 * 86400,
                             conditional=True)

    # -- data --------------------------------------------------------------------------

    @bp.get("/dashboard/data/sweeps")
    def sweeps_data() -> Response:
        since = request.args.get("since")
        since_ms = _int_arg("since") if since else None
        return _json(payloads.sweeps_payload(_state(), _services().store, _now(), since_ms))

    @bp.get("/dashboard/data/sweeps/<sweep_id>")
    def sweep_data(sweep_id: str) -> Response:
        mode = request.args.get("mode", "best")
        if mode not in ("best", "recent"):
            raise InvalidQuery("mode", f"must be best or recent, got {mode!r}")
        return _json(payloads.first_payload(_state(), _services().store, sweep_id, _now(),
                                            param=request.args.get("param"), mode=mode))

    @bp.get("/dashboard/data/sweeps/<sweep_id>/summary")
    def sweep_summary(sweep_id: str) -> Response:
        table = _state().tables.get(_services().store, sweep_id)
        return _json(payloads.sweep_summary(table, _now()))

    @bp.get("/dashboard/data/sweeps/<sweep_id>/changes")
    def sweep_changes(sweep_id: str) -> Response:
        table = _state().tables.get(_services().store, sweep_id)
        versions = {name: request.args.get(name, "") for name in payloads.AGGREGATES}
        return _json(payloads.sweep_changes(table, _now(), _int_arg("since"), versions))

    @bp.get("/dashboard/data/sweeps/<sweep_id>/scatter")
    def sweep_scatter(sweep_id: str) -> Response:
        return _json(_partial(sweep_id, "scatter"))

    @bp.get("/dashboard/data/sweeps/<sweep_id>/parallel")
    def sweep_parallel(sweep_id: str) -> Response:
        return _json(_partial(sweep_id, "parallel"))

    @bp.get("/dashboard/data/sweeps/<sweep_id>/curves")
    def sweep_curves(sweep_id: str) -> Response:
        raw = request.args.get("indexes", "")
        try:
            indexes = [int(i) for i in raw.split(",") if i][: payloads.TOP_N]
        except ValueError:
            raise InvalidQuery(
                "indexes", f"must be trial indexes, comma-separated, got {raw!r}"
            ) from None
        store = _services().store
        table = _state().tables.get(store, sweep_id)
        return _json(payloads.curves_payload(_state(), store, table, indexes))

    @bp.get("/dashboard/data/trials/<trial_id>")
    def trial_data(trial_id: str) -> Response:
        store = _services().store
        if request.args.get("attempt") is None:
            return _json(payloads.trial_payload(store, trial_id, _now()))
        return _json(payloads.trial_changes(store, trial_id, _now(), _int_arg("attempt"),
                                            _int_arg("epoch", -1, low=-1)))

    @bp.get("/dashboard/data/workers")
    def workers_data() -> Response:
        services = _services()
        settings = getattr(services, "settings", None)
        return _json(payloads.workers_payload(
            _state(), services.store, getattr(services, "sender", None), _now(),
            getattr(settings, "flower_url", None),
        ))

    return bp


def _partial(sweep_id: str, which: str) -> dict[str, Any]:
    """One figure of the sweep page again, for another parameter or parallel mode."""
    store = _services().store
    table = _state().tables.get(store, sweep_id)
    mode = request.args.get("mode", "best")
    if mode not in ("best", "recent"):
        raise InvalidQuery("mode", f"must be best or recent, got {mode!r}")
    return payloads.figure_payload(table, which, param=request.args.get("param"), mode=mode)
