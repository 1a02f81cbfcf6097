"""The embedded broker delivers a sweep's messages in the order they were sent.

Real kombu filesystem transport on a temporary folder: `sweepstack run`'s sender writes,
kombu's stock transport (what the workers use) reads. (The stock sender loses the order of
messages sent within one millisecond; not asserted here, as it depends on speed.)
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from kombu import Connection

from cli import embedded_broker
from cli.embedded_broker import ORDERED_TRANSPORT
from core.broker import embedded_transport_options
from core.settings import Settings
from scheduler.enqueue import enqueue as send
from scheduler.enqueue import sender_app


def received(settings: Settings, count: int) -> list[str]:
    """Trial ids in the order a stock filesystem consumer takes them."""
    out = []
    options = embedded_transport_options(settings)
    with Connection("filesystem://", transport_options=options) as conn:
        queue = conn.SimpleQueue(settings.queue, no_ack=True)
        for _ in range(count):
            message = queue.get(timeout=5)
            out.append(message.payload[0][0])
        queue.close()
    return out


def settings_in(tmp_path: Path) -> Settings:
    return dataclasses.replace(
        Settings.from_env(), broker_url="filesystem://", data_dir=tmp_path, queue="order_test"
    )


def test_messages_come_out_in_the_order_sent(tmp_path: Path) -> None:
    settings = settings_in(tmp_path)
    app = sender_app(settings)
    app.conf.broker_transport = ORDERED_TRANSPORT
    ids = [f"t{i:04d}" for i in reversed(range(300))]
    send(app, [(trial_id, 60.0) for trial_id in ids])
    assert received(settings, len(ids)) == ids



def test_a_message_appears_whole_or_not_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message is renamed into the queue once written. A sender that dies while writing
    one (here: its encoding fails, as a kill -9 would stop it) leaves no message file; with
    kombu's own writing it left an empty `.msg` that made every reader raise."""
    settings = settings_in(tmp_path)
    folder = Path(embedded_transport_options(settings)["data_folder_in"])
    app = sender_app(settings)
    app.conf.broker_transport = ORDERED_TRANSPORT

    def dies(payload: object) -> str:
        raise OSError("killed while writing")

    with monkeypatch.context() as patch:
        patch.setattr(embedded_broker, "dumps", dies)
        with pytest.raises(Exception, match="Cannot add file"):
            app.send_task("workers.run_trial", args=["t0"], queue=settings.queue, retry=False)
    assert list(folder.iterdir()) == []
    send(app, [("t1", 60.0), ("t2", 60.0)])
    assert received(settings, 2) == ["t1", "t2"]
    assert list(folder.iterdir()) == []
