"""The REST API under ``/api/v1``: `create_app(settings)` builds it (see `api.app`)."""

from __future__ import annotations

from api.app import create_app

__all__ = ["create_app"]
