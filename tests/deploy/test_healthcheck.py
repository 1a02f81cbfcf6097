"""The healthcheck script the images run, against a real HTTP server, broker and store."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from types import ModuleType
from typing import Any

import pytest

from tests.deploy import HEALTHCHECK

# --- the images' healthcheck script ---------------------------------------------------------


def _healthcheck(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(HEALTHCHECK), *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={**os.environ, "SWEEPSTACK_HEALTHCHECK_TIMEOUT": "2", **(env or {})},
    )


class _Status(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        code = 200 if self.path == "/ok" else 503
        self.send_response(code)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def http_url() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Status)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_healthcheck_http(http_url: str) -> None:
    assert _healthcheck("http", f"{http_url}/ok").returncode == 0
    down = _healthcheck("http", f"{http_url}/health")
    assert down.returncode == 1 and "HTTP 503" in down.stdout
    assert _healthcheck("bogus").returncode == 2


@pytest.fixture(scope="module")
def healthcheck() -> ModuleType:
    """docker/healthcheck.py as a module (it is a script in the images, not a package)."""
    spec = importlib.util.spec_from_file_location("sweepstack_healthcheck", HEALTHCHECK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_healthcheck_deps(
    healthcheck: ModuleType, broker_url: str, secantus_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWEEPSTACK_BROKER_URL", broker_url)
    monkeypatch.setenv("SWEEPSTACK_MONGO_URL", secantus_url)
    assert healthcheck.check_deps(timeout=2.0) == "broker and store answer"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    monkeypatch.setenv("SWEEPSTACK_MONGO_URL", f"mongodb://127.0.0.1:{closed}/")
    with pytest.raises(Exception, match=f"127.0.0.1:{closed}"):
        healthcheck.check_deps(timeout=0.5)


def test_worker_node_names_are_read_from_the_worker_command_lines(
    healthcheck: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cli.worker import worker_commands

    def names(commands: list[tuple[list[str], dict[str, str]]]) -> list[str]:
        return sorted(cmd[cmd.index("--hostname") + 1].replace("%h", "box") for cmd, _ in commands)

    others = [["/usr/bin/python3", "/usr/local/bin/sweepstack", "worker", "--workers", "2"], ["sh"]]
    cpu = [cmd for cmd, _ in worker_commands(2, None, "INFO", "q")]
    # A prefork pool's children have their parent's command line: one name.
    assert healthcheck.worker_nodes("cpu", "box", [*cpu, *cpu, *others]) == names(
        worker_commands(2, None, "INFO", "q")
    )
    named = [cmd for cmd, _ in worker_commands(1, None, "INFO", "q", name="big@%h")]
    assert healthcheck.worker_nodes("cpu", "box", named) == ["big@box"]
    titled = [["[celeryd: cpu-7@box:MainProcess] -active- (-A workers.main worker)"]]
    assert healthcheck.worker_nodes("cpu", "box", titled) == ["cpu-7@box"]  # setproctitle
    monkeypatch.setenv("WORKER_GPUS", "0,1")
    gpu = [cmd for cmd, _ in worker_commands(1, "0,1", "INFO", "q")]
    assert healthcheck.worker_nodes("gpu", "box", gpu) == names(
        worker_commands(1, "0,1", "INFO", "q")
    )
    with pytest.raises(RuntimeError, match="1 worker processes for 2 GPUs"):
        healthcheck.worker_nodes("gpu", "box", gpu[:1])
    with pytest.raises(RuntimeError, match="no celery worker process"):
        healthcheck.worker_nodes("cpu", "box", others)


def test_healthcheck_pings_a_real_worker_by_name(
    healthcheck: ModuleType, broker_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = f"deploy-test-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("SWEEPSTACK_BROKER_URL", broker_url)

    def mine() -> list[list[str]]:  # this test's worker among the processes of this machine
        return [argv for argv in healthcheck.process_argvs() if f"cpu@{host}" in argv]

    with pytest.raises(RuntimeError, match="no celery worker process"):
        healthcheck.check_celery("cpu", timeout=1.0, host=host, argvs=mine())
    absent = [["python", "-m", "celery", "worker", "--hostname", "cpu@%h"]]
    with pytest.raises(RuntimeError, match=f"no pong from cpu@{host}"):
        healthcheck.check_celery("cpu", timeout=1.0, host=host, argvs=absent)
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "--broker",
            broker_url,
            "worker",
            "--pool",
            "solo",
            "--hostname",
            f"cpu@{host}",
            "-Q",
            f"{host}.unused",
            "--without-mingle",
            "--without-gossip",
            "--loglevel",
            "WARNING",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                line = healthcheck.check_celery("cpu", timeout=1.0, host=host, argvs=mine())
                break
            except RuntimeError:
                if time.monotonic() > deadline or worker.poll() is not None:
                    raise
        assert line == f"pong from cpu@{host}"
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        from kombu import Connection

        with Connection(broker_url) as conn:  # the queue and exchange `-Q` declared
            conn.default_channel.queue_delete(f"{host}.unused")
            conn.default_channel.exchange_delete(f"{host}.unused")
