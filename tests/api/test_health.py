"""``/api/v1/health``: 200 with latencies when store and broker answer, 503 when either is
down (a store or broker URL on a port where nothing listens, with short timeouts)."""

from __future__ import annotations

import dataclasses

import pytest
from flask.testing import FlaskClient

from cli.app import create_app
from core.settings import Settings
from core.store.store import Store
from scheduler.enqueue import sender_app
from tests.api import ALICE, queue_depth, submit
from tests.services import free_port


def test_health_reports_latencies_and_the_queue(client: FlaskClient, settings: Settings) -> None:
    body = client.get("/api/v1/health").json
    assert body["status"] == "ok"
    assert body["store"]["ok"] and 0 < body["store"]["latency_ms"] < 2000
    assert body["broker"]["ok"] and 0 < body["broker"]["latency_ms"] < 2000
    assert body["broker"]["queue"] is None  # nothing declared it yet
    submit(client)
    queue = client.get("/api/v1/health").json["broker"]["queue"]
    assert queue == {"name": settings.queue, "messages": queue_depth(settings), "consumers": 0}
    assert queue["messages"] > 0


@pytest.mark.parametrize("down", [("store",), ("broker",), ("store", "broker")])
def test_health_is_503_when_a_part_is_down(
    settings: Settings, store: Store, down: tuple[str, ...]
) -> None:
    closed = free_port()
    if "broker" in down:
        settings = dataclasses.replace(settings, broker_url=f"amqp://guest:guest@127.0.0.1:{closed}//")
    if "store" in down:
        store = Store.connect(f"mongodb://127.0.0.1:{closed}/", "x", timeout_ms=300)
    client = create_app(settings, store=store, sender=sender_app(settings)).test_client()
    response = client.get("/api/v1/health")
    assert response.status_code == 503
    body = response.json
    assert body["code"] == "unavailable" and body["message"] == f"{' and '.join(down)} unreachable"
    for part in ("store", "broker"):
        assert body["details"][part]["ok"] is (part not in down)
        assert body["details"][part]["latency_ms"] >= 0
    assert str(closed) not in response.get_data(as_text=True)  # no server addresses leak
    if "store" in down:
        listed = client.get("/api/v1/sweeps", headers=ALICE)
        assert listed.status_code == 503 and listed.json["code"] == "store_unavailable"


def test_a_submit_while_the_broker_is_down_is_503_and_stores_nothing(
    settings: Settings, store: Store
) -> None:
    down = dataclasses.replace(settings, broker_url=f"amqp://guest:guest@127.0.0.1:{free_port()}//")
    client = create_app(down, store=store, sender=sender_app(down)).test_client()
    response = client.post("/api/v1/sweeps", json={"name": "x", "dataset": {"name": "iris"}},
                           headers=ALICE)
    assert response.status_code == 503 and response.json["code"] == "broker_unavailable"
    assert store.reads.list_sweeps()[0] == []
