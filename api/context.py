"""What `api.app.create_app` puts on the app for the views: ``app.extensions["sweepstack"]``."""

from __future__ import annotations

from dataclasses import dataclass

from celery import Celery
from flask import current_app

from core.settings import Settings
from core.store import Store


@dataclass
class ApiContext:
    """What every view needs: the settings, the store, and the Celery app that sends.

    The dashboard blueprint reads ``current_app.extensions["sweepstack"].store`` too.
    """

    settings: Settings
    store: Store
    sender: Celery


def context() -> ApiContext:
    """The settings, store and sender of the app serving this request."""
    return current_app.extensions["sweepstack"]
