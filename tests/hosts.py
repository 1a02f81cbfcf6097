"""Hosts of the tests' own (#33): network namespaces on a private network, each with its own
address, host name and processes, so that "another host" is a real network peer.

    with Hosts(tmp, ["services", "host-a", "host-b"]) as hosts:
        services, a = hosts["services"], hosts["host-a"]
        node = RabbitNode(tmp / "rabbit", host=services)      # tests.services
        store = SecantusProcess(tmp / "store", host=services)
        a.command(argv)   # argv run in host-a's namespace, with host-a's host name
        a.popen(argv, env=env, stdout=log)
        a.kill_all()      # kill -9 every process of host-a
        a.cut(); a.restore()          # its link down, then up again
        a.slow(); a.unslow()          # a slow, lossy link (netem where the kernel has it)

What it makes: a bridge in the test's own (root) namespace with the address
`Hosts.observer` (10.213.N.254/24: the test process reads the store and the broker from
there), and per host a namespace joined to the bridge by a veth pair, with the address
10.213.N.(i+1) (`Host.address`), its loopback up, no route anywhere else (a host reaches the
others and the observer, nothing on 127.0.0.1 of the machine), and an ``/etc/hosts`` of its
own (``/etc/netns/NS/hosts``, which ``ip netns exec`` mounts) naming every host, which
Erlang's node names need. A process run through `Host.command` or `Host.popen` starts in the
namespace under ``unshare --uts`` with the host's name, so ``socket.gethostname()`` is the
host's name. N is a /24 of 10.213.0.0/16 that no interface of the machine uses and no other
live harness holds.

Everything is removed by `close` (the context manager's exit, and an ``atexit`` finalizer for
a test process that exits without it): every process in a namespace is killed, then the
namespaces, the bridge and the hosts files go. A harness killed outright (kill -9 of pytest)
leaves its record in `RECORDS` with its pid; the next harness to start removes what every
record of a dead process names, before it makes anything.

Namespaces need root (CAP_SYS_ADMIN and CAP_NET_ADMIN); where they cannot be made, `Hosts`
raises `HostsUnavailable` with what is missing, and a test fails with it (never skips).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The private range the harness takes a /24 of (one per live harness).
RANGE = ipaddress.ip_network("10.213.0.0/16")
#: Where each live harness keeps the record of what it made (its pid, namespaces, bridge).
RECORDS = Path("/run/sweepstack-hosts")
#: Every name the harness gives (namespaces, links) starts with this and the subnet's number.
PREFIX = "ssh"


class HostsUnavailable(RuntimeError):
    """Network namespaces cannot be made here (not root, no `ip`, a kernel without them)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


def _tc(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["tc", *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"tc {' '.join(args)}: {done.stderr.strip()}")
    return done


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def netem_available() -> bool:
    """Whether the kernel has sch_netem (delay and loss on a link); many minimal kernels
    have tbf (a rate limit whose full queue drops packets) but not netem."""
    probe = f"{PREFIX}probe{os.getpid() % 10000}"
    if _ip("link", "add", probe, "type", "dummy", check=False).returncode != 0:
        return False
    try:
        return _tc("qdisc", "add", "dev", probe, "root", "netem", "delay", "1ms",
                   check=False).returncode == 0  # fmt: skip
    finally:
        _ip("link", "del", probe, check=False)


@dataclass
class Host:
    """One namespace: its host name, address, namespace name and the bridge-side end of its
    link (what `cut` and `slow` act on)."""

    name: str
    address: str
    namespace: str
    link: str

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` as a command that runs it on this host (in its namespace, with its name)."""
        return [
            "ip", "netns", "exec", self.namespace, "unshare", "--uts", "--",
            "sh", "-c", 'hostname "$0" && exec "$@"', self.name, *argv,
        ]  # fmt: skip

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
        """`subprocess.Popen` of `argv` on this host, in a session of its own."""
        kwargs.setdefault("start_new_session", True)
        return subprocess.Popen(self.command(argv), **kwargs)

    def run(self, argv: Sequence[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run `argv` on this host to its end; its output (checked)."""
        return subprocess.run(
            self.command(argv), capture_output=True, text=True, timeout=timeout, check=True
        )

    def pids(self) -> list[int]:
        """Every process in this host's namespace."""
        out = _ip("netns", "pids", self.namespace, check=False).stdout
        return [int(p) for p in out.split()]

    def kill_all(self) -> int:
        """kill -9 every process of the host (a power cut of the machine; its network stays,
        so its peers see its connections reset). The number killed."""
        return _kill_namespace(self.namespace)

    def cut(self) -> None:
        """Take the host's link down: no packet in or out, no reset either (a pulled cable)."""
        _ip("link", "set", self.link, "down")

    def restore(self) -> None:
        """Bring the link up again."""
        _ip("link", "set", self.link, "up")

    def slow(self, rate: str = "1mbit", delay_ms: int = 40, loss_percent: float = 2.0) -> str:
        """Make the host's link slow and lossy both ways; what was applied, in words. With
        sch_netem: `delay_ms` (+-25%) and `loss_percent` random loss, at `rate`. Without it:
        a token bucket at `rate` whose queue holds `delay_ms` of traffic, so bursts wait up
        to that long and what overflows is dropped."""
        inside = ["ip", "netns", "exec", self.namespace, "tc"]
        if netem_available():
            spec = [
                "netem", "delay", f"{delay_ms}ms", f"{max(1, delay_ms // 4)}ms",
                "loss", f"{loss_percent}%", "rate", rate,
            ]  # fmt: skip
            said = f"netem delay {delay_ms} ms, loss {loss_percent}%, rate {rate}"
        else:
            spec = ["tbf", "rate", rate, "burst", "16kb", "latency", f"{delay_ms}ms"]
            said = f"tbf rate {rate}, queue {delay_ms} ms, overflow dropped (no sch_netem)"
        _tc("qdisc", "replace", "dev", self.link, "root", *spec)
        subprocess.run(
            [*inside, "qdisc", "replace", "dev", "eth0", "root", *spec], check=True,
            capture_output=True,
        )  # fmt: skip
        return said

    def unslow(self) -> None:
        """Take `slow` off."""
        _tc("qdisc", "del", "dev", self.link, "root", check=False)
        subprocess.run(
            ["ip", "netns", "exec", self.namespace, "tc", "qdisc", "del", "dev", "eth0", "root"],
            check=False, capture_output=True,
        )  # fmt: skip


def _kill_namespace(namespace: str) -> int:
    killed = 0
    for _ in range(5):  # a process may fork while the first ones die
        pids = [int(p) for p in _ip("netns", "pids", namespace, check=False).stdout.split()]
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        time.sleep(0.2)
    return killed


def _remove(record: dict[str, Any]) -> None:
    """Remove what a record names: processes, namespaces, bridge, hosts files."""
    for namespace in record.get("namespaces", []):
        _kill_namespace(namespace)
        _ip("netns", "del", namespace, check=False)
        shutil.rmtree(Path("/etc/netns") / namespace, ignore_errors=True)
    for link in [*record.get("links", []), record.get("bridge")]:
        if link and _ip("link", "show", link, check=False).returncode == 0:
            _ip("link", "del", link, check=False)


class Hosts:
    """N hosts on a private network of their own (the module docstring); `hosts[name]` is a
    `Host`. `close` removes everything; use it as a context manager."""

    def __init__(self, tmp: Path, names: Sequence[str]) -> None:
        if len(set(names)) != len(names) or not names or len(names) > 200:
            raise ValueError(f"host names must be distinct, 1 to 200 of them, got {names!r}")
        _check_permitted()
        self.tmp = tmp
        self.hosts: dict[str, Host] = {}
        self._closed = False
        self.subnet, self.record = self._reserve(names)
        atexit.register(self.close)
        try:
            self._make(names)
        except BaseException:
            self.close()
            raise

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    def __iter__(self) -> Iterator[Host]:
        return iter(self.hosts.values())

    @property
    def observer(self) -> str:
        """The test process's own address on the network (the bridge's)."""
        return str(self.subnet[254])

    def _reserve(self, names: Sequence[str]) -> tuple[ipaddress.IPv4Network, Path]:
        """Under a lock: remove what dead harnesses left, then take a free /24 and record it."""
        RECORDS.mkdir(parents=True, exist_ok=True)
        with open(RECORDS / "lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            held: set[int] = set()
            for path in RECORDS.glob("*.json"):
                try:
                    record = json.loads(path.read_text())
                except (OSError, ValueError):
                    path.unlink(missing_ok=True)
                    continue
                if _alive(int(record.get("pid", 0))):
                    held.add(int(path.stem))
                else:
                    _remove(record)
                    path.unlink(missing_ok=True)
            used = _ip("-4", "-o", "addr").stdout
            for n in range(1, 254):
                subnet = ipaddress.ip_network(f"10.213.{n}.0/24")
                if n not in held and f" 10.213.{n}." not in used:
                    break
            else:
                raise HostsUnavailable("no free /24 left in 10.213.0.0/16 for the hosts")
            record = {
                "pid": os.getpid(),
                "bridge": f"{PREFIX}{n}br",
                "namespaces": [f"{PREFIX}{n}-{name}" for name in names],
                "links": [f"{PREFIX}{n}{end}{i}" for i in range(len(names)) for end in "vp"],
            }
            path = RECORDS / f"{n}.json"
            path.write_text(json.dumps(record))
        return subnet, path

    def _make(self, names: Sequence[str]) -> None:
        n = self.subnet.network_address.packed[2]
        bridge = f"{PREFIX}{n}br"
        _ip("link", "add", bridge, "type", "bridge")
        _ip("addr", "add", f"{self.observer}/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        hosts_file = "127.0.0.1 localhost\n" + "".join(
            f"{self.subnet[i + 1]} {name}\n" for i, name in enumerate(names)
        )
        for i, name in enumerate(names):
            namespace = f"{PREFIX}{n}-{name}"
            host = Host(name, str(self.subnet[i + 1]), namespace, f"{PREFIX}{n}v{i}")
            _ip("netns", "add", namespace)
            etc = Path("/etc/netns") / namespace
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(hosts_file)
            (etc / "hostname").write_text(name + "\n")
            inner = f"{PREFIX}{n}p{i}"
            _ip("link", "add", host.link, "type", "veth", "peer", "name", inner)
            _ip("link", "set", inner, "netns", namespace)
            _ip("-n", namespace, "link", "set", inner, "name", "eth0")
            _ip("-n", namespace, "addr", "add", f"{host.address}/24", "dev", "eth0")
            _ip("-n", namespace, "link", "set", "eth0", "up")
            _ip("-n", namespace, "link", "set", "lo", "up")
            _ip("link", "set", host.link, "master", bridge)
            _ip("link", "set", host.link, "up")
            self.hosts[name] = host

    def close(self) -> None:
        """Kill every process of every host and remove the namespaces, the bridge and the
        record. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(ValueError):
            atexit.unregister(self.close)
        _remove(json.loads(self.record.read_text()))
        self.record.unlink(missing_ok=True)

    def __enter__(self) -> Hosts:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _check_permitted() -> None:
    """Raise `HostsUnavailable` saying what is missing when namespaces cannot be made."""
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        raise HostsUnavailable("the multi-host tests need `ip` (iproute2) and `unshare`")
    if os.geteuid() != 0:
        raise HostsUnavailable(
            "the multi-host tests make network namespaces and veth pairs, which needs root "
            f"(this process runs as uid {os.geteuid()}); run `make test` as root"
        )
    probe = f"{PREFIX}-probe-{os.getpid()}"
    done = _ip("netns", "add", probe, check=False)
    if done.returncode != 0:
        raise HostsUnavailable(
            f"network namespaces are not permitted here (`ip netns add` said: "
            f"{done.stderr.strip()}); the multi-host tests need them"
        )
    _ip("netns", "del", probe, check=False)
