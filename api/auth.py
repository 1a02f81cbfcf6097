"""Bearer tokens: who is asking.

Tokens come from ``SWEEPSTACK_API_TOKENS`` (``name:token`` pairs; `Settings.api_tokens` maps
token to name). A request proves it is `name` with ``Authorization: Bearer <token>``. The
token is compared with every configured token in constant time (`hmac.compare_digest`,
without stopping at a match), so timing tells nothing about which or how much matched.

Which routes need a token: every ``/api/v1/sweeps``, ``/api/v1/trials`` and
``/api/v1/workers`` route, reads included, because a sweep belongs to the name of the token
that made it and is invisible (404) to everyone else. ``/api/v1/health`` and the OpenAPI
document are open. With no tokens configured every protected route answers 401.
"""

from __future__ import annotations

import hmac

from flask import current_app, g, request

from api.errors import ApiError

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="sweepstack"'}


def identify(header: str | None, tokens: dict[str, str]) -> str | None:
    """The name whose token is in the ``Authorization`` header value, or None."""
    scheme, _, token = (header or "").strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    given = token.encode("utf-8", "surrogateescape")
    found = None
    for known, name in tokens.items():
        if hmac.compare_digest(given, known.encode("utf-8")):
            found = name
    return found


def require_token() -> None:
    """A `before_request` hook: 401 unless the request carries a known bearer token.

    The caller's name is left in ``flask.g.owner`` for `owner`.
    """
    header = request.headers.get("Authorization")
    name = identify(header, current_app.extensions["sweepstack"].settings.api_tokens)
    if name is None:
        message = "a bearer token is required" if not header else "the bearer token is not valid"
        raise ApiError(401, "unauthorized", message, headers=_CHALLENGE)
    g.owner = name


def owner() -> str:
    """The name of the token holder making this request (set by `require_token`)."""
    return g.owner
