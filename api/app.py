"""The Flask app factory of the REST API (and the dashboard, when it is installed).

`create_app(settings)` builds one app: the blueprints under ``/api/v1`` (sweeps, trials,
workers, health, the OpenAPI document), the one JSON error shape (`api.errors`), bearer
tokens (`api.auth`), and the limits from settings. What the views share lives on
``app.extensions["sweepstack"]`` (`ApiContext`: ``settings``, ``store``, ``sender``); the
dashboard blueprint reads the store from there too.

The store and the Celery sender are made here from the settings unless given (tests pass
their own). Neither connects before the first request that needs it, so the app starts,
and ``/health`` reports 503, while MongoDB or RabbitMQ is down.
"""

from __future__ import annotations

import logging

from celery import Celery
from flask import Flask

from api.context import ApiContext
from api.errors import register_error_handlers
from api.serialize import JSONProvider
from api.submission import limit_body
from core.errors import ConfigError
from core.query import MAX_LIMIT
from core.settings import Settings
from core.store import Store
from scheduler.enqueue import sender_app

log = logging.getLogger(__name__)


def _check(settings: Settings) -> None:
    if not settings.api_page_size <= settings.api_max_page_size <= MAX_LIMIT:
        raise ConfigError(
            "SWEEPSTACK_API_PAGE_SIZE <= SWEEPSTACK_API_MAX_PAGE_SIZE <= "
            f"{MAX_LIMIT} must hold, got {settings.api_page_size} and "
            f"{settings.api_max_page_size}"
        )


def _store(settings: Settings) -> Store:
    if not settings.mongo_url:
        raise ConfigError("SWEEPSTACK_MONGO_URL is not set; point it at your MongoDB")
    timeout_ms = int(settings.api_timeout_seconds * 1000)
    return Store.connect(settings.mongo_url, settings.mongo_db, timeout_ms=timeout_ms)


def _sender(settings: Settings) -> Celery:
    if not settings.broker_url:
        raise ConfigError("SWEEPSTACK_BROKER_URL is not set; point it at your RabbitMQ")
    return sender_app(settings)


def _mount_dashboard(app: Flask) -> None:
    """Register the dashboard blueprint at ``/`` if the dashboard package provides one."""
    try:
        from dashboard.blueprint import create_blueprint
    except ImportError:
        log.info("no dashboard blueprint installed; serving the API only")
        return
    app.register_blueprint(create_blueprint(), url_prefix="/")


def create_app(
    settings: Settings, *, store: Store | None = None, sender: Celery | None = None
) -> Flask:
    """The API (and dashboard) app for `settings`; `store` and `sender` override theirs."""
    from api import celery_workers, health, openapi, sweeps, trials

    _check(settings)
    app = Flask("sweepstack")
    app.json = JSONProvider(app)
    app.config["MAX_CONTENT_LENGTH"] = settings.api_max_body_bytes
    app.extensions["sweepstack"] = ApiContext(
        settings=settings,
        store=store if store is not None else _store(settings),
        sender=sender if sender is not None else _sender(settings),
    )
    register_error_handlers(app)
    app.before_request(limit_body)
    for module in (sweeps, trials, celery_workers, health, openapi):
        app.register_blueprint(module.blueprint)
    openapi.register_root(app)
    _mount_dashboard(app)
    return app
