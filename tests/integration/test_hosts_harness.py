"""The multi-host harness itself (`tests.hosts`): hosts with their own names and addresses,
reachable from one another and from the test process, not from the machine's loopback, and
nothing left behind, even by a harness that was killed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hosts import RECORDS, Hosts, HostsUnavailable

PROBE = (
    "import socket, sys\n"
    "def reach(addr, port):\n"
    "    try:\n"
    "        socket.create_connection((addr, port), timeout=1).close(); return 'open'\n"
    "    except OSError as e:\n"
    "        return type(e).__name__\n"
    "print(socket.gethostname(), reach(sys.argv[1], int(sys.argv[2])),"
    " reach('127.0.0.1', 5672))\n"
)


def make_hosts(tmp: Path, names: list[str]) -> Hosts:
    """`Hosts`, or the test fails (never skips) saying why namespaces cannot be made."""
    try:
        return Hosts(tmp, names)
    except HostsUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)


def test_hosts_have_their_names_and_reach_only_the_network(tmp_path: Path) -> None:
    with make_hosts(tmp_path, ["one", "two"]) as hosts:
        one, two = hosts["one"], hosts["two"]
        assert one.address != two.address
        serve = f"import socket, time; s = socket.create_server(('{two.address}', 7000))"
        serve += "; time.sleep(30)"
        listener = two.popen([sys.executable, "-c", serve])
        try:
            out = ""
            for _ in range(50):  # the listener takes a moment to bind
                out = one.run([sys.executable, "-c", PROBE, two.address, "7000"]).stdout.split()
                if out[1] == "open":
                    break
            # Its own host name; the other host reachable; the machine's RabbitMQ not.
            assert out[0] == "one" and out[1] == "open", out
            assert out[2] != "open", out
        finally:
            listener.kill()
        cut = one.run([sys.executable, "-c", PROBE, hosts.observer, "9"]).stdout.split()
        assert cut[1] == "ConnectionRefusedError", cut  # the observer answers: the link works
        one.cut()
        cut = one.run([sys.executable, "-c", PROBE, hosts.observer, "9"]).stdout.split()
        assert cut[1] in ("TimeoutError", "timeout", "OSError"), cut
        one.restore()
        namespaces = [h.namespace for h in hosts]
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(ns in listed for ns in namespaces)


def test_leftovers_of_a_killed_harness_are_removed(tmp_path: Path) -> None:
    # A harness in a child process killed -9 after making its hosts leaves them behind ...
    script = (
        "import os, pathlib, subprocess\n"
        "from tests.hosts import Hosts\n"
        f"h = Hosts(pathlib.Path({str(tmp_path)!r}), ['left'])\n"
        "h['left'].popen(['sleep', '300'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "print(h['left'].namespace, flush=True)\n"
        "os.kill(os.getpid(), 9)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    namespace = done.stdout.strip()
    assert namespace, done.stderr
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert namespace in listed
    # ... and the next harness removes them (and their processes) before it starts.
    with make_hosts(tmp_path, ["next"]):
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert namespace not in listed
        records = [json.loads(p.read_text()) for p in RECORDS.glob("*.json")]
        assert not any(namespace in r["namespaces"] for r in records)
