"""``sweepstack submit`` and ``sweepstack scheduler``: the commands that store sweeps and
feed them, on the servers of ``SWEEPSTACK_BROKER_URL`` and ``SWEEPSTACK_MONGO_URL``.

`sweepstack worker` is in `cli.worker`; the commands that read results in `cli.results`.
"""

from __future__ import annotations

import json
import logging
import time

import click
from kombu.exceptions import OperationalError

from cli.local import open_store
from cli.shared import check_trial_queue, fail_spec, load_spec, need, program, read_settings
from core.errors import SpecError, SweepstackError

log = logging.getLogger(__name__)
#: How often `sweepstack scheduler` feeds its sweeps, and asks how many workers are online.
FEED_SECONDS = 0.5
WORKERS_EVERY_SECONDS = 60.0
WORKERS_RETRY_SECONDS = 3.0


@click.command()
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help='Print {"sweep_id": ..., "trials": N}.')
@click.option(
    "-q", "--quiet", is_flag=True, help="Print only the sweep id: ID=$(sweepstack submit -q SPEC)."
)
def submit(spec: str, as_json: bool, quiet: bool) -> None:
    """Store a sweep and enqueue its trials (needs SWEEPSTACK_BROKER_URL and _MONGO_URL)."""
    from scheduler.enqueue import sender_app
    from scheduler.submit import submit_sweep

    settings = read_settings()
    loaded = load_spec(spec)
    need(settings.broker_url, "SWEEPSTACK_BROKER_URL")
    need(settings.mongo_url, "SWEEPSTACK_MONGO_URL")
    store = open_store(settings)
    try:
        sweep_id, count = submit_sweep(
            loaded,
            store,
            sender_app(settings),
            window=settings.feed_window,
            quota_running=settings.quota_running,
        )
    except SpecError as exc:
        fail_spec(exc)
    if as_json:
        click.echo(json.dumps({"sweep_id": sweep_id, "trials": count}))
    elif quiet:
        click.echo(sweep_id)
    else:
        click.echo(f"submitted sweep {sweep_id}: {count:,} trials queued")
        click.echo(f"follow it with: {program()} status {sweep_id} --watch")


@click.command()
@click.option(
    "--interval",
    type=click.FloatRange(min=0.5),
    default=None,
    help="Seconds between checks [default: half of SWEEPSTACK_STALE_AFTER_SECONDS].",
)
@click.option("--once", is_flag=True, help="Check once and exit.")
@click.option(
    "--lease",
    "lease_seconds",
    type=click.FloatRange(min=1.0),
    default=30.0,
    show_default=True,
    help="Seconds a sweep's feeding lease lasts unrenewed (another scheduler then takes over).",
)
def scheduler(interval: float | None, once: bool, lease_seconds: float) -> None:
    """Feed every unfinished sweep (ask, store and enqueue its next trials, tell results,
    decide pruning) and requeue trials whose worker stopped sending heartbeats."""
    from scheduler.enqueue import sender_app
    from scheduler.feeders import Feeders, workers_online
    from scheduler.submit import requeue_stale

    settings = read_settings()
    need(settings.broker_url, "SWEEPSTACK_BROKER_URL")
    need(settings.mongo_url, "SWEEPSTACK_MONGO_URL")
    check_trial_queue(settings)
    store = open_store(settings)
    app = sender_app(settings)
    every = interval or settings.stale_after_seconds / 2
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(message)s")
    log.info(
        "feeding sweeps every %.1f s; requeueing trials silent for %.0f s every %.1f s",
        FEED_SECONDS,
        settings.stale_after_seconds,
        every,
    )
    feeders = Feeders(store, app, lease_seconds=lease_seconds, big_window=settings.feed_window,
                      quota_running=settings.quota_running)  # fmt: skip
    last_requeue = last_workers = -float("inf")
    try:
        while True:
            now = time.monotonic()
            try:
                # Asked again soon while none answered: the fair share needs the count.
                wait = WORKERS_EVERY_SECONDS if feeders.workers else WORKERS_RETRY_SECONDS
                if now - last_workers > wait:
                    feeders.set_workers(workers_online(app))
                    last_workers = now
                feeders.step()
                if once or now - last_requeue >= every:
                    ids = requeue_stale(
                        store, app, settings.stale_after_seconds, settings.max_attempts
                    )
                    last_requeue = now
                    if once:
                        click.echo(f"requeued {len(ids)} stale trials")
                        return
            except (SweepstackError, OperationalError) as exc:
                log.warning("scheduler pass failed: %s", exc)
            feeders.judge_until(time.monotonic() + min(FEED_SECONDS, every))
    finally:
        feeders.close()
