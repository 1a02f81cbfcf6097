"""One auth layer for the REST API and the dashboard: who is asking, and how often they
may be wrong.

Before every request `_identify` leaves the caller's `web.context.Identity` (or None)
in ``flask.g``:

- an ``Authorization: Bearer <token>`` header names the owner of a configured token
  (``SWEEPSTACK_API_TOKENS``; compared in constant time with every one). A header with a
  token the server does not know counts as a failure and leaves the caller anonymous
  (401 on every route that needs someone).
- otherwise the dashboard's session cookie, set by the login form (``/login``): signed
  with ``SWEEPSTACK_SECRET_KEY`` (itsdangerous, as Flask's sessions are), HttpOnly,
  SameSite=Strict, Secure when the request came over https (or always / never:
  ``SWEEPSTACK_SESSION_COOKIE_SECURE``), valid 12 hours. It holds only the id of a login
  kept in the store (`core.store.sessions`: 256 random bits, never the token or a digest of
  it): a logout deletes that login, so a cookie copied before it opens nothing after; and a
  login whose owner no longer has a token configured opens nothing either.
- otherwise, with no tokens configured and the server bound to loopback
  (`web.local_open.local_open`), a local admin; otherwise nobody.

The REST API takes bearer tokens only (`api.auth.require_token`), never the cookie, so a
page elsewhere cannot make a browser send an API write. Every other state-changing
request (``POST`` to ``/login``, ``/logout``, the dashboard's sweep cancel and retry) must
carry the session's CSRF token (form field ``csrf_token`` or header ``X-CSRF-Token``): 400
``csrf_failed`` otherwise.

Throttling (Flask-Limiter's storage and strategy, in memory or at
``SWEEPSTACK_RATELIMIT_STORAGE_URL``): each failed authentication (a wrong bearer token or
login) counts against the client address; after ``SWEEPSTACK_AUTH_FAILURES`` in
``SWEEPSTACK_AUTH_WINDOW_SECONDS`` the address gets 429 with ``Retry-After`` for every wrong
token it tries until the window ends. A right token is never throttled: behind a reverse
proxy every user shares one address, and anonymous failures there must lock nobody out.
That is safe because a token cannot be guessed in the first place (at least 32 characters
and 96 bits, `core.settings.check_tokens`); the throttle keeps wrong tries cheap and rare.
Successful authentications never count, and sessions already made are not throttled.
"""

from __future__ import annotations

import hmac
import logging
import math
import secrets
import time
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from flask import (
    Blueprint,
    Flask,
    Response,
    current_app,
    g,
    redirect,
    render_template,
    request,
    session,
)
from flask.sessions import SecureCookieSessionInterface
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address
from limits import RateLimitItemPerSecond

from core.settings import Settings, check_tokens
from core.store.roles import Sessions
from web.context import IDENTITY_KEY, Identity, context, error_response
from web.local_open import is_loopback, local_open

log = logging.getLogger(__name__)

AUTH_KEY = "sweepstack.auth"
CSRF_FIELD = "csrf_token"
#: The session cookie's field holding the login's id (`core.store.sessions`).
SESSION_FIELD = "login"
CSRF_HEADER = "X-CSRF-Token"
SESSION_HOURS = 12
_UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def identify(header: str | None, tokens: dict[str, str]) -> str | None:
    """The name whose token is in the ``Authorization`` header value, or None."""
    scheme, _, token = (header or "").strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return match_token(token, tokens)


def match_token(token: str, tokens: dict[str, str]) -> str | None:
    """The owner of `token`, compared in constant time with every configured token."""
    given = token.encode("utf-8", "surrogateescape")
    found = None
    for known, name in tokens.items():
        if hmac.compare_digest(given, known.encode("utf-8")):
            found = name
    return found


def _sessions() -> Sessions:
    """The store's logins (`core.store.sessions`)."""
    return context().store.sessions


class _SessionInterface(SecureCookieSessionInterface):
    """Flask's signed cookie session with Secure decided per request when set to auto."""

    def __init__(self, secure: str) -> None:
        self.secure = secure

    def get_cookie_secure(self, app: Flask) -> bool:
        if self.secure == "auto":
            return request.is_secure
        return self.secure == "true"


class Auth:
    """The configured tokens, the admins, and the failure counter of one app."""

    def __init__(self, settings: Settings, limiter: Limiter) -> None:
        self.tokens = dict(settings.api_tokens)
        self.admins = settings.admins
        self.names = frozenset(self.tokens.values())
        self.open = local_open(settings)
        self.limiter = limiter
        self.item = RateLimitItemPerSecond(settings.auth_failures, settings.auth_window_seconds)

    def identity(self, name: str, via: str) -> Identity:
        return Identity(name=name, admin=name in self.admins, via=via)

    def _key(self) -> str:
        return get_remote_address() or "unknown"

    def blocked(self) -> Response | None:
        """429 with Retry-After if this address used up its failures, else None."""
        if self.limiter.limiter.test(self.item, "auth-failures", self._key()):
            return None
        reset, _ = self.limiter.limiter.get_window_stats(self.item, "auth-failures", self._key())
        wait = max(1, math.ceil(reset - time.time()))
        return error_response(
            429, "too_many_failures",
            f"too many failed authentications from this address; retry in {wait} s",
            {"retry_after": wait}, {"Retry-After": str(wait)},
        )  # fmt: skip

    def failed(self) -> None:
        """Count one failed authentication from this address."""
        self.limiter.limiter.hit(self.item, "auth-failures", self._key())


def auth() -> Auth:
    return current_app.extensions[AUTH_KEY]


def _host_name(host: str) -> str:
    """The name or address of a ``Host`` header, without its port (``[::1]:8050`` -> ``[::1]``)."""
    if host.startswith("["):
        return host.partition("]")[0] + "]"
    return host.partition(":")[0]


def _identify() -> Response | None:
    """The app's first `before_request`: set ``g`` identity, or answer 400/401/429.

    In the open loopback mode a request whose ``Host`` is no loopback name or address is
    refused (400): a page of another site that a DNS name made point at 127.0.0.1 (DNS
    rebinding) would otherwise read and cancel every sweep with no login."""
    state = auth()
    if state.open and not is_loopback(_host_name(request.host)):
        return error_response(
            400, "host_refused",
            "this dashboard needs no login and so answers only to a loopback host name "
            "(localhost, 127.0.0.1, [::1]); open it at one of those",
        )  # fmt: skip
    header = request.headers.get("Authorization")
    if header is not None:
        name = identify(header, state.tokens)
        if name is None:
            if (answer := state.blocked()) is not None:
                return answer
            state.failed()  # the route decides: 401 where a token is needed
            return None
        g.setdefault(IDENTITY_KEY, state.identity(name, "bearer"))
        return None
    if request.path.startswith("/api/"):
        return None
    name = None
    if SESSION_FIELD in session:
        owner = _sessions().session_owner(session[SESSION_FIELD])
        name = owner if owner in state.names else None
        if name is not None:
            g.setdefault(IDENTITY_KEY, state.identity(name, "session"))
        else:
            session.pop(SESSION_FIELD)
    if name is None and state.open:
        g.setdefault(IDENTITY_KEY, Identity(name="local", admin=True, via="local"))
    return _check_csrf()


def csrf_token() -> str:
    """This session's CSRF token (made on first use), for forms and the page's scripts."""
    if CSRF_FIELD not in session:
        session[CSRF_FIELD] = secrets.token_urlsafe(32)
    return session[CSRF_FIELD]


def _check_csrf() -> Response | None:
    if request.method not in _UNSAFE:
        return None
    given = request.form.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER) or ""
    expected = session.get(CSRF_FIELD, "")
    if expected and hmac.compare_digest(given.encode(), expected.encode()):
        return None
    return error_response(
        400, "csrf_failed", "this form is stale or did not come from this site; reload the page"
    )


def _safe_next(target: str | None) -> str:
    """A same-site path to go to after login (never another host)."""
    if not target or not target.startswith("/") or target.startswith("//"):
        return "/"
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or "\\" in target:
        return "/"
    return target


def _login_page(status: int = 200, message: str | None = None) -> tuple[str, int]:
    return render_template(
        "web/login.html", message=message, next=_safe_next(request.values.get("next"))
    ), status


def _blueprint() -> Blueprint:
    bp = Blueprint("auth", __name__, template_folder="templates")

    @bp.get("/login")
    def login_form() -> Any:
        return _login_page()

    @bp.post("/login")
    def login() -> Any:
        state = auth()
        token = request.form.get("token", "").strip()
        name = match_token(token, state.tokens) if token else None
        if name is None:
            if (answer := state.blocked()) is not None:
                return answer
            state.failed()
            return _login_page(401, "That token is not valid.")
        session.clear()
        session[SESSION_FIELD] = _sessions().open_session(name, SESSION_HOURS * 3600)
        session[CSRF_FIELD] = secrets.token_urlsafe(32)
        log.info("dashboard login: %s from %s", name, request.remote_addr)
        return redirect(_safe_next(request.form.get("next")), 303)

    @bp.post("/logout")
    def logout() -> Any:
        if SESSION_FIELD in session:
            _sessions().close_session(session[SESSION_FIELD])
        session.clear()
        return redirect("/login", 303)

    return bp


def init_auth(app: Flask, settings: Settings) -> None:
    """Sessions, CSRF, throttling and the identity hook on `app` (before any blueprint)."""
    check_tokens(settings.api_tokens)
    if settings.secret_key:
        app.secret_key = settings.secret_key
    else:
        app.secret_key = secrets.token_hex(32)
        log.warning(
            "SWEEPSTACK_SECRET_KEY is not set: a random key signs dashboard sessions, "
            "so logins do not survive a restart (and are not shared across hosts)"
        )
    app.config.update(
        SESSION_COOKIE_NAME="sweepstack_session",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
        PERMANENT_SESSION_LIFETIME=timedelta(hours=SESSION_HOURS),
    )
    app.session_interface = _SessionInterface(settings.session_cookie_secure)
    limiter = Limiter(
        get_remote_address,
        app=app,
        storage_uri=settings.ratelimit_storage_url,
        key_prefix="sweepstack",
        default_limits=[],
        headers_enabled=False,
    )
    app.extensions[AUTH_KEY] = Auth(settings, limiter)
    app.before_request_funcs.setdefault(None, []).insert(0, _identify)
    app.jinja_env.globals["csrf_token"] = csrf_token
    app.register_blueprint(_blueprint())
