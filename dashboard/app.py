"""The dashboard as an app of its own (`sweepstack dashboard`), without the REST API.

`create_dashboard_app` sets up what `api.create_app` sets up for the blueprint: the
shared services in ``app.extensions["sweepstack"]`` (settings, a store, and a Celery app
that only sends control messages, for the Workers page), then registers the blueprint.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from celery import Celery
from flask import Flask

from core.broker import celery_config
from core.errors import ConfigError
from core.settings import Settings
from core.store import Store
from dashboard.blueprint import create_blueprint

log = logging.getLogger(__name__)


@dataclass
class Services:
    """What the blueprint finds in ``current_app.extensions["sweepstack"]``."""

    settings: Settings
    store: Store
    sender: Celery | None


def control_app(settings: Settings) -> Celery | None:
    """A Celery app for remote control (inspect) only; None without a broker URL."""
    if not settings.broker_url:
        return None
    app = Celery("sweepstack-dashboard", set_as_current=False)
    app.conf.update(celery_config(settings))
    return app


def create_dashboard_app(
    settings: Settings, *, store: Store | None = None, sender: Celery | None = None,
    **config: Any,
) -> Flask:
    """A Flask app serving only the dashboard; `store` and `sender` default from settings.

    Raises `ConfigError` without a store URL. The store connects on first use, so the
    app can be made before a server fork (gunicorn).
    """
    if store is None:
        if not settings.mongo_url:
            raise ConfigError("the dashboard needs a store: set SWEEPSTACK_MONGO_URL")
        store = Store.connect(settings.mongo_url, settings.mongo_db)
    if sender is None:
        sender = control_app(settings)
    app = Flask(__name__)
    app.config.update(config)
    app.extensions["sweepstack"] = Services(settings=settings, store=store, sender=sender)
    app.register_blueprint(create_blueprint())
    return app
