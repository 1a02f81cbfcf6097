"""``sweepstack open [SWEEP]``: the dashboard on a data folder's sweeps, after the run.

It takes the store as every reading command does (`cli.local.open_store`: the data
folder's, started for it and held while it runs, or the one a run serving the folder
already has; or ``SWEEPSTACK_MONGO_URL``), starts the dashboard on 127.0.0.1 (gunicorn, as
`run` does), waits until it answers, prints the sweep's URL on stdout, and holds until
Ctrl-C or SIGTERM, then stops what it started. While it holds, the folder's record names
its dashboard, so a `run` on the same folder is told where it is.
"""

from __future__ import annotations

import os
import signal
import time

import click

from cli import embedded
from cli.datafolder import pid_alive
from cli.local import dashboard_port, find_sweep, open_store, reached, with_data_dir
from cli.options import dashboard_port_option, data_option
from cli.shared import program, read_settings
from core.procs import free_port
from web.local_open import local_open_note

#: How long the dashboard may take to listen, and how often the hold checks on it.
START_TIMEOUT = 60.0
CHECK_SECONDS = 0.5


def _on_signal(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


@click.command("open")
@click.argument("sweep_id", required=False)
@data_option
@dashboard_port_option
def open_command(sweep_id: str | None, data_dir: str | None, port: int) -> None:
    """Serve the dashboard of a data folder's sweeps (SWEEP's page, or the list) until
    Ctrl-C; prints the URL on standard output."""
    settings = with_data_dir(read_settings(), data_dir)
    port, busy = dashboard_port(port)
    signal.signal(signal.SIGTERM, _on_signal)
    store = open_store(settings)
    if sweep_id:
        find_sweep(store, sweep_id)
    found = reached()
    mongo_url = settings.mongo_url or found.url  # type: ignore[union-attr]
    env = {**os.environ, "SWEEPSTACK_MONGO_URL": mongo_url}
    procs = embedded.Processes(settings.data_dir)
    try:
        chosen = port or free_port()  # the store listens already: it is not offered
        board = embedded.start_dashboard(procs, env, chosen)
        board.wait(START_TIMEOUT)
        url = f"{board.url}sweeps/{sweep_id}" if sweep_id else board.url
        if found is not None and found.lock is not None:
            found.lock.update(dashboard=board.url, sweep=sweep_id)
        if busy:
            click.echo(f"note: 127.0.0.1:{busy} is in use; the dashboard is on {chosen}", err=True)
        if note := local_open_note(settings, "127.0.0.1"):
            click.echo(f"note: {note}", err=True)
        where = found.folder if found else "the store of SWEEPSTACK_MONGO_URL"
        click.echo(f"serving {where} until Ctrl-C", err=True)
        click.echo(url)
        while True:
            procs.check()
            if found is not None and found.holder and not pid_alive(found.holder.pid):
                raise click.ClickException(
                    f"the store of {found.holder.describe()} is gone: stopping; "
                    f"`{program()} open` again serves the folder on a store of its own"
                )
            time.sleep(CHECK_SECONDS)
    except KeyboardInterrupt:
        click.echo("stopping the dashboard", err=True)
    except RuntimeError as exc:  # the dashboard exited or did not listen
        raise click.ClickException(str(exc)) from exc
    finally:
        procs.stop()
