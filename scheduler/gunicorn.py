"""The gunicorn command lines that serve Sweepstack's WSGI apps (API, dashboard)."""

from __future__ import annotations

import sys


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
    """
    argv = [
        sys.executable, "-m", "gunicorn", target,
        "--bind", f"{host}:{port}",
        "--workers", str(workers),
        "--worker-class", "gthread",
        "--threads", str(threads),
        "--timeout", str(timeout),
    ]  # fmt: skip
    if access_log:
        argv += ["--access-logfile", "-"]
    return argv
