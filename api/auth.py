"""Bearer tokens: who is asking the REST API.

`web.auth` finds the caller before every request (``Authorization: Bearer <token>``,
compared in constant time with every token of ``SWEEPSTACK_API_TOKENS``; a wrong token
counts towards the address's throttle, and `require_token` answers it 401). The API
accepts bearer tokens only: the dashboard's session cookie is not a credential here, so
no page can make a browser write through the API (and the API needs no CSRF token).

Which routes need a token: every ``/api/v1/sweeps``, ``/api/v1/trials`` and
``/api/v1/workers`` route, reads included, because a sweep belongs to the name of the token
that made it and is invisible (404) to everyone else. ``/api/v1/health`` and the OpenAPI
document are open. With no tokens configured every protected route answers 401.
"""

from __future__ import annotations

from flask import request

from web.context import identity
from web.errors import ApiError

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="sweepstack"'}


def require_token() -> None:
    """A `before_request` hook: 401 unless the request carried a known bearer token."""
    who = identity()
    if who is None or who.via != "bearer":
        header = request.headers.get("Authorization")
        message = "a bearer token is required" if not header else "the bearer token is not valid"
        raise ApiError(401, "unauthorized", message, headers=_CHALLENGE)


def owner() -> str:
    """The name of the token holder making this request (checked by `require_token`)."""
    who = identity()
    assert who is not None, "require_token runs before every protected view"
    return who.name
