"""``sweepstack dashboard``: serve the live dashboard alone, with gunicorn.

gunicorn replaces this process (``exec``), so signals reach it directly. One worker
process with threads: the dashboard keeps each open sweep in memory (`dashboard.table`),
and one process keeps one copy, read once from the store; threads serve the polls of
many pages at once. (Its cursors are store times, so several processes would also
work, each with its own copy.) `sweepstack api` serves the same pages with the REST API.
"""

from __future__ import annotations

import os

import click

from cli.gunicorn import exec_server
from cli.gunicorn import gunicorn_argv as serve_argv
from cli.options import DASHBOARD_PORT, host_option, listen_port_option

#: Seconds gunicorn lets one request run: the first look at a 50,000-trial sweep reads
#: it whole from the store, which takes seconds on SecantusDB.
REQUEST_TIMEOUT = 300


def gunicorn_argv(host: str, port: int, threads: int) -> list[str]:
    """The gunicorn command line serving ``cli.dashboard_wsgi:app``: one process, `threads`."""
    return serve_argv(
        "cli.dashboard_wsgi:app", host, port, workers=1, threads=threads, timeout=REQUEST_TIMEOUT
    )


@click.command()
@host_option
@listen_port_option(DASHBOARD_PORT)
@click.option("--threads", type=click.IntRange(min=1), default=8, show_default=True,
              help="Threads serving requests.")
def dashboard(host: str, port: int, threads: int) -> None:
    """Serve the live dashboard (needs SWEEPSTACK_MONGO_URL; the Workers page also
    SWEEPSTACK_BROKER_URL, and links to Flower when SWEEPSTACK_FLOWER_URL is set)."""
    if not os.environ.get("SWEEPSTACK_MONGO_URL"):
        raise click.UsageError("SWEEPSTACK_MONGO_URL is not set")
    argv = gunicorn_argv(host, port, threads)
    exec_server(argv, host, f"serving the dashboard on http://{host}:{port}/ ({threads} threads)")
