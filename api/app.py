"""The REST API's part of the web app: its blueprints under ``/api/v1`` and its limits.

`register_api(app, settings)` adds the blueprints (sweeps, trials, workers, health, the
OpenAPI document), the body limit and the JSON provider to an app that `cli.app.create_app`
made: that composition gives it the shared context (`web.context.AppContext` on
``app.extensions["sweepstack"]``), the auth layer (`web.auth`) and the one error shape
(`web.errors`). The API never imports the dashboard, nor the dashboard the API.
"""

from __future__ import annotations

from flask import Flask

from api.serialize import JSONProvider
from api.submission import limit_body
from core.errors import ConfigError
from core.settings import Settings
from core.store.query import MAX_LIMIT


def check_settings(settings: Settings) -> None:
    """`ConfigError` unless the page sizes are in order."""
    if not settings.api_page_size <= settings.api_max_page_size <= MAX_LIMIT:
        raise ConfigError(
            "SWEEPSTACK_API_PAGE_SIZE <= SWEEPSTACK_API_MAX_PAGE_SIZE <= "
            f"{MAX_LIMIT} must hold, got {settings.api_page_size} and "
            f"{settings.api_max_page_size}"
        )


def register_api(app: Flask, settings: Settings) -> None:
    """Mount the REST API on `app` (its context, auth and error handlers already set)."""
    from api import celery_workers, health, openapi, shares, sweeps, trials

    check_settings(settings)
    app.json = JSONProvider(app)
    app.config["MAX_CONTENT_LENGTH"] = settings.api_max_body_bytes
    app.before_request(limit_body)
    for module in (sweeps, shares, trials, celery_workers, health, openapi):
        app.register_blueprint(module.blueprint)
    openapi.register_root(app)
