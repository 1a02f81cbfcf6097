"""Container healthchecks for Sweepstack's images (Docker ``HEALTHCHECK`` and compose).

    healthcheck.py http URL          URL answers 2xx within the timeout
    healthcheck.py celery cpu|gpu    every Celery worker process of this container answers a ping
    healthcheck.py deps              the broker and the store named by SWEEPSTACK_* answer

Exit 0 when healthy and 1 when not (Docker's contract); one line on stdout says why, and
``docker inspect`` shows it. The http mode needs only the standard library (the Flower
image has no Sweepstack code); the others import celery, kombu and pymongo lazily.

Worker node names are unique per process (``sweepstack worker`` names them ``cpu-PID@HOST``
and ``gpu<N>-PID@HOST``, or after ``--name``), so the check reads them where they are
written: the ``--hostname`` (``-n``) argument of every ``celery ... worker`` process in this
container (``/proc/*/cmdline``), with ``%h`` (and ``%n``, ``%d``) expanded as Celery does.
Every one found must answer; a GPU container must have one per GPU of ``WORKER_GPUS``
(``all`` or indices like ``0,1``; ``all`` asks ``nvidia-smi``, as the worker does).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path

_TITLE = re.compile(r"^\[celeryd: ([^\]:\s]+)")
TIMEOUT_SECONDS = float(os.environ.get("SWEEPSTACK_HEALTHCHECK_TIMEOUT", "5"))


def check_http(url: str, timeout: float = TIMEOUT_SECONDS) -> str:
    """GET `url`; raise unless it answers 2xx."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return f"{url}: HTTP {response.status}"
    except urllib.error.HTTPError as err:
        raise RuntimeError(f"{url}: HTTP {err.code}") from None
    except (urllib.error.URLError, OSError) as err:
        raise RuntimeError(f"{url}: {getattr(err, 'reason', err)}") from None


def gpu_indices(spec: str) -> list[str]:
    """The GPU indices a ``--gpus`` value names (``all``: every GPU nvidia-smi lists)."""
    if spec.strip() in ("", "all"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            ).stdout
        except (OSError, subprocess.TimeoutExpired) as err:
            raise RuntimeError(f"nvidia-smi: {err}") from None
        found = [line.strip() for line in out.splitlines() if line.strip()]
        if not found:
            raise RuntimeError("nvidia-smi lists no GPU in this container")
        return found
    return [g.strip() for g in spec.split(",") if g.strip()]


def process_argvs(proc: Path = Path("/proc")) -> list[list[str]]:
    """The command lines of the processes this container can see."""
    argvs = []
    for cmdline in proc.glob("[0-9]*/cmdline"):
        try:
            raw = cmdline.read_bytes()
        except OSError:  # the process ended while we looked
            continue
        if raw:
            argvs.append(raw.rstrip(b"\0").decode(errors="replace").split("\0"))
    return argvs


def _node_name(argv: list[str]) -> str | None:
    """The node name a ``celery ... worker`` command line asks for (the last one wins), or
    shows in its title (``[celeryd: NAME:MainProcess]``, where setproctitle is installed)."""
    titled = _TITLE.match(" ".join(argv))
    if titled:
        return titled.group(1)
    if "worker" not in argv or not any(Path(a).name.startswith("celery") for a in argv[:4]):
        return None
    name = None
    for i, arg in enumerate(argv):
        if arg in ("--hostname", "-n") and i + 1 < len(argv):
            name = argv[i + 1]
        elif arg.startswith("--hostname="):
            name = arg.partition("=")[2]
    return name


def worker_nodes(
    kind: str, host: str | None = None, argvs: Iterable[list[str]] | None = None
) -> list[str]:
    """Celery node names of this container's worker processes, from their command lines
    (`argvs`; default: every process's)."""
    if kind not in ("cpu", "gpu"):
        raise ValueError(f"worker kind must be cpu or gpu, got {kind!r}")
    host = host or socket.gethostname()
    short, _, domain = host.partition(".")
    names = set()
    for argv in process_argvs() if argvs is None else argvs:
        name = _node_name(argv)
        if name:
            names.add(name.replace("%h", host).replace("%n", short).replace("%d", domain))
    if not names:
        raise RuntimeError("no celery worker process in this container")
    if kind == "gpu":
        gpus = gpu_indices(os.environ.get("WORKER_GPUS", "all"))
        if len(names) < len(gpus):
            raise RuntimeError(
                f"{len(names)} worker processes for {len(gpus)} GPUs: {', '.join(sorted(names))}"
            )
    return sorted(names)


def _broker_url() -> str:
    url = os.environ.get("SWEEPSTACK_BROKER_URL")
    if not url:
        raise RuntimeError("SWEEPSTACK_BROKER_URL is not set")
    return url


def check_celery(
    kind: str,
    timeout: float = TIMEOUT_SECONDS,
    host: str | None = None,
    argvs: Iterable[list[str]] | None = None,
) -> str:
    """Ping this container's worker nodes by name; raise unless all of them answer."""
    from celery import Celery

    nodes = worker_nodes(kind, host, argvs)
    app = Celery("sweepstack-healthcheck", broker=_broker_url(), set_as_current=False)
    app.conf.update(broker_connection_timeout=timeout, broker_connection_retry=False)
    replies = app.control.ping(destination=nodes, timeout=timeout)
    answered = {name for reply in replies for name in reply}
    missing = [n for n in nodes if n not in answered]
    if missing:
        raise RuntimeError(f"no pong from {', '.join(missing)} within {timeout:g} s")
    return f"pong from {', '.join(nodes)}"


def check_deps(timeout: float = TIMEOUT_SECONDS) -> str:
    """Connect to the broker and ping the store, as the scheduler loop needs both."""
    from kombu import Connection
    from pymongo import MongoClient

    with Connection(_broker_url(), connect_timeout=timeout) as conn:
        conn.ensure_connection(max_retries=1)
    mongo_url = os.environ.get("SWEEPSTACK_MONGO_URL")
    if not mongo_url:
        raise RuntimeError("SWEEPSTACK_MONGO_URL is not set")
    client: MongoClient = MongoClient(
        mongo_url,
        serverSelectionTimeoutMS=int(timeout * 1000),
        connectTimeoutMS=int(timeout * 1000),
    )
    try:
        client.admin.command("ping")
    finally:
        client.close()
    return "broker and store answer"


def main(argv: list[str]) -> int:
    """Run one check; print one line; 0 healthy, 1 not, 2 usage."""
    usage = "usage: healthcheck.py http URL | celery cpu|gpu | deps"
    try:
        if len(argv) == 2 and argv[0] == "http":
            line = check_http(argv[1])
        elif len(argv) == 2 and argv[0] == "celery" and argv[1] in ("cpu", "gpu"):
            line = check_celery(argv[1])
        elif argv == ["deps"]:
            line = check_deps()
        else:
            print(usage, file=sys.stderr)
            return 2
    except Exception as err:  # any failure is "unhealthy", with its reason on one line
        reason = " ".join(str(err).split())
        print(f"unhealthy: {type(err).__name__}: {reason[:300]}")
        return 1
    print(f"healthy: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
