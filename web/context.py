"""What the web apps (the REST API and the dashboard) share: one typed context, the
caller's identity, and the one JSON error body.

`cli.app.create_app` puts an `AppContext` on ``app.extensions["sweepstack"]`` and, before
every request, leaves the caller's `Identity` (or None) in ``flask.g``; the API's and the
dashboard's views read both through `context` and `identity`, so neither imports the other
or the composition that mounts them. Every error either answers has the body
``{"code", "message", "details"}`` (`error_response`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from celery import Celery
from flask import Response, current_app, g, jsonify

from core.analysis import Importance, Memo
from core.settings import Settings
from core.store.store import Store

#: Where `web.auth` leaves the caller's `Identity` in ``flask.g``.
IDENTITY_KEY = "sweepstack_identity"


@dataclass
class AppContext:
    """What every view needs: the settings, the store, and the Celery app that sends
    (None for a dashboard without a broker: its Workers page then says so); for the
    sweep analysis (`core.analysis`), the importance function the composition hands in
    (Optuna's, from the scheduler, which the dashboard may not import) and the analyses
    this process keeps."""

    settings: Settings
    store: Store
    sender: Celery | None
    importance: Importance | None = None
    analyses: Memo = field(default_factory=Memo)


@dataclass(frozen=True)
class Identity:
    """Who is asking: the owner name of the token, whether it is an admin (sees every
    owner's sweeps on the dashboard), and how it proved it (``bearer``, ``session``,
    or ``local`` for the open loopback mode)."""

    name: str
    admin: bool
    via: str

    @property
    def owner_filter(self) -> str | None:
        """The owner whose sweeps this caller may read on the dashboard; None: all."""
        return None if self.admin else self.name


def context() -> AppContext:
    """The settings, store and sender of the app serving this request."""
    return current_app.extensions["sweepstack"]


def identity() -> Identity | None:
    """The caller of this request, as `web.auth` found it; None when anonymous."""
    return g.get(IDENTITY_KEY)


def error_response(
    status: int,
    code: str,
    message: str,
    details: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    """The one error body, ``{"code", "message", "details"}``, with `status` and
    any extra `headers`; never cached."""
    response = jsonify({"code": code, "message": message, "details": details or {}})
    response.status_code = status
    response.headers["Cache-Control"] = "no-store"
    for name, value in (headers or {}).items():
        response.headers[name] = value
    return response
