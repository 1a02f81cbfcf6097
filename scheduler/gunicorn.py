"""The gunicorn command lines that serve Sweepstack's WSGI apps (``web.wsgi:app``, the API
with the dashboard, and ``web.dashboard_wsgi:app``, the dashboard alone)."""

from __future__ import annotations

import sys

#: The gunicorn settings module (JSON error replies, one session key for all workers).
CONFIG = "python:web.gunicorn_conf"


def gunicorn_argv(
    target: str,
    host: str,
    port: int,
    *,
    workers: int,
    threads: int,
    timeout: int,
    access_log: bool = True,
) -> list[str]:
    """Serve `target` (``module:app``) on `host`:`port` with threaded (gthread) workers.

    `timeout` is how many seconds one request may run before gunicorn restarts its worker.
    ``SWEEPSTACK_BIND_HOST`` tells the app where it listens (with no tokens configured, a
    loopback address leaves the dashboard open: `core.webcontext.local_open`).
    """
    argv = [
        sys.executable, "-m", "gunicorn", target,
        "--config", CONFIG,
        "--bind", f"{host}:{port}",
        "--env", f"SWEEPSTACK_BIND_HOST={host}",
        "--workers", str(workers),
        "--worker-class", "gthread",
        "--threads", str(threads),
        "--timeout", str(timeout),
    ]  # fmt: skip
    if access_log:
        argv += ["--access-logfile", "-"]
    return argv
