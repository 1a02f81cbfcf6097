"""The `sweepstack` command line: the click group, assembled from the command modules.

The commands live one module a subject (`cli.specs`, `cli.commands`, `cli.worker`,
`cli.results`, `cli.report`, `cli.open_dashboard`, `cli.run`, `cli.api_server`,
`cli.dashboard_server`); what they share (exit codes, settings, the spec as read) is
`cli.shared`, their common options `cli.options`. Nothing imports this module.

Exit codes: 0 success; 2 a spec or usage problem (one line per problem on stderr, each
naming its path and rule); 1 anything else.
"""

from __future__ import annotations

import sys

import click

from cli.api_server import api
from cli.commands import scheduler, submit
from cli.dashboard_server import dashboard
from cli.open_dashboard import open_command
from cli.report import report
from cli.results import export, ls, status
from cli.run import run as run_command
from cli.specs import generate, validate
from cli.worker import worker
from core.errors import SweepstackError


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="sweepstack")
def main() -> None:
    """Sweepstack: run sweeps of neural-network configurations on RabbitMQ, Celery,
    PyTorch and MongoDB.

    Start with `sweepstack validate SPEC`, look at the trials with
    `sweepstack generate SPEC`, run them here with `sweepstack run SPEC`; then
    `sweepstack ls`, `status`, `export` and `open` reach the results it kept.
    """


#: Every `sweepstack` command (``--help`` lists them by name).
COMMANDS: tuple[click.Command, ...] = (
    validate, generate, submit, status, worker, scheduler, run_command, api, dashboard, ls,
    export, open_command, report,
)  # fmt: skip


def _register() -> None:
    for command in COMMANDS:
        main.add_command(command)


_register()


def run() -> None:
    """Console entry point that turns unexpected Sweepstack errors into exit code 1."""
    try:
        main(standalone_mode=True)
    except SweepstackError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    run()
