"""The WSGI entry point of the dashboard alone: ``gunicorn dashboard.wsgi:app``.

Settings come from the environment (``SWEEPSTACK_*``), read here and nowhere below.
"""

from __future__ import annotations

import logging

from core.settings import Settings
from dashboard.app import create_dashboard_app

settings = Settings.from_env()
logging.basicConfig(level=settings.log_level.upper(),
                    format="%(asctime)s %(levelname)s %(name)s: %(message)s")
app = create_dashboard_app(settings)
