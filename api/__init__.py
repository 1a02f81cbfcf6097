"""The REST API under ``/api/v1``: `register_api` mounts it (see `api.app`); `cli.app`
composes it with the dashboard."""

from __future__ import annotations

from api.app import register_api

__all__ = ["register_api"]
