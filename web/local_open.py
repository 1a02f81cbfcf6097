"""Whether the web apps serve without a login: the open loopback mode.

With no ``SWEEPSTACK_API_TOKENS`` and a server bound to a loopback address only, the
dashboard serves anyone on this machine as a local admin (`web.auth`); the launchers say
so on stderr (`local_open_note`). Kept apart from `web.context` (Flask, the store, the
analysis), so that a launcher decides it without importing them.
"""

from __future__ import annotations

import ipaddress

from core.settings import Settings


def is_loopback(host: str | None) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``."""
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def local_open(settings: Settings) -> bool:
    """True when the dashboard serves without a login: no tokens are configured and the
    server is bound to a loopback address only (``SWEEPSTACK_BIND_HOST``, which the
    ``sweepstack`` launchers set). The REST API always needs a bearer token."""
    return not settings.api_tokens and is_loopback(settings.bind_host)


def local_open_note(settings: Settings, host: str) -> str | None:
    """The line a launcher prints on stderr when the dashboard it starts on `host` is
    open to anyone on this machine, or None when it asks for a token."""
    if settings.api_tokens or not is_loopback(host):
        return None
    return (
        f"the dashboard on {host} is open without a login (no SWEEPSTACK_API_TOKENS set, "
        "loopback only): anyone on this machine can read every sweep"
    )
