"""``sweepstack api``: serve the REST API (and the dashboard) with gunicorn.

gunicorn replaces this process (``exec``), so signals reach it directly. Each worker
process imports ``cli.wsgi``, which reads the settings and builds its own store client
after the fork (pymongo clients are not fork-safe). Workers are threaded (``gthread``) so
one slow request (a large submit, a ``/workers`` broadcast) does not hold the others, and
their timeout is long enough for a 100,000-trial submit.
"""

from __future__ import annotations

import os

import click

from cli.gunicorn import exec_server
from cli.gunicorn import gunicorn_argv as serve_argv
from cli.options import host_option, listen_port_option

#: Seconds gunicorn lets one request run before restarting its worker.
REQUEST_TIMEOUT = 600


def gunicorn_argv(host: str, port: int, workers: int, threads: int) -> list[str]:
    """The gunicorn command line serving ``cli.wsgi:app``."""
    return serve_argv(
        "cli.wsgi:app", host, port, workers=workers, threads=threads, timeout=REQUEST_TIMEOUT
    )


@click.command()
@host_option
@listen_port_option(8000)
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True,
              help="gunicorn worker processes.")
@click.option("--threads", type=click.IntRange(min=1), default=4, show_default=True,
              help="Threads per worker process.")
def api(host: str, port: int, workers: int, threads: int) -> None:
    """Serve the REST API and the dashboard (needs SWEEPSTACK_BROKER_URL and _MONGO_URL)."""
    for variable in ("SWEEPSTACK_BROKER_URL", "SWEEPSTACK_MONGO_URL"):
        if not os.environ.get(variable):
            raise click.UsageError(f"{variable} is not set")
    argv = gunicorn_argv(host, port, workers, threads)
    banner = f"serving the API on http://{host}:{port}/api/v1 ({workers} x {threads})"
    exec_server(argv, host, banner)
