"""Send trials to the broker by task name, without importing the workers (or torch).

A message carries a trial id and, as keyword arguments, a copy of the trial's config and
the attempt it is queued at (a config never changes after submission; DESIGN.md), so the
worker's claim is one write with no read (`workers.claims`); the store holds everything
else, and a worker reads the config from the store when a message lacks it. The config's
large texts (a Caffe net's prototxt, a long string parameter) travel as references to the
sweep's ``texts`` (`core.store.texts`), which the worker reads once per process: a message
of a 0.9 MB Caffe spec is a few KB, not 0.9 MB. Each message
gets the trial's soft and hard time limits, so the worker enforces `execution.time_limit`.
A fused group (`scheduler.grouping`) is one `workers.run_group` message whose argument is
the list of its trial ids (keywords ``configs`` and ``attempts``, one per id); it takes
the plain (`build`) path below, there being far fewer.

What `enqueue` takes, per message: ``(trial id or list of ids, time limit)`` or
``(…, time limit, keyword arguments)`` (`carry` and `carry_group` make them). A pruning
sweep's messages also carry ``watch: true``: the worker then reports every epoch at once
and checks for a prune request after each (`workers.runner`).

Publishing speed: Celery's ``send_task`` with publisher confirms waits for the broker's
ack after every message (~3 ms each: 150 s for 50,000 trials). On RabbitMQ (py-amqp),
`enqueue` instead builds each Celery protocol-2 message from a template made once by
``app.amqp.create_task_message`` (so headers are exactly what ``send_task`` sends, and
the body is the same JSON), publishes them on one confirm-mode channel, and waits for the
broker's acks in windows: the call still returns only once the broker has every message,
and raises if it refused (nacked) any. Other transports (the embedded broker) take the
``send_task`` path.
"""

from __future__ import annotations

import json
import logging
import re
import struct
import time
import types
import uuid
from collections.abc import Iterable
from typing import Any, TypeAlias

import amqp
from amqp import spec
from amqp.method_framing import frame_writer
from amqp.serialization import dumps
from celery import Celery
from kombu import Connection
from kombu.exceptions import OperationalError

from core.broker import GROUP_TASK_NAME, TASK_NAME, celery_config, time_limits
from core.settings import Settings
from core.shares import DEFAULT_PRIORITY, MESSAGE_PRIORITY
from core.store.texts import split_texts

log = logging.getLogger(__name__)

#: Messages published before waiting for the broker to confirm the oldest of them.
CONFIRM_WINDOW = 5000
#: Seconds to wait for a confirm before giving up on the broker.
CONFIRM_TIMEOUT = 30.0
#: Bytes of frames gathered before one socket write.
WRITE_BYTES = 256 * 1024


#: The epochs at which a watched trial waits for the pruner's decision: a list, "every",
#: "in-worker" (its worker decides itself, `workers.pruning`), or None (it does not wait).
DecideAt: TypeAlias = list[int] | str | None

#: One message for `enqueue`: (trial id or group's ids, time limit[, keyword arguments]).
Outgoing: TypeAlias = tuple[str | list[str], float] | tuple[str | list[str], float, dict[str, Any]]


def carry(
    config: dict[str, Any],
    attempt: int = 0,
    *,
    watch: bool = False,
    decide_at: DecideAt = None,
) -> dict[str, Any]:
    """The keyword arguments of a `workers.run_trial` message: what its claim needs, the
    config's large texts as references (`core.store.texts`; the worker reads them once).

    `watch` (a pruning sweep): the worker writes its epoch rows at every epoch and asks
    for a prune request after each (`workers.runner`); left out of the message when off,
    so a sweep without pruning sends exactly what it sent before. `decide_at`: the epochs
    after which the pruner may decide (`core.spec.search.decision_epochs`), where the worker
    waits, bounded, for the scheduler's decision before it trains on.
    """
    kwargs: dict[str, Any] = {"config": split_texts(config)[0], "attempt": attempt}
    if watch:
        kwargs["watch"] = True
        if decide_at is not None:
            kwargs["decide_at"] = decide_at
    return kwargs


def carry_group(
    configs: list[dict[str, Any]],
    attempts: list[int],
    *,
    watch: bool = False,
    decide_at: DecideAt = None,
    sequential: bool = False,
) -> dict[str, Any]:
    """The keyword arguments of a `workers.run_group` message, one config and attempt per id
    (`watch` and `decide_at` as in `carry`, for the whole group). `sequential`: a chunk of
    cheap trials (`scheduler.chunks`), trained one after another, never fused; left out
    when off."""
    kwargs: dict[str, Any] = {"configs": [split_texts(c)[0] for c in configs], "attempts": attempts}
    if watch:
        kwargs["watch"] = True
        if decide_at is not None:
            kwargs["decide_at"] = decide_at
    if sequential:
        kwargs["sequential"] = True
    return kwargs


def _kwargsrepr(kwargs: dict[str, Any]) -> str:
    """What a message shows of its keywords (Flower, logs): their names, not the configs."""
    return "{" + ", ".join(f"{key!r}: ..." for key in kwargs) + "}"


def _unpack(item: Outgoing) -> tuple[str | list[str], float, dict[str, Any]]:
    if len(item) == 2:
        return item[0], item[1], {}
    return item[0], item[1], item[2]  # type: ignore[misc]


def sender_app(settings: Settings, broker_url: str | None = None) -> Celery:
    """A Celery app that only sends: the same config as the workers, no tasks registered."""
    app = Celery("sweepstack-sender", set_as_current=False)
    app.conf.update(celery_config(settings, broker_url))
    return app


def enqueue(
    app: Celery, trials: Iterable[Outgoing], priority: int = MESSAGE_PRIORITY[DEFAULT_PRIORITY]
) -> int:
    """Publish one message per (trial id, time limit[, keywords]); return the count.

    `priority` is the messages' RabbitMQ priority (`core.shares.MESSAGE_PRIORITY`: a high
    sweep's trials overtake those already queued; the queue is declared with
    ``x-max-priority``, `core.broker.trial_queue`).

    A trial id goes as `workers.run_trial`; a list of ids (a fused group) as one
    `workers.run_group` message; the keywords (`carry`, `carry_group`) with either.

    Returns once the broker has confirmed every message; raises `OperationalError` if it
    refused any, or a connection error if it went away (some messages may then be queued).
    """
    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=3)
        if isinstance(conn.connection, amqp.Connection):
            count = _publish_confirmed(app, conn, trials, priority)
        else:
            count = _send_each(app, conn, trials, priority)
    log.info("enqueued %d trials", count)
    return count


def _send_each(app: Celery, conn: Connection, trials: Iterable[Outgoing], priority: int) -> int:
    """The plain path: ``send_task`` per message, on one producer."""
    count = 0
    with app.producer_pool.acquire(block=True) as producer:
        for item in trials:
            trial_id, limit, kwargs = _unpack(item)
            name = TASK_NAME if isinstance(trial_id, str) else GROUP_TASK_NAME
            app.send_task(
                name,
                args=[trial_id],
                kwargs=kwargs,
                kwargsrepr=_kwargsrepr(kwargs),
                producer=producer,
                priority=priority,
                **time_limits(limit),
            )
            count += 1
    return count


class _Confirms:
    """The broker's publisher confirms on one channel: how many of the first messages are in.

    Delivery tags count messages from 1; an ack with `multiple` confirms every tag up to it.
    """

    def __init__(self) -> None:
        self.upto = 0
        self.nacked = 0
        self._singles: set[int] = set()

    def ack(self, tag: int, multiple: bool) -> None:
        if multiple:
            self.upto = max(self.upto, tag)
        else:
            self._singles.add(tag)
        while self.upto + 1 in self._singles:
            self.upto += 1
        self._singles = {t for t in self._singles if t > self.upto}

    def nack(self, tag: int, multiple: bool) -> None:
        self.nacked += max(tag - self.upto, 1) if multiple else 1
        self.ack(tag, multiple)


class _Messages:
    """Celery protocol-2 messages for `workers.run_trial`, from one template per time limit.

    `frames` gives a message's AMQP frames as bytes without serializing it through py-amqp:
    the method frame and the content header frame come from a template serialized once per
    (time limit, trial id length, keyword names), with placeholders of the same lengths as
    a task id and the trial id, and each message is the template's bytes with the
    placeholders replaced (every length prefix stays right) and the body size set; the
    body (``[[trial id], keywords, embed]``, JSON) follows in frames of at most
    ``frame_max``. Trial ids with characters that JSON or ``repr`` would escape get None,
    and go through `build`, as do groups (`workers.run_group`).
    """

    _TASK = "00000000-0000-4000-8000-7e7e7e7e7e7e"  # a uuid's length, never a uuid4's value
    _SAFE = re.compile(r"^[A-Za-z0-9_.:-]{1,200}$")
    #: Where a content header frame holds the body size: after type, channel, size, class
    #: and weight.
    _BODY_SIZE_AT = 11

    def __init__(
        self, app: Celery, channel_id: int, frame_max: int, routing_key: str, priority: int = 0
    ) -> None:
        self.app = app
        self.priority = priority
        self.reply_to = app.thread_oid
        self.channel_id = channel_id
        self.frame_max = frame_max
        self.routing_key = routing_key
        self._templates: dict[tuple[str, float, str], tuple[dict[str, Any], str]] = {}
        self._frames: dict[tuple[float, int, str], tuple[list[bytes], list[str], int] | None] = {}

    def _template(self, limit: float, name: str, kwargsrepr: str) -> tuple[dict[str, Any], str]:
        """The headers of a message and its body's ``embed`` part, as JSON."""
        if (name, limit, kwargsrepr) not in self._templates:
            headers, _properties, body, _event = self.app.amqp.create_task_message(
                "",
                name,
                ["-"],
                {},
                ignore_result=True,
                kwargsrepr=kwargsrepr,
                **time_limits(limit),
            )
            _args, _kwargs, embed = body
            self._templates[name, limit, kwargsrepr] = (headers, json.dumps(embed))
        return self._templates[name, limit, kwargsrepr]

    def build(
        self,
        trial_id: str | list[str],
        limit: float,
        kwargs: dict[str, Any] | None = None,
        task_id: str | None = None,
    ) -> amqp.Message:
        """The message for one trial (or group of ids), as ``send_task`` would send it."""
        kwargs = kwargs or {}
        name = TASK_NAME if isinstance(trial_id, str) else GROUP_TASK_NAME
        headers, embed = self._template(limit, name, _kwargsrepr(kwargs))
        task_id = task_id or str(uuid.uuid4())
        return amqp.Message(
            f"[{json.dumps([trial_id])}, {json.dumps(kwargs)}, {embed}]".encode(),
            content_type="application/json",
            content_encoding="utf-8",
            application_headers=dict(
                headers, id=task_id, root_id=task_id, argsrepr=repr([trial_id])
            ),
            delivery_mode=2,
            priority=self.priority,
            correlation_id=task_id,
            reply_to=self.reply_to,
        )

    def frames(
        self, trial_id: str | list[str], limit: float, kwargs: dict[str, Any]
    ) -> bytes | None:
        """The wire bytes publishing the trial's message, or None (use `build`)."""
        if not isinstance(trial_id, str) or not self._SAFE.match(trial_id):
            return None
        kwargsrepr = _kwargsrepr(kwargs)
        key = (limit, len(trial_id), kwargsrepr)
        if key not in self._frames:
            self._frames[key] = self._split(limit, len(trial_id), kwargsrepr)
        template = self._frames[key]
        if template is None:
            return None
        segments, slots, size_at = template
        _headers, embed = self._template(limit, TASK_NAME, kwargsrepr)
        body = f'[["{trial_id}"], {json.dumps(kwargs)}, {embed}]'.encode()
        values = {"task": str(uuid.uuid4()).encode(), "trial": trial_id.encode()}
        out = bytearray(segments[0])
        for slot, segment in zip(slots, segments[1:], strict=True):
            out += values[slot]
            out += segment
        out[size_at : size_at + 8] = struct.pack(">Q", len(body))
        chunk = self.frame_max - 8
        for start in range(0, len(body), chunk):
            part = body[start : start + chunk]
            out += struct.pack(">BHI", 3, self.channel_id, len(part)) + part + b"\xce"
        return bytes(out)

    def _split(
        self, limit: float, length: int, kwargsrepr: str
    ) -> tuple[list[bytes], list[str], int] | None:
        """The method and header frames of the template, cut at each placeholder; which
        value goes in each cut; where the body size is."""
        marks = {self._TASK.encode(): "task", ("~" * length).encode(): "trial"}
        captured: list[bytes] = []
        shim = types.SimpleNamespace(frame_max=self.frame_max, bytes_sent=0)
        sink = types.SimpleNamespace(write=lambda data: captured.append(bytes(data)))
        message = self.build("~" * length, limit, None, self._TASK)
        headers = dict(message.properties["application_headers"], kwargsrepr=kwargsrepr)
        message.properties["application_headers"] = headers
        message.body = b""  # the body frames are made per message
        args = dumps("Bssbb", (0, "", self.routing_key, False, False))
        frame_writer(shim, sink)(1, self.channel_id, spec.Basic.Publish, args, message)
        raw = b"".join(captured)
        method_end = 7 + struct.unpack_from(">I", raw, 3)[0] + 1
        header_end = method_end + 7 + struct.unpack_from(">I", raw, method_end + 3)[0] + 1
        if header_end != len(raw) or raw[method_end] != 2:
            return None  # not the two frames expected: never guess
        size_at = method_end + self._BODY_SIZE_AT
        found = re.compile(b"|".join(re.escape(m) for m in marks)).finditer(raw)
        segments, slots, last = [], [], 0
        for match in found:
            if match.start() < size_at + 8:
                return None
            segments.append(raw[last : match.start()])
            slots.append(marks[match.group()])
            last = match.end()
        segments.append(raw[last:])
        if sorted(slots) != ["task"] * 3 + ["trial"]:
            return None  # a placeholder also occurs elsewhere: never guess
        return segments, slots, size_at


def _publish_confirmed(
    app: Celery, conn: Connection, trials: Iterable[Outgoing], priority: int
) -> int:
    queue = app.amqp.queues[app.conf.task_default_queue]
    channel = conn.channel()
    try:
        queue(channel).declare()
        confirms = _Confirms()
        channel.events["basic_ack"].add(confirms.ack)
        channel.events["basic_nack"].add(confirms.nack)
        channel.confirm_select()
        transport = conn.connection.transport
        messages = _Messages(
            app, channel.channel_id, conn.connection.frame_max, queue.name, priority
        )
        buffer = bytearray()
        sent = 0
        for item in trials:
            trial_id, limit, kwargs = _unpack(item)
            frames = messages.frames(trial_id, limit, kwargs)
            if frames is not None:
                buffer += frames
            else:
                transport.write(bytes(buffer))
                buffer.clear()
                # The class's publish, not the instance's: with confirm_publish on, the
                # instance's waits for a confirm after every message.
                amqp.Channel.basic_publish(
                    channel,
                    messages.build(trial_id, limit, kwargs),
                    exchange="",
                    routing_key=queue.name,
                )
            sent += 1
            if len(buffer) >= WRITE_BYTES or sent - confirms.upto >= CONFIRM_WINDOW:
                transport.write(bytes(buffer))
                buffer.clear()
                if sent - confirms.upto >= CONFIRM_WINDOW:
                    _wait_confirms(conn, confirms, sent - CONFIRM_WINDOW // 2)
        transport.write(bytes(buffer))
        _wait_confirms(conn, confirms, sent)
    finally:
        try:
            channel.close()
        except Exception as exc:  # the connection may be gone already; report the first error
            log.warning("closing the publishing channel failed: %s", exc)
    if confirms.nacked:
        raise OperationalError(f"the broker refused {confirms.nacked} of {sent} messages")
    return sent


def _wait_confirms(conn: Connection, confirms: _Confirms, upto: int) -> None:
    """Read the broker's confirms until message `upto` is confirmed."""
    deadline = time.monotonic() + CONFIRM_TIMEOUT
    while confirms.upto < upto:
        left = deadline - time.monotonic()
        if left <= 0:
            raise OperationalError(
                f"the broker confirmed {confirms.upto} of {upto} messages "
                f"in {CONFIRM_TIMEOUT:.0f} s"
            )
        try:
            conn.drain_events(timeout=min(left, 1.0))
        except TimeoutError:
            continue
