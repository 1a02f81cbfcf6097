"""The click options that several `sweepstack` commands take, each defined once, so that
an option means the same and reads the same in every ``--help``.

Each is a decorator, used as ``@data_option``; `listen_port_option` takes the server's
default port first. Options that one command alone takes stay with that command.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

#: The dashboard's port when `run` and `open` serve it, and `sweepstack dashboard`'s.
DASHBOARD_PORT = 8050


def data_option(function: F) -> F:
    """``--data DIR`` (parameter ``data_dir``): the data folder that `run` keeps and the
    reading commands read back (`cli.local`)."""
    return click.option(
        "--data",
        "data_dir",
        type=click.Path(file_okay=False),
        default=None,
        help="The folder where `sweepstack run` keeps its embedded store and broker, and so "
        "the results [default: SWEEPSTACK_DATA_DIR or ~/.sweepstack]; the store of "
        "SWEEPSTACK_MONGO_URL is used instead when that is set.",
    )(function)


def dashboard_port_option(function: F) -> F:
    """``--port`` of the dashboard that `run` and `open` serve on 127.0.0.1; the rule in its
    help is `cli.local.dashboard_port`'s."""
    return click.option(
        "--port",
        type=click.IntRange(0, 65535),
        default=DASHBOARD_PORT,
        show_default=True,
        help="Dashboard port on 127.0.0.1 (0: any free port; the default falls back to a free "
        "one when busy, a port given here is refused when busy).",
    )(function)


def host_option(function: F) -> F:
    """``--host`` of a server the command becomes (`sweepstack api`, `sweepstack dashboard`)."""
    return click.option(
        "--host", default="127.0.0.1", show_default=True, help="Address to listen on."
    )(function)


def listen_port_option(default: int) -> Callable[[F], F]:
    """``--port`` of a server the command becomes, `default` unless given."""

    def decorate(function: F) -> F:
        return click.option(
            "--port",
            type=click.IntRange(1, 65535),
            default=default,
            show_default=True,
            help="Port to listen on.",
        )(function)

    return decorate


def workers_option(function: F) -> F:
    """``--workers``/``-w``: how many processes train trials (`worker`, `run`); None when
    not given, and the command counts the cores."""
    return click.option(
        "--workers",
        "-w",
        type=click.IntRange(min=1),
        default=None,
        help="Training processes [default: the number of cores].",
    )(function)
