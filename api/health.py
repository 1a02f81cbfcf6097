"""``/api/v1/health``: can the API reach its store and its broker, and how fast.

Open (no token): load balancers and orchestrators call it. 200 with each part's round
trip in milliseconds (and the trial queue's depth and consumers, when it exists); 503 in
the one error shape when either part is down, the same report in ``details``. Failures
are described without the server's exception text (host names, topology), which is
logged instead.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from amqp.exceptions import ChannelError
from flask import Blueprint
from kombu.exceptions import OperationalError

from api.params import accept
from api.serialize import PREFIX
from core.errors import StoreUnavailable
from web.context import AppContext, context
from web.errors import ApiError

log = logging.getLogger(__name__)
blueprint = Blueprint("health", __name__, url_prefix=PREFIX)


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def check_store(ctx: AppContext) -> dict[str, Any]:
    """One ping to the store: ok and latency, or why not."""
    start = time.perf_counter()
    try:
        return {"ok": True, "latency_ms": _ms(ctx.store.ping())}
    except StoreUnavailable as exc:
        log.warning("health: store unavailable: %s", exc)
        took = time.perf_counter() - start
        return {"ok": False, "latency_ms": _ms(took), "error": f"no answer in {took:.1f} s"}


def _queue(conn: Any, name: str) -> dict[str, Any] | None:
    try:
        _, messages, consumers = conn.default_channel.queue_declare(name, passive=True)
    except ChannelError:  # not declared yet: no sweep submitted and no worker started
        return None
    return {"name": name, "messages": messages, "consumers": consumers}


def check_broker(ctx: AppContext) -> dict[str, Any]:
    """Connect to the broker: ok, latency and the queue's depth, or why not."""
    start = time.perf_counter()
    timeout = ctx.settings.api_timeout_seconds
    try:
        with ctx.sender.connection_for_write(connect_timeout=timeout) as conn:
            conn.ensure_connection(max_retries=0)
            took = time.perf_counter() - start
            return {"ok": True, "latency_ms": _ms(took), "queue": _queue(conn, ctx.settings.queue)}
    except (OperationalError, ConnectionError, OSError) as exc:
        log.warning("health: broker unavailable: %s", exc)
        took = time.perf_counter() - start
        return {"ok": False, "latency_ms": _ms(took), "error": f"no connection after {took:.1f} s"}


@blueprint.get("/health")
def health() -> dict[str, Any]:
    """200 when the store and broker both answer, else 503; each with its latency."""
    accept(())
    ctx = context()
    report = {"store": check_store(ctx), "broker": check_broker(ctx)}
    down = [part for part, result in report.items() if not result["ok"]]
    if down:
        message = f"{' and '.join(down)} unreachable"
        raise ApiError(503, "unavailable", message, {"status": "unavailable", **report})
    return {"status": "ok", **report}
