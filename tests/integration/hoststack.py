"""The platform across hosts of the tests' own (#33, `tests.hosts`): RabbitMQ, SecantusDB and
the scheduler on a "services" host, real `sweepstack worker` processes on worker hosts that
reach them only over the hosts' network, and the checks of the chaos harness
(`tests.integration.chaos_checks`) read from the store by the test process.

    with Services(tmp, ["host-a", "host-b"]) as services:         # once per module
        with HostStack(services, tmp / "run") as stack:            # once per test
            stack.start_worker(services.hosts["host-a"])
            stack.start_scheduler()
            sweep_id, total = stack.submit(spec)
            stack.check_ended({sweep_id: ("label", total)}, timeout=60)

`Services(..., rabbit=None)` leaves the broker to the caller (a cluster of several nodes,
`Services.broker_url` set to a failover list).
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kombu import Connection

from core.settings import Settings
from scheduler.enqueue import sender_app
from tests.hosts import Host, Hosts, HostsUnavailable
from tests.integration.chaos_checks import TERMINAL, Check, check_sweeps, count_drift
from tests.integration.stack import Process, Stack, wait_for
from tests.services import RabbitNode, SecantusProcess

SERVICES = "services"


class Services:
    """The hosts (a "services" host first, then `workers`), a RabbitMQ node (unless `rabbit`
    is False) and a SecantusDB on the services host. `close` removes all of it."""

    def __init__(
        self, tmp: Path, workers: Sequence[str], *, extra: Sequence[str] = (), rabbit: bool = True
    ) -> None:
        self.tmp = tmp
        self.hosts = Hosts(tmp, [SERVICES, *workers, *extra])
        self.node: RabbitNode | None = None
        self.store: SecantusProcess | None = None
        try:
            (tmp / "store").mkdir(parents=True, exist_ok=True)
            self.store = SecantusProcess(tmp / "store" / "data", host=self.services)
            if rabbit:
                self.node = RabbitNode(tmp / "rabbit", host=self.services)
        except BaseException:
            self.close()
            raise
        self.broker_url = self.node.url if self.node is not None else ""

    @property
    def services(self) -> Host:
        return self.hosts[SERVICES]

    @property
    def mongo_url(self) -> str:
        assert self.store is not None
        return self.store.url

    def close(self) -> None:
        if self.node is not None:
            self.node.close()
        if self.store is not None:
            self.store.stop()
        self.hosts.close()

    def __enter__(self) -> Services:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def start_services(tmp: Path, workers: Sequence[str], **kwargs: Any) -> Services:
    """`Services`, or pytest's failure (never a skip) where namespaces cannot be made."""
    import pytest

    try:
        return Services(tmp, workers, **kwargs)
    except HostsUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)


class HostWorker(Process):
    """`sweepstack worker --workers 1 --name NAME` on a host."""

    def __init__(self, host: Host, env: dict[str, str], log_path: Path, name: str) -> None:
        self.host, self.name = host, name
        argv = [sys.executable, "-m", "cli.main", "worker", "--workers", "1", "--name", name]
        super().__init__(host.command(argv), env, log_path, " ready.", f"worker {name}")


class HostScheduler(Process):
    """`sweepstack scheduler` on a host."""

    def __init__(self, host: Host, env: dict[str, str], log_path: Path, lease: float = 3) -> None:
        argv = [sys.executable, "-m", "cli.main", "scheduler", "--lease", str(lease)]
        super().__init__(host.command(argv), env, log_path, "feeding sweeps every", "scheduler")


class HostStack(Stack):
    """A queue and a database of the test's own on `services`, with workers on hosts and a
    scheduler on the services host started on demand; `close` removes them. The heartbeat
    is 1 s and a trial is stale after `stale_after` seconds; `env` adds settings."""

    def __init__(
        self,
        services: Services,
        tmp: Path,
        stale_after: float = 5.0,
        env: dict[str, str] | None = None,
    ) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        super().__init__(
            services.broker_url, services.mongo_url, f"sweepstack_hosts_{uuid.uuid4().hex[:8]}", tmp
        )
        self.services = services
        self.env.update(
            {
                "SWEEPSTACK_STALE_AFTER_SECONDS": str(stale_after),
                "SWEEPSTACK_HEARTBEAT_SECONDS": "1",
                "SWEEPSTACK_LOG_LEVEL": "INFO",
                # Processes on other hosts have no use for the machine's torch thread count.
                "SWEEPSTACK_TORCH_THREADS": "1",
                **(env or {}),
            }
        )
        # The test process sends with the same settings as the hosts' processes.
        self.settings = Settings.from_env(self.env)
        self.app = sender_app(self.settings)
        self.schedulers: list[HostScheduler] = []

    def start_worker(self, host: Host, name: str | None = None) -> HostWorker:  # type: ignore[override]
        name = name or f"{host.name}-{len(self.workers)}"
        worker = HostWorker(
            host, self.env, self.tmp / f"worker-{name}-{len(self.workers)}.log", name
        )
        self.workers.append(worker)  # type: ignore[arg-type]
        return worker

    def start_scheduler(self) -> HostScheduler:
        scheduler = HostScheduler(
            self.services.services, self.env, self.tmp / f"scheduler-{len(self.schedulers)}.log"
        )
        self.schedulers.append(scheduler)
        return scheduler

    def running_on(self, host: Host, sweep_id: str) -> list[dict[str, Any]]:
        """The trials of the sweep running on `host` now (their documents)."""
        return list(
            self.store.db["trials"].find(
                {"sweep_id": sweep_id, "state": "running", "worker.host": host.name}
            )
        )

    def check_ended(
        self, sweeps: dict[str, tuple[str, int]], timeout: float
    ) -> list[dict[str, Any]]:
        """Wait for every trial of `sweeps` (id -> (label, planned trials)) to end, then hold
        the chaos harness's checks: each trial created once and ended once, no (trial,
        attempt, epoch) row twice, every epoch row of the final attempt, counts equal to a
        recount. Every trial document."""
        db = self.store.db

        def ended() -> bool:
            return all(
                len(docs := list(db["trials"].find({"sweep_id": sid}))) == total
                and all(d["state"] in TERMINAL for d in docs)
                for sid, (_, total) in sweeps.items()
            )

        try:
            wait_for(ended, timeout, "every trial to end", every=0.5)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.logs()}") from None

        def settled() -> bool:
            return all(
                not count_drift(db["sweeps"].find_one({"_id": sid}) or {},
                                list(db["trials"].find({"sweep_id": sid})))
                for sid in sweeps
            )  # fmt: skip

        wait_for(settled, 30, "the counts to agree with the trials", every=0.5)
        every, checks, _ = check_sweeps(db, sweeps, True, 0.0)
        wrong: list[Check] = [c for c in checks if not c.ok]
        assert not wrong, "\n".join(f"{c.name}: {c.detail}" for c in wrong)
        return every

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.log_path.name}\n{p.log_path.read_text()[-3000:]}"
            for p in [*self.workers, *self.schedulers]
        )

    def queue_depth(self) -> int:
        with Connection(self.settings.broker_url) as conn:
            _, messages, _ = conn.default_channel.queue_declare(self.queue, passive=True)
            return messages

    def close(self) -> None:
        for scheduler in self.schedulers:
            scheduler.stop()
        super().close()

    def __enter__(self) -> HostStack:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
