"""Real services for tests: SecantusDB processes, RabbitMQ reachability, and a TCP proxy
that cuts a service off (an outage).

`make test` starts RabbitMQ (if needed) and one SecantusDB, and exports their URLs; when
pytest runs on its own, a SecantusDB is started here instead. A missing RabbitMQ fails the
test that needs it, loudly: there is no stand-in.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

import pytest

if TYPE_CHECKING:
    from tests.hosts import Host

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
    """A SecantusDB server in its own process, on a free port, with its own data folder;
    on `host` (a `tests.hosts.Host`) when given, listening on the host's address."""

    def __init__(self, data_dir: Path, port: int | None = None, host: Host | None = None) -> None:
        self.port = port or free_port()
        self.data_dir = data_dir
        self.address = host.address if host is not None else "127.0.0.1"
        self.log = open(data_dir.parent / f"secantus-{self.port}.log", "w")  # noqa: SIM115
        argv = [
            str(VENV_BIN / "secantusd-py"),
            "--host",
            self.address,
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
        ]
        self.proc = subprocess.Popen(
            host.command(argv) if host is not None else argv,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=host is not None,
        )
        wait_listening(self.address, self.port, 30, self.proc)

    @property
    def url(self) -> str:
        return f"mongodb://{self.address}:{self.port}/?retryWrites=false"

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


class Proxy:
    """A TCP proxy to `target`, on a free local port, that `cut` turns into an outage: every
    connection through it is shut down and new ones are closed at once, until `restore`."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.open = True
        self.live: set[socket.socket] = set()
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if not self.open:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.live |= {client, upstream}
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(1 << 16):
                sink.sendall(data)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        with self.lock:
            self.live -= {source, sink}
        source.close()  # the other direction's recv then ends too

    def cut(self) -> None:
        self.open = False
        with self.lock:
            for sock in self.live:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            self.live = set()

    def restore(self) -> None:
        self.open = True

    def close(self) -> None:
        self.cut()
        self.listener.close()


RABBITMQ_BIN = Path("/usr/lib/rabbitmq/bin")


class RabbitNode:
    """A RabbitMQ node of its own (a second node beside the system's, on free ports, with
    its own data, logs and Erlang cookie under `folder`), which a test may stop and start:
    the shared broker stays up for everyone else. Started as `rabbitmq-server` in the
    foreground of its own process group; `close` shuts it down.

    On `host` (a `tests.hosts.Host`), the node is ``rabbit@HOST`` on the host's address
    with RabbitMQ's own ports (5672, and 25672 between nodes: the namespace has ports of
    its own) and an epmd of the host's. `cookie` (the same for every node of a cluster)
    and `cluster` (the node names of a cluster to form, ``rabbit@HOST`` each: RabbitMQ's
    classic peer discovery joins the first that runs) are for clusters of such nodes."""

    def __init__(
        self,
        folder: Path,
        host: Host | None = None,
        cookie: str | None = None,
        cluster: list[str] | None = None,
    ) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.host = host
        self.address = host.address if host is not None else "127.0.0.1"
        self.port = free_port() if host is None else 5672
        self.name = (
            f"sweepstack-{os.getpid()}-{self.port}@localhost"
            if host is None
            else f"rabbit@{host.name}"
        )
        home = folder / "home"
        home.mkdir(exist_ok=True)
        cookie_file = home / ".erlang.cookie"
        if not cookie_file.exists():
            cookie_file.write_text(cookie or os.urandom(16).hex().upper())
            cookie_file.chmod(0o400)
        config = folder / "rabbitmq.conf"
        lines = [f"listeners.tcp.1 = {self.address}:{self.port}", "loopback_users = none"]
        if cluster:
            lines.append("cluster_formation.peer_discovery_backend = classic_config")
            lines += [f"cluster_formation.classic_config.nodes.{i} = {node}"
                      for i, node in enumerate(cluster, 1)]  # fmt: skip
        config.write_text("\n".join(lines) + "\n")
        (folder / "rabbitmq-env.conf").write_text("")
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))},
            "HOME": str(home),
            "RABBITMQ_NODENAME": self.name,
            "RABBITMQ_NODE_IP_ADDRESS": self.address,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(free_port() if host is None else 25672),
            "RABBITMQ_CONFIG_FILE": str(config),
            "RABBITMQ_CONF_ENV_FILE": str(folder / "rabbitmq-env.conf"),
            "RABBITMQ_MNESIA_BASE": str(folder / "mnesia"),
            "RABBITMQ_LOG_BASE": str(folder / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(folder / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(folder / "rabbitmq.pid"),
        }
        if host is None:
            self.env["ERL_EPMD_ADDRESS"] = "127.0.0.1"
        self.log = open(folder / "rabbitmq-server.log", "a")  # noqa: SIM115
        self.proc = self._popen([str(RABBITMQ_BIN / "rabbitmq-server")])
        try:
            self._await_startup(90)
        except BaseException:
            self.close()
            raise

    def _popen(self, argv: list[str]) -> subprocess.Popen:
        return subprocess.Popen(
            self.host.command(argv) if self.host is not None else argv,
            env=self.env,
            cwd=self.folder,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@{self.address}:{self.port}//"

    def ctl(self, *args: str, timeout: float = 60) -> str:
        """`rabbitmqctl -n NODE ARGS`; its output, or `RuntimeError` with it."""
        argv = [str(RABBITMQ_BIN / "rabbitmqctl"), "-n", self.name, *args]
        done = subprocess.run(
            self.host.command(argv) if self.host is not None else argv,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)}: {done.stdout}{done.stderr}")
        return done.stdout

    def _await_startup(self, timeout: float) -> None:
        # `await_startup` fails at once while the node is not known to epmd yet.
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rabbitmq-server exited with {self.proc.returncode}")
            try:
                self.ctl("await_startup", "--timeout", str(int(timeout)), timeout=timeout + 30)
                break
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        wait_listening(self.address, self.port, 30)

    def stop_app(self) -> None:
        """Stop the broker (the Erlang node stays): every connection drops."""
        self.ctl("stop_app")

    def start_app(self) -> None:
        """Start the broker again; its durable queues and persistent messages come back."""
        self.ctl("start_app")
        self._await_startup(90)

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self.ctl("shutdown", timeout=60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, 9)
        self.proc.wait()
        self.log.close()
