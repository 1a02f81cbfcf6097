"""gunicorn settings for Sweepstack's web apps: ``gunicorn -c python:cli.gunicorn_conf``.

Three things a command line cannot say, or should not have to:

- **The one error shape for gunicorn's own replies.** gunicorn answers a request it
  refuses before the app sees it (a request line over ``limit_request_line``: 414; too
  many or too large headers: 431; a malformed request: 400) with an HTML page of its own.
  Here its writer is replaced so those replies carry the JSON body every other error has,
  ``{"code", "message", "details"}``.
- **One session key for every worker process.** Without ``SWEEPSTACK_SECRET_KEY`` each
  worker would make its own random key and a login made in one worker would be refused by
  the next. This module runs in gunicorn's master before it forks, so a key made here is
  inherited by all of them; it still changes at every restart (logins end), which the log
  says.
- **No control socket.** gunicorn's control interface listens on one path per user by
  default (``~/.gunicorn/gunicorn.ctl``): two servers on one host (a run's dashboard and an
  ``open``, two compose services with one home) took each other's, and nothing here uses
  it (`control_socket_disable`).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket

from gunicorn import util

log = logging.getLogger("sweepstack.gunicorn")

#: gunicorn's setting of that name: no control socket (the module docstring).
control_socket_disable = True

#: Codes of the errors gunicorn answers itself, by status.
CODES = {
    400: "bad_request",
    403: "forbidden",
    414: "uri_too_long",
    417: "expectation_failed",
    431: "headers_too_large",
    500: "internal_error",
    501: "not_implemented",
}

MESSAGES = {
    414: "the request line (method, path and query) is over this server's limit",
    431: "the request headers are over this server's limit",
    500: "internal error; see the server log",
}


def error_bytes(status: int, reason: str, message: str) -> bytes:
    """A whole HTTP response carrying the one JSON error shape."""
    body = json.dumps(
        {
            "code": CODES.get(status, "error"),
            "message": MESSAGES.get(status) or message or reason,
            "details": {},
        }
    ).encode("utf-8")
    head = (
        f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nCache-Control: no-store\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body


def write_json_error(sock: socket.socket, status_int: int, reason: str, mesg: str) -> None:
    """gunicorn's `util.write_error`, answering JSON instead of HTML."""
    util.write_nonblock(sock, error_bytes(status_int, reason, mesg))


util.write_error = write_json_error

if not os.environ.get("SWEEPSTACK_SECRET_KEY"):
    os.environ["SWEEPSTACK_SECRET_KEY"] = secrets.token_hex(32)
    log.warning(
        "SWEEPSTACK_SECRET_KEY is not set: a random key, shared by this server's "
        "workers, signs dashboard sessions; logins end when the server restarts"
    )
