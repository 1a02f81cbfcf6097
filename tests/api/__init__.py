"""Helpers for the API tests: tokens, a small spec, settings with small limits, the queue.

Each test gets a queue of its own on the real RabbitMQ (named as `tests.integration.stack`
names them) and a database of its own on the real SecantusDB; both are deleted after.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from typing import Any

from amqp.exceptions import NotFound as QueueMissing
from flask.testing import FlaskClient
from kombu import Connection

from core.settings import Settings

#: Tokens of the test owners (at least 32 characters, as the server requires).
ALICE_TOKEN = "alice-token-0123456789abcdef0123456789"
BOB_TOKEN = "bob-token-0123456789abcdef0123456789ab"
CAROL_TOKEN = "carol-token-0123456789abcdef012345678"
TOKENS = {ALICE_TOKEN: "alice", BOB_TOKEN: "bob", CAROL_TOKEN: "carol"}
ALICE = {"Authorization": f"Bearer {ALICE_TOKEN}"}
BOB = {"Authorization": f"Bearer {BOB_TOKEN}"}
YAML = {"Content-Type": "application/yaml"}
#: Where sweeps are posted and listed.
SWEEPS = "/api/v1/sweeps"

SMALL = {
    "name": "api-test",
    "dataset": {"name": "iris"},
    "model": {"hidden_units": [8, 16, 32], "activation": ["relu", "tanh"]},
    "training": {"epochs": 1},
    "objective": {"metric": "val_accuracy", "direction": "maximize"},
}


def small_spec(**overrides: Any) -> dict[str, Any]:
    """Six trials on iris (hidden_units x activation), with any top-level key replaced."""
    return {**SMALL, **overrides}


def api_settings(broker_url: str, mongo_url: str, db_name: str, **overrides: Any) -> Settings:
    """Settings with a queue of the test's own, two tokens and small limits (a fixed
    session key, so sessions survive between the apps a test makes)."""
    base = Settings(
        broker_url=broker_url,
        mongo_url=mongo_url,
        mongo_db=db_name,
        queue=f"sweepstack.test.{uuid.uuid4().hex[:10]}",
        api_tokens={ALICE_TOKEN: "alice", BOB_TOKEN: "bob"},
        api_max_body_bytes=64 * 1024,
        api_max_trials=500,
        api_max_epochs=100,
        api_page_size=5,
        api_max_page_size=50,
        api_timeout_seconds=2.0,
        secret_key="test-secret-key-0123456789abcdef0123456789",
        auth_failures=100,
    )
    return dataclasses.replace(base, **overrides)


def remove_queue(settings: Settings) -> None:
    """Delete the test's queue and its exchange."""
    with Connection(settings.broker_url) as conn:
        conn.default_channel.queue_delete(settings.queue)
        conn.default_channel.exchange_delete(settings.queue)


def enqueued_trials(settings: Settings) -> list[str]:
    """Every trial id in the test's queue, taking the messages out of it.

    A message carries one trial id (`workers.run_trial`) or a fused group's list of them
    (`workers.run_group`).
    """
    ids: list[str] = []
    with Connection(settings.broker_url) as conn:
        channel = conn.default_channel
        while (message := channel.basic_get(settings.queue, no_ack=True)) is not None:
            arg = json.loads(message.body)[0][0]
            ids += [arg] if isinstance(arg, str) else arg
    return ids


def queue_depth(settings: Settings) -> int:
    """Messages waiting in the test's queue (0 if it was never declared)."""
    with Connection(settings.broker_url) as conn:
        channel = conn.channel()
        try:
            return channel.queue_declare(settings.queue, passive=True).message_count
        except QueueMissing:  # never declared, so nothing was sent
            return 0


def submit(client: FlaskClient, spec: dict[str, Any] | None = None, headers: Any = None) -> str:
    """Submit `spec` (default `small_spec`) as alice; the new sweep's id."""
    response = client.post("/api/v1/sweeps", json=spec or small_spec(), headers=headers or ALICE)
    assert response.status_code == 201, response.json
    return response.json["id"]
