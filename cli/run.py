"""`sweepstack run SPEC`: the whole platform on one machine, on the production code paths.

With no ``SWEEPSTACK_BROKER_URL`` / ``SWEEPSTACK_MONGO_URL`` it starts an embedded store and
broker (`cli.embedded`); with them it uses the real RabbitMQ and MongoDB. Either way it
starts N Celery workers and the dashboard, submits the sweep, shows a progress bar with the
best so far and an ETA (`cli.run_follow`), and ends with a table of the top trials and
the commands that reach the results later (`sweepstack ls`, `status`, `export`, `open`: the
data folder keeps them). Ctrl-C stops everything it started.

The data folder is held from before anything starts until every child has exited
(`cli.datafolder`): a second run on it is refused, naming the first (its pid and
dashboard), before it submits anything. The dashboard's default port falls back to a free
one when busy; a port given with ``--port`` is refused when busy (`cli.local.dashboard_port`).

Start-up and shut-down are on the sweep's critical path, so: the store, the workers and the
dashboard start at once and only the store is waited for (the workers' boot, mostly the torch
import, overlaps storing and enqueueing the sweep); the end of the sweep is seen within
`run_follow.POLL_SECONDS`; every child is then stopped at once (`embedded.Processes.stop`).
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import json
import logging
import os
import shutil
import signal
import sys
import time
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console

from cli import datafolder, embedded
from cli.datafolder import FolderInUse, FolderLock
from cli.embedded_broker import ORDERED_TRANSPORT
from cli.local import dashboard_port, with_data_dir
from cli.options import dashboard_port_option, data_option, workers_option
from cli.run_follow import follow, results_note, top_table
from cli.shared import EXIT_NO_RESULT, EXIT_PROBLEM, fail_spec, load_spec, program, skip_teardown
from core.broker import EMBEDDED_BROKER_URL
from core.errors import NotFound, SpecError, SweepstackError
from core.settings import Settings

if TYPE_CHECKING:
    from core.store.store import Store

log = logging.getLogger(__name__)
#: The feeding lease of `run`, renewed every `POLL_SECONDS`: short, so that `run --resume`
#: after a killed run (whose lease nobody gives back) feeds again within seconds.
RUN_LEASE_SECONDS = 5.0
#: How long the embedded store may take to listen (a cold start on a loaded host).
STORE_START_TIMEOUT = 60.0


def _free_port_but(taken: set[int]) -> int:
    """A free local port that is none of `taken` (ports chosen but not bound yet)."""
    while True:
        port = embedded.free_port()
        if port not in taken:
            return port


def _stop(
    procs: embedded.Processes, store: Store | None, lock: FolderLock | None, ended: bool
) -> None:
    """Close our own connection first, so the store's shut-down has none to drain; give
    the data folder back once every child (the store too) has exited. Once the sweep has
    `ended` no trial runs: the workers and the dashboard are killed without a grace."""
    if store is not None:
        store.close()
    procs.stop(at_once=("worker", "dashboard") if ended else ())
    if lock is not None:
        lock.release()


def _hold_folder(settings: Settings) -> FolderLock | None:
    """Hold the data folder for this run (`cli.datafolder`) when its store or broker
    is embedded there; exit 2 naming the process that holds it already."""
    if settings.mongo_url and settings.broker_url:
        return None  # only logs go to the folder: runs on real servers may share it
    try:
        return datafolder.acquire(settings.data_dir, "run")
    except FolderInUse as exc:
        click.echo(
            f"error: {exc}. Nothing was submitted: wait for it to end (or stop it), or "
            "give this run another folder with --data DIR",
            err=True,
        )
        sys.exit(EXIT_PROBLEM)


def _resume(store: Store, app: Any, sweep_id: str) -> int:
    """Repair the sweep's counts, requeue its running trials and send every queued one
    again.

    The counts first: a `run` killed mid-transition leaves them one off (`core.store.store`), and
    `_follow` waits on them. A duplicate message is harmless: a worker acks it and does
    nothing if the trial is done.
    """
    from scheduler.submit import enqueue_ids

    store.admin.recount(sweep_id)
    # We stopped them: no poison.
    store.admin.requeue_stale(0.0, sweep_id=sweep_id, count_lost=False)
    queued: list[str] = []
    cursor = None
    while True:
        page, cursor = store.reads.trials(sweep_id, state="queued", limit=1000, cursor=cursor)
        queued.extend(doc["_id"] for doc in page)
        if not cursor:
            break
    return enqueue_ids(store, app, queued)


@click.command()
@click.argument("spec", type=click.Path(dir_okay=False), required=False)
@workers_option
@dashboard_port_option
@data_option
@click.option(
    "--resume",
    "resume_id",
    default=None,
    metavar="SWEEP",
    help="Finish this sweep instead of submitting SPEC: complete trials are kept.",
)
@click.option("--no-dashboard", is_flag=True, help="Do not serve the dashboard.")
@click.option(
    "--hold",
    is_flag=True,
    help="After the sweep, keep the dashboard up until Ctrl-C (on a terminal; ignored, "
    "and said so, without one).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print a final summary: {"sweep_id", "counts", "best", ...}.',
)
def run(
    spec: str | None,
    workers: int | None,
    port: int,
    data_dir: str | None,
    resume_id: str | None,
    no_dashboard: bool,
    hold: bool,
    as_json: bool,
) -> None:
    """Run a sweep on this machine: store, broker, workers and dashboard included.

    Uses SWEEPSTACK_BROKER_URL and SWEEPSTACK_MONGO_URL when set; otherwise starts an
    embedded SecantusDB and a filesystem broker under --data.
    """
    if bool(spec) == bool(resume_id):
        raise click.UsageError("give a SPEC to run, or --resume SWEEP (not both)")
    started = time.monotonic()
    settings = Settings.from_env()
    default_folder = settings.data_dir
    settings = with_data_dir(settings, data_dir)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    loaded = load_spec(spec, local_files=True) if spec else None
    busy = None
    if not no_dashboard:
        port, busy = dashboard_port(port)
    err = Console(stderr=True)
    if hold and (no_dashboard or not sys.stdin.isatty()):
        why = "there is no dashboard" if no_dashboard else "standard input is not a terminal"
        err.print(
            f"note: --hold is ignored: {why}; after the run, `{program()} open SWEEP` serves "
            "the dashboard on its results",
            soft_wrap=True,
        )
    lock = _hold_folder(settings)  # before anything starts or is submitted
    procs = embedded.Processes(settings.data_dir)

    def on_signal(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    store: Store | None = None
    sweep_id: str | None = None  # once stored: what a Ctrl-C tells the user to resume
    ended = False  # every trial of the sweep ended: no worker has anything to finish
    try:
        # Everything starts at once; only the store is waited for, before the sweep is
        # stored. Workers boot (the torch import) meanwhile and take the first message as
        # soon as they are up; the dashboard is not waited for at all.
        keep = (lock.fd,) if lock else ()
        service = (
            None if settings.mongo_url else embedded.start_store(procs, settings.data_dir, keep)
        )
        mongo_url = settings.mongo_url or service.url  # type: ignore[union-attr]
        if lock is not None:
            lock.update(store=mongo_url)  # readers of the folder may use it from now on
        broker_url = settings.broker_url or EMBEDDED_BROKER_URL
        settings = dataclasses.replace(settings, mongo_url=mongo_url, broker_url=broker_url)
        env = {
            **os.environ,
            "SWEEPSTACK_MONGO_URL": mongo_url,
            "SWEEPSTACK_BROKER_URL": broker_url,
            "SWEEPSTACK_DATA_DIR": str(settings.data_dir),
        }
        processes = workers or os.cpu_count() or 1
        embedded.start_workers(procs, env, processes, settings.queue, settings.torch_threads)
        board = None
        if not no_dashboard:
            taken = {service.port} if service else set()
            board = embedded.start_dashboard(procs, env, port or _free_port_but(taken))
        dashboard = board.url if board else None
        if lock is not None:
            lock.update(dashboard=dashboard)
        # Imported once the workers are on their way: they are not needed before.
        from core.store.store import Store
        from scheduler.enqueue import sender_app
        from scheduler.submit import submit_sweep
        from web.local_open import local_open_note

        if service is not None:
            service.wait(STORE_START_TIMEOUT)
        store = Store.connect(mongo_url, settings.mongo_db, **settings.store_options())
        store.ensure_indexes()
        app = sender_app(settings)
        if broker_url == EMBEDDED_BROKER_URL:
            app.conf.broker_transport = ORDERED_TRANSPORT  # keeps the longest-first order
        if loaded is not None:
            try:
                sweep_id, total = submit_sweep(
                    loaded, store, app, workers=processes, window=settings.feed_window
                )
            except SpecError as exc:
                fail_spec(exc)
        else:
            sweep_id = resume_id or ""
            try:
                store.reads.get_sweep(sweep_id)
            except NotFound as exc:
                raise click.ClickException(f"no sweep {sweep_id} in {mongo_url}") from exc
            _resume(store, app, sweep_id)
        log.info("sweep %s enqueued %.2f s after start", sweep_id, time.monotonic() - started)
        if lock is not None:
            lock.update(sweep=sweep_id)
        from scheduler.feed import Feeder, owner_name

        open_feeder = functools.partial(
            Feeder.open,
            store,
            app,
            sweep_id,
            owner=owner_name(),
            workers=processes,
            big_window=settings.feed_window,
            lease_seconds=RUN_LEASE_SECONDS,
        )
        sweep = store.reads.get_sweep(sweep_id)
        total = sum(store.reads.counts(sweep_id).values())
        plural = "" if total == 1 else "s"
        err.print(f"sweep [bold]{sweep_id}[/] ({sweep['name']}): {total:,} trial{plural}")
        if dashboard:
            err.print(f"dashboard: {dashboard}sweeps/{sweep_id}")
            if busy and board is not None:
                err.print(
                    f"note: 127.0.0.1:{busy} is in use; the dashboard is on {board.port}",
                    soft_wrap=True,
                )
            if note := local_open_note(settings, "127.0.0.1"):
                err.print(f"note: {note}")
        feeder = follow(
            store,
            app,
            procs,
            sweep_id,
            total,
            err,
            settings.stale_after_seconds,
            settings.max_attempts,
            open_feeder,
        )
        ended = True
        skip_teardown()  # everything is closed in `_stop`, before the command returns
        if feeder is not None:
            feeder.close()  # another scheduler may take the sweep at once (a retry's trials)
        from cli.failures import print_failures, sweep_failures  # imports the analysis

        counts = store.reads.counts(sweep_id)
        best = store.reads.best(sweep_id, 1)
        if as_json:
            click.echo(
                json.dumps(
                    {
                        "sweep_id": sweep_id,
                        "counts": counts,
                        "best": best[0] if best else None,
                        "failures": sweep_failures(store, sweep_id)[0],
                        "store": mongo_url,
                        "data_dir": str(settings.data_dir),
                        "dashboard": dashboard,
                    },
                    default=str,
                )
            )
        else:
            width = max(120, shutil.get_terminal_size((160, 24)).columns)
            if best:
                Console(width=width).print(top_table(store, sweep))
            print_failures(err, store, sweep_id, counts)
        results_note(err, sweep_id, settings.data_dir if service else None, default_folder)
        if hold and board and sys.stdin.isatty():
            board.wait()
            err.print(f"the dashboard stays up at {dashboard}sweeps/{sweep_id}; Ctrl-C to stop")
            try:
                while True:
                    procs.check()
                    time.sleep(1)
            except KeyboardInterrupt:
                err.print("stopping")
        if not counts.get("complete", 0):
            err.print(
                f"error: no trial of sweep {sweep_id} completed"
                + ("; the reasons are above" if counts.get("failed", 0) else ""),
                highlight=False,
            )
            sys.exit(EXIT_NO_RESULT)
    except KeyboardInterrupt:
        err.print("interrupted: stopping workers, dashboard and store")
        if sweep_id is not None:
            data = "" if settings.data_dir == default_folder else f" --data {settings.data_dir}"
            err.print(
                f"the sweep is kept: `{program()} run --resume {sweep_id}{data}` finishes it "
                "(its complete trials are kept)",
                highlight=False, markup=False, soft_wrap=True,
            )  # fmt: skip
        sys.exit(130)
    except (SweepstackError, RuntimeError) as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        _stop(procs, store, lock, ended)
        # The interpreter's last garbage collections over every object the imported
        # libraries made took 1.5 s of the command's exit on a loaded 2-core machine;
        # frozen objects are skipped (the process is ending, the OS takes the memory).
        gc.freeze()
