"""The `sweepstack` command line: the click group, assembled from the command modules.

The commands live one module a subject (`cli.specs`, `cli.commands`, `cli.changes`, `cli.worker`,
`cli.results`, `cli.front`, `cli.report`, `cli.model`, `cli.open_dashboard`, `cli.run`,
`cli.api_server`, `cli.dashboard_server`); what they share (exit codes, settings, the
spec as read) is `cli.shared`, their common options `cli.options`. Nothing imports this module.

Exit codes: 0 success; 2 a spec or usage problem (one line per problem on stderr, each
naming its path and rule); 1 anything else.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys

import click

from core.errors import SweepstackError

#: Every `sweepstack` command, by name, and where it lives (``module:attribute``). A command
#: is imported only when it runs (or when ``--help`` lists them all): `sweepstack run`
#: starts its workers sooner for not importing the API server, the dashboard and the rest.
COMMANDS: dict[str, str] = {
    "validate": "cli.specs:validate",
    "generate": "cli.specs:generate",
    "submit": "cli.commands:submit",
    "status": "cli.results:status",
    "worker": "cli.worker:worker",
    "scheduler": "cli.commands:scheduler",
    "run": "cli.run:run",
    "api": "cli.api_server:api",
    "dashboard": "cli.dashboard_server:dashboard",
    "ls": "cli.results:ls",
    "export": "cli.results:export",
    "delete": "cli.results:delete",
    "open": "cli.open_dashboard:open_command",
    "report": "cli.report:report",
    "model": "cli.model:model",
    "front": "cli.front:front",
    "pause": "cli.changes:pause",
    "resume": "cli.changes:resume",
    "extend": "cli.changes:extend",
}


def load_command(name: str) -> click.Command:
    """The command `name` of `COMMANDS`, imported now."""
    module, _, attribute = COMMANDS[name].partition(":")
    command = getattr(importlib.import_module(module), attribute)
    if not isinstance(command, click.Command) or command.name != name:
        raise RuntimeError(f"{COMMANDS[name]} is not the click command {name!r}")
    return command


class LazyGroup(click.Group):
    """A group whose commands are imported when asked for (click's lazy subcommands)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return load_command(cmd_name) if cmd_name in COMMANDS else None


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(package_name="sweepstack")
def main() -> None:
    """Sweepstack: run sweeps of neural-network configurations on RabbitMQ, Celery,
    PyTorch and MongoDB.

    Start with `sweepstack validate SPEC`, look at the trials with
    `sweepstack generate SPEC`, run them here with `sweepstack run SPEC`; then
    `sweepstack ls`, `status`, `export` and `open` reach the results it kept, and
    `sweepstack model` the best trials' trained models.
    """


def take_ctrl_c() -> None:
    """Let Ctrl-C stop the command whatever its parent left it: a SIGINT the parent
    ignored (a shell's ``&`` does; Python then installs no handler, and KeyboardInterrupt
    never comes) or blocked (both are inherited across exec) is taken back, with Python's
    own handler. `run`, `open` and the servers stop on Ctrl-C."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def run() -> None:
    """Console entry point: Ctrl-C taken (`take_ctrl_c`), and unexpected Sweepstack errors
    turned into exit code 1. A command that succeeded and asked for it
    (`cli.shared.skip_teardown`) ends the process at once, its output flushed."""
    take_ctrl_c()
    try:
        main(standalone_mode=True)
    except SweepstackError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except SystemExit as done:
        from cli.shared import teardown_skipped

        if done.code not in (0, None) or not teardown_skipped():
            raise
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    run()
