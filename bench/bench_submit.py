"""How long does ``POST /api/v1/sweeps`` take to accept, store and enqueue 50,000 trials?

    python -m bench.bench_submit [--url mongodb://...] [--broker amqp://...] [--fuse off|auto]

The request goes through the real app (Flask's test client, so no HTTP server in the way)
to the real RabbitMQ (SWEEPSTACK_TEST_BROKER_URL, default 127.0.0.1:5672) and a SecantusDB
it starts itself (or --url). Then the same work is timed phase by phase, on a fresh
database and queue, to show where the time goes; and the enqueue is compared with
Celery's ``send_task`` per message (the way `scheduler.enqueue` published before; timed on
`SEND_TASK_SAMPLE` messages and scaled, since 50,000 take minutes).

The target (issues 5 and 15) is 10 s for the whole request. Since issue 15 the request
stores and enqueues only the first window (`scheduler.feed.BIG_WINDOW` trials); the rest
are planned, counted as queued, and fed by the scheduler.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kombu import Connection

from api.submission import check_limits
from bench.bench_expand import GRID
from cli.app import create_app
from core.broker import TASK_NAME, time_limits
from core.settings import Settings
from core.spec.sweep import load_spec
from core.store.store import Store
from scheduler.enqueue import enqueue, sender_app
from scheduler.expand import expand
from scheduler.feed import BIG_WINDOW
from scheduler.messages import messages
from scheduler.order import order_by_cost, trial_cost
from tests.services import SecantusProcess, broker_url_or_fail

SEND_TASK_SAMPLE = 2000
TOKEN = "bench-token-0123456789abcdef0123456789"


def _spec_text(fuse: str) -> str:
    return GRID + f"execution: {{fuse: {fuse}}}\n"


def _timed(label: str, fn: Callable[[], Any], rows: list[tuple[str, float]]) -> Any:
    start = time.perf_counter()
    value = fn()
    rows.append((label, time.perf_counter() - start))
    return value


def _drop(settings: Settings, store: Store) -> None:
    with Connection(settings.broker_url) as conn:
        conn.default_channel.queue_delete(settings.queue)
        conn.default_channel.exchange_delete(settings.queue)
    store.client.drop_database(settings.mongo_db)


def _fresh(settings: Settings) -> Settings:
    tag = uuid.uuid4().hex[:8]
    return dataclasses.replace(settings, mongo_db=f"bench_submit_{tag}",
                               queue=f"sweepstack.bench.{tag}")  # fmt: skip


def request(settings: Settings, text: str) -> tuple[float, dict[str, Any]]:
    """The whole POST, as a client sees it: seconds and the answer."""
    store = Store.connect(settings.mongo_url or "", settings.mongo_db)
    try:
        app = create_app(settings, store=store, sender=sender_app(settings))
        client = app.test_client()
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/yaml"}
        start = time.perf_counter()
        response = client.post("/api/v1/sweeps", data=text, headers=headers)
        took = time.perf_counter() - start
        if response.status_code != 201:
            raise SystemExit(f"submit failed: {response.status_code} {response.json}")
        return took, response.json
    finally:
        _drop(settings, store)
        store.close()


def phases(settings: Settings, text: str) -> list[tuple[str, float]]:
    """The request's work, phase by phase, on a fresh database and queue."""
    rows: list[tuple[str, float]] = []
    store = Store.connect(settings.mongo_url or "", settings.mongo_db)
    app = sender_app(settings)
    try:
        spec = _timed("parse and validate the spec", lambda: load_spec(text), rows)
        _timed("count trials against the limits", lambda: check_limits(spec, settings), rows)
        trials = _timed("expand with resolved configs", lambda: expand(spec, with_config=True),
                        rows)  # fmt: skip
        costs = _timed("cost of every trial (longest first)",
                       lambda: [trial_cost(t.config) for t in trials], rows)  # fmt: skip
        ranked = order_by_cost(trials, costs)
        window = ranked[:BIG_WINDOW]
        sweep_id = _timed(f"store: create_sweep (first {len(window):,} of {len(trials):,})",
                          lambda: store.admin.create_sweep(spec, window, owner="bench",
                                                     total=len(trials)), rows)  # fmt: skip
        batch = _timed("group trials into messages", lambda: messages(sweep_id, window), rows)
        _timed(f"enqueue {len(batch):,} messages (confirmed)", lambda: enqueue(app, batch), rows)
        _timed("store: note them sent", lambda: store.feeding.end_sending(sweep_id), rows)
    finally:
        _drop(settings, store)
        store.close()
    return rows


def send_task_rate(settings: Settings) -> float:
    """Seconds per message of Celery's send_task with per-message publisher confirms."""
    app = sender_app(settings)
    try:
        with app.producer_pool.acquire(block=True) as producer:
            start = time.perf_counter()
            for i in range(SEND_TASK_SAMPLE):
                app.send_task(TASK_NAME, args=[f"bench-{i}"], producer=producer,
                              **time_limits(300.0))  # fmt: skip
            return (time.perf_counter() - start) / SEND_TASK_SAMPLE
    finally:
        with Connection(settings.broker_url) as conn:
            conn.default_channel.queue_delete(settings.queue)
            conn.default_channel.exchange_delete(settings.queue)


def run(mongo_url: str, broker_url: str, fuse: str) -> None:
    base = Settings(broker_url=broker_url, mongo_url=mongo_url, api_tokens={TOKEN: "bench"})
    text = _spec_text(fuse)
    n = len(expand(load_spec(text)))
    took, body = request(_fresh(base), text)
    print(f"POST /api/v1/sweeps, {n:,} trials (execution.fuse: {fuse}): {took:6.2f} s "
          f"[target 10 s] -> {body['trials']:,} trials accepted (first window sent)")  # fmt: skip
    rows = phases(_fresh(base), text)
    print("where the time goes (the same work, phase by phase):")
    for label, seconds in rows:
        print(f"  {label:40s} {seconds:7.2f} s")
    per = send_task_rate(_fresh(base))
    enqueue_row = rows[-2]
    count = int(enqueue_row[0].split()[1].replace(",", ""))
    print(f"enqueue, ours vs Celery send_task with confirms ({SEND_TASK_SAMPLE:,} sampled): "
          f"{enqueue_row[1]:.2f} s vs {per * count:.1f} s for {count:,} messages "
          f"({count / enqueue_row[1]:,.0f} vs {1 / per:,.0f} messages/s)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("SWEEPSTACK_BENCH_MONGO_URL"))
    parser.add_argument("--broker", default=None)
    parser.add_argument("--fuse", default="off", help="execution.fuse of the spec (off|auto|K)")
    args = parser.parse_args()
    broker = args.broker or broker_url_or_fail()
    if args.url:
        run(args.url, broker, args.fuse)
        return
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "data").mkdir()
        server = SecantusProcess(Path(tmp) / "data")
        try:
            print(f"SecantusDB {server.url}, RabbitMQ {broker.split('@')[-1]}")
            run(server.url, broker, args.fuse)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
