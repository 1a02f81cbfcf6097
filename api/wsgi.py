"""The WSGI entry point: ``gunicorn api.wsgi:app`` (what ``sweepstack api`` runs).

The one place the API reads its settings from the environment.
"""

from __future__ import annotations

import logging

from api.app import create_app
from core.settings import Settings

settings = Settings.from_env()
logging.basicConfig(
    level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
)
app = create_app(settings)
