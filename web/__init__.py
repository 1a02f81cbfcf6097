"""The one composition entry point: the REST API and the dashboard on one Flask app,
behind one auth layer (`web.auth`), with one context and one error shape (`web.app`).

``api`` and ``dashboard`` never import each other or this package; this package imports
both. WSGI entry points: ``web.wsgi:app`` (API and dashboard) and
``web.dashboard_wsgi:app`` (the dashboard alone); gunicorn settings: ``web.gunicorn_conf``.
"""

from __future__ import annotations

from web.app import create_app

__all__ = ["create_app"]
