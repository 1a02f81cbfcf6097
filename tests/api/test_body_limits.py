"""Issue 16's reproducers for request bodies of every transfer encoding, through real HTTP
servers (Werkzeug's in a thread, and gunicorn as production serves the API): a chunked
body over the limit is 413 and never cut short into a different valid spec, one under it
is read whole."""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from werkzeug.serving import make_server

from cli.app import create_app
from core.settings import Settings
from core.store.store import Store
from scheduler.enqueue import sender_app
from tests.api import ALICE, SWEEPS, YAML, queue_depth


@pytest.fixture
def server(settings: Settings, store: Store) -> Iterator[tuple[int, Settings]]:
    """The app behind Werkzeug's HTTP server in a thread, with the default 1 MiB limit."""
    real = dataclasses.replace(settings, api_max_body_bytes=1_048_576)
    app: Flask = create_app(real, store=store, sender=sender_app(real))
    httpd = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_port, real
    finally:
        httpd.shutdown()
        thread.join(10)


def post_chunked(port: int, body: bytes) -> tuple[int, dict[str, Any]]:
    """POST `body` as a YAML spec with ``Transfer-Encoding: chunked`` (no Content-Length)."""
    chunks = (body[i : i + 65536] for i in range(0, len(body), 65536))
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(
            "POST",
            SWEEPS,
            body=chunks,
            headers={**ALICE, **YAML, "Transfer-Encoding": "chunked"},
            encode_chunked=True,
        )
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def padded_spec(size: int) -> bytes:
    """A YAML spec whose `model` section comes after a comment that makes it `size` bytes:
    cut at 1 MiB it is still valid YAML, a different sweep of one trial."""
    head = "name: chunked\ndataset: {name: iris}\ntraining: {epochs: 1}\n# "
    tail = "\nmodel:\n  hidden_units: [8, 16]\n"
    return (head + "x" * (size - len(head) - len(tail)) + tail).encode()


def test_a_chunked_body_over_the_limit_is_413_never_cut(server: tuple[int, Settings]) -> None:
    port, settings = server
    status, body = post_chunked(port, padded_spec(1_300_000))
    assert (status, body["code"]) == (413, "body_too_large")
    status, body = post_chunked(port, padded_spec(settings.api_max_body_bytes + 1))
    assert status == 413
    assert queue_depth(settings) == 0


def test_a_chunked_body_under_the_limit_is_read_whole(server: tuple[int, Settings]) -> None:
    port, settings = server
    status, body = post_chunked(port, padded_spec(settings.api_max_body_bytes))
    assert status == 201 and body["trials"] == 2  # the model section at its end was read
    status, body = post_chunked(port, padded_spec(200_000))
    assert status == 201 and body["trials"] == 2


GUNICORN_APP = """
from cli.app import create_app
from core.settings import Settings

app = create_app(Settings(broker_url="amqp://unused//", mongo_url="mongodb://unused",
                          api_tokens={"alice-token-0123456789abcdef0123456789": "alice"}))
"""


def test_gunicorn_refuses_a_chunked_body_over_the_limit_and_reads_one_under_it(
    tmp_path: Path,
) -> None:
    """The same through gunicorn, which serves the API in production: over the limit 413,
    at the limit the whole body is read (its last line breaks a rule: 422, before the
    store or broker is needed)."""
    (tmp_path / "limits_app.py").write_text(GUNICORN_APP)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    gunicorn = Path(sys.executable).parent / "gunicorn"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    proc = subprocess.Popen(
        [str(gunicorn), "-b", f"127.0.0.1:{port}", "-w", "1", "limits_app:app"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        invalid = padded_spec(1_048_576).replace(b"[8, 16]", b"[8, -1]")
        assert post_chunked(port, padded_spec(1_300_000))[0] == 413
        status, body = post_chunked(port, invalid)
        assert status == 422 and body["details"]["problems"][0]["path"] == "model.hidden_units[1]"
    finally:
        proc.terminate()
        proc.wait(30)
