"""The WSGI entry point of the API with the dashboard: ``gunicorn cli.wsgi:app`` (what
``sweepstack api`` and the compose file's ``api`` service run).

The one place this app reads its settings from the environment.
"""

from __future__ import annotations

import logging

from cli.app import create_app
from core.settings import Settings

settings = Settings.from_env()
logging.basicConfig(
    level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
)
app = create_app(settings)
