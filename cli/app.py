"""`create_app(settings)`: the web app, the REST API and the dashboard behind one auth layer.

What the views share lives on ``app.extensions["sweepstack"]`` (`web.context.AppContext`:
``settings``, ``store``, ``sender``, and for the sweep analysis ``importance``: Optuna's
evaluators from the scheduler, handed in here because the dashboard may not import the
scheduler; see `core.analysis`). The store and the Celery sender are made here from
the settings unless given (tests pass their own). Neither connects before the first request
that needs it, so the app starts, and ``/api/v1/health`` reports 503, while MongoDB or
RabbitMQ is down. The order matters: the context, then the auth layer (its identity hook
runs before every other), then the one error shape, then the blueprints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from celery import Celery
from flask import Flask
from werkzeug.middleware.proxy_fix import ProxyFix

from api.app import register_api
from core.errors import ConfigError
from core.settings import Settings
from core.store.store import Store
from dashboard.blueprint import create_blueprint
from dashboard.plotlyjs import STYLE_SOURCES
from scheduler.enqueue import sender_app
from scheduler.retry import retry_sweep
from web.auth import init_auth
from web.context import AppContext
from web.errors import register_error_handlers
from web.headers import init_headers


def _store(settings: Settings) -> Store:
    if not settings.mongo_url:
        raise ConfigError("SWEEPSTACK_MONGO_URL is not set; point it at your MongoDB")
    timeout_ms = int(settings.api_timeout_seconds * 1000)
    return Store.connect(
        settings.mongo_url, settings.mongo_db, timeout_ms=timeout_ms, **settings.store_options()
    )


def _sender(settings: Settings, required: bool) -> Celery | None:
    if not settings.broker_url:
        if required:
            raise ConfigError("SWEEPSTACK_BROKER_URL is not set; point it at your RabbitMQ")
        return None
    return sender_app(settings)


def _importance(
    spec_document: Mapping[str, Any],
    params: Sequence[Mapping[str, Any]],
    values: Sequence[float],
    direction: str,
) -> dict[str, Any]:
    """Optuna's importances (`scheduler.importance`) for the analysis of the API and the
    dashboard, which may not import the scheduler; Optuna loads on the first analysis."""
    from scheduler.importance import param_importances

    return param_importances(spec_document, params, values, direction)


def create_app(
    settings: Settings,
    *,
    store: Store | None = None,
    sender: Celery | None = None,
    api: bool = True,
    dashboard: bool = True,
) -> Flask:
    """The web app for `settings`: the API under ``/api/v1`` (unless `api` is False) and
    the dashboard at ``/`` (unless `dashboard` is False). `store` and `sender` override
    theirs; the API needs a broker, the dashboard alone only uses one for its Workers page.
    """
    app = Flask("sweepstack")
    app.config["MAX_CONTENT_LENGTH"] = settings.api_max_body_bytes
    if settings.trusted_proxies:
        # Who the client is and how it came, as the trusted proxies say (the throttle,
        # secure cookies); nothing else they forward is believed.
        n = settings.trusted_proxies
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=n, x_proto=n)  # type: ignore[method-assign]
    app.extensions["sweepstack"] = AppContext(
        settings=settings,
        store=store if store is not None else _store(settings),
        sender=sender if sender is not None else _sender(settings, required=api),
        importance=_importance,
    )
    init_auth(app, settings)
    # The policy allows the <style> elements plotly.js writes, by hash, where it is served.
    init_headers(app, style_sources=STYLE_SOURCES if dashboard else ())
    register_error_handlers(app)
    if api:
        register_api(app, settings)
    if dashboard:
        # The dashboard's retry button enqueues through the scheduler, which it may not
        # import: the composition hands it in.
        app.register_blueprint(create_blueprint(retry=retry_sweep), url_prefix="/")
    return app
