"""The gunicorn command lines that serve Sweepstack's WSGI apps (``cli.wsgi:app``, the API
with the dashboard, and ``cli.dashboard_wsgi:app``, the dashboard alone)."""

from __future__ import annotations

import os
import sys

#: The gunicorn settings module (JSON error replies, one session key for all workers).
CONFIG = "python:cli.gunicorn_conf"


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
    loopback address leaves the dashboard open: `web.local_open.local_open`); the rest of
    gunicorn's settings are `cli.gunicorn_conf`'s.
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


def exec_server(argv: list[str], host: str, banner: str) -> None:
    """Say what is served (and whether the dashboard is open without a login), then become
    gunicorn: `sweepstack api` and `sweepstack dashboard` end here. Bad token settings are
    a usage error before anything starts."""
    import click  # the CLI's own imports: `sweepstack run` builds argv without them

    from core.errors import ConfigError
    from core.settings import Settings
    from web.local_open import local_open_note

    click.echo(banner, err=True)
    try:
        note = local_open_note(Settings.from_env(), host)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    if note:
        click.echo(f"note: {note}", err=True)
    os.execv(argv[0], argv)
