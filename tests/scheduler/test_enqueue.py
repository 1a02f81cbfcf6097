"""`scheduler.enqueue` on the real RabbitMQ: the fast path publishes exactly the message
Celery's ``send_task`` would (a real worker consuming them is in tests/integration/), with
or without the trial's config and attempt as keywords, every message is confirmed, and
ids that need escaping take the plain path."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kombu import Connection

from core.broker import TASK_NAME, time_limits
from core.settings import Settings
from scheduler.enqueue import _Confirms, carry, carry_group, enqueue, sender_app

VARYING = {"id", "root_id", "argsrepr", "origin", "ignore_result"}


@pytest.fixture
def settings(broker_url: str) -> Iterator[Settings]:
    settings = Settings(broker_url=broker_url, queue=f"sweepstack.test.{uuid.uuid4().hex[:10]}")
    yield settings
    with Connection(broker_url) as conn:
        conn.default_channel.queue_delete(settings.queue)
        conn.default_channel.exchange_delete(settings.queue)


def drain(settings: Settings) -> list[Any]:
    """Every message in the queue, removed from it."""
    out = []
    with Connection(settings.broker_url) as conn:
        channel = conn.default_channel
        while (message := channel.basic_get(settings.queue, no_ack=True)) is not None:
            out.append(message)
    return out


def test_fast_messages_are_those_send_task_makes(settings: Settings) -> None:
    app = sender_app(settings)
    with app.producer_pool.acquire(block=True) as producer:
        app.send_task(TASK_NAME, args=["ab-1"], producer=producer, **time_limits(300))
    (reference,) = drain(settings)
    assert enqueue(app, [("cafe01234567-0123456789abcdef", 300.0), ("x-2", 60.0)]) == 2
    first, second = drain(settings)
    for message in (first, second):
        assert message.delivery_info["routing_key"] == settings.queue
        headers, ref_headers = message.headers, reference.headers
        assert {k: v for k, v in headers.items() if k not in VARYING} == {
            k: v for k, v in ref_headers.items() if k not in VARYING
        } | {"timelimit": headers["timelimit"]}
        assert headers["id"] == headers["root_id"] == message.properties["correlation_id"]
        assert message.properties["delivery_mode"] == 2
        assert message.content_type == "application/json"
    assert json.loads(first.body) == [["cafe01234567-0123456789abcdef"], {}, json.loads(
        reference.body)[2]]  # fmt: skip
    assert first.headers["argsrepr"] == "['cafe01234567-0123456789abcdef']"
    assert first.headers["timelimit"] == [360.0, 300.0]
    assert second.headers["timelimit"] == [120.0, 60.0]
    assert first.headers["id"] != second.headers["id"]


def test_many_messages_are_all_confirmed_and_odd_ids_still_go(settings: Settings) -> None:
    odd = ['quote"d', "üñí", "back\\slash", "x" * 300]
    trials = [(f"sweep-{i:05d}", 300.0) for i in range(6_000)] + [(t, 60.0) for t in odd]
    assert enqueue(sender_app(settings), trials) == len(trials)
    messages = drain(settings)
    assert len(messages) == len(trials)
    assert [json.loads(m.body)[0][0] for m in messages[-4:]] == odd
    assert len({m.headers["id"] for m in messages}) == len(trials)


def test_messages_carry_the_config_and_attempt_as_send_task_would(settings: Settings) -> None:
    app = sender_app(settings)
    config = {"model": {"hidden_units": 64}, "training": {"lr": 0.01, "note": 'é "q"'}}
    kwargs = carry(config, 2)
    with app.producer_pool.acquire(block=True) as producer:
        app.send_task(
            TASK_NAME,
            args=["ab-1"],
            kwargs=kwargs,
            kwargsrepr="{'config': ..., 'attempt': ...}",
            producer=producer,
            **time_limits(300),
        )
    (reference,) = drain(settings)
    big = carry({"blob": "x" * 300_000}, 0)  # past frame_max: the body goes in several frames
    group = carry_group([config, config], [0, 1])
    sent = [("cafe01-1", 300.0, kwargs), ("cafe01-2", 300.0, big), (["g-1", "g-2"], 60.0, group)]
    assert enqueue(app, sent) == 3
    first, second, third = drain(settings)
    assert {k: v for k, v in first.headers.items() if k not in VARYING} == {
        k: v for k, v in reference.headers.items() if k not in VARYING
    }
    assert first.headers["kwargsrepr"] == "{'config': ..., 'attempt': ...}"
    assert json.loads(first.body) == [["cafe01-1"], kwargs, json.loads(reference.body)[2]]
    assert json.loads(second.body)[:2] == [["cafe01-2"], big]
    assert json.loads(third.body)[:2] == [[["g-1", "g-2"]], group]
    assert third.headers["kwargsrepr"] == "{'configs': ..., 'attempts': ...}"


def test_watch_goes_in_the_message_only_when_on(settings: Settings) -> None:
    config = {"model": {"hidden_units": 64}}
    assert "watch" not in carry(config, 1) and "watch" not in carry_group([config], [0])
    watched = carry(config, 1, watch=True)
    group = carry_group([config, config], [0, 0], watch=True)
    sent = [("cafe02-1", 300.0, watched), ("cafe02-2", 300.0, carry(config)), (["g"], 60.0, group)]
    assert enqueue(sender_app(settings), sent) == 3
    first, second, third = drain(settings)
    assert json.loads(first.body)[1] == {"config": config, "attempt": 1, "watch": True}
    assert first.headers["kwargsrepr"] == "{'config': ..., 'attempt': ..., 'watch': ...}"
    assert json.loads(second.body)[1] == {"config": config, "attempt": 0}
    assert json.loads(third.body)[1]["watch"] is True


def test_confirms_count_multiple_and_single_acks() -> None:
    confirms = _Confirms()
    confirms.ack(3, True)
    confirms.ack(5, False)
    assert confirms.upto == 3
    confirms.ack(4, False)
    assert confirms.upto == 5
    confirms.nack(7, True)
    assert confirms.upto == 7 and confirms.nacked == 2
