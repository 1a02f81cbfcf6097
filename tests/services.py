"""Real services for tests: SecantusDB processes and RabbitMQ reachability.

`make test` starts RabbitMQ (if needed) and one SecantusDB, and exports their URLs; when
pytest runs on its own, a SecantusDB is started here instead. A missing RabbitMQ fails the
test that needs it, loudly: there is no stand-in.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest

VENV_BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(
    host: str, port: int, timeout: float, proc: subprocess.Popen | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout}s")


def reachable(url: str, timeout: float = 2.0) -> bool:
    parsed = urlparse(url)
    host = parsed.hostname or "127.0.0.1"
    port = parsed.port or {"amqp": 5672, "mongodb": 27017}.get(parsed.scheme, 0)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class SecantusProcess:
    """A SecantusDB server in its own process, on a free port, with its own data folder."""

    def __init__(self, data_dir: Path, port: int | None = None) -> None:
        self.port = port or free_port()
        self.data_dir = data_dir
        self.log = open(data_dir.parent / f"secantus-{self.port}.log", "w")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                str(VENV_BIN / "secantusd-py"),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--storage-path",
                str(data_dir),
                "--log-level",
                "WARNING",
                # As `sweepstack run`'s store (cli.embedded_store): no oplog, and the journal
                # synced before a write is acknowledged.
                "--standalone",
                "--sync-on-commit",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_listening("127.0.0.1", self.port, 30, self.proc)

    @property
    def url(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/?retryWrites=false"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def broker_url_or_fail() -> str:
    url = os.environ.get("SWEEPSTACK_TEST_BROKER_URL", "amqp://guest:guest@127.0.0.1:5672//")
    if not reachable(url):
        pytest.fail(
            f"RabbitMQ is not reachable at {url}; run the tests with `make test`, which starts it",
            pytrace=False,
        )
    return url
