"""The WSGI entry point of the dashboard alone: ``gunicorn cli.dashboard_wsgi:app`` (what
``sweepstack dashboard``, ``sweepstack run`` and the compose profile ``dashboard`` run).

Same auth layer as the API's server; settings from the environment, read here only.
"""

from __future__ import annotations

import logging

from cli.app import create_app
from core.settings import Settings

settings = Settings.from_env()
logging.basicConfig(
    level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
)
app = create_app(settings, api=False)
