"""Entry point of worker processes: ``celery -A workers.main worker``.

Reads the settings from the environment here, and nowhere below.
"""

from __future__ import annotations

import logging

from core.settings import Settings
from workers.app import create_worker_app

settings = Settings.from_env()
logging.basicConfig(
    level=settings.log_level,
    format="%(asctime)s %(levelname)s %(processName)s %(name)s: %(message)s",
)
app = create_worker_app(settings)
