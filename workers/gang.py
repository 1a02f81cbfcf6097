"""A data-parallel trial over several hosts, gathered through the queue (gang scheduling).

A trial with ``execution.parallel.hosts: H`` is claimed by one worker, as any trial is
(`workers.run_trial`). That worker, the leader, runs the first ``world_size / H`` ranks
(rank 0 among them) and gathers a worker for each of the H - 1 other shares through the
broker (`Gang.hosts_for`):

1. It opens the rendezvous, a c10d TCP store on a free port of `rendezvous_address` (the
   address this host reaches the broker from, or ``SWEEPSTACK_RENDEZVOUS_HOST``), and sends
   one `workers.run_ranks` message per other share: the trial id and attempt, the
   rendezvous address, the share's ranks, the trial's config, the checkpoint's epoch when
   the attempt resumes from one, and a deadline, now plus
   ``execution.parallel.gather_timeout``.
2. A worker that takes such a message (`execute_share`) drops it when the deadline has
   passed or the attempt no longer holds the trial (the leader gave up, or is gone). Else it
   reads the checkpoint the leader resumes from, if any, starts its ranks
   (`workers.training.parallel.run_share`) and waits for them. It writes nothing of the
   trial: the leader alone records it, from rank 0's reports.
3. The ranks rendezvous over the network and train as the ranks of one host do; the
   trial's metrics are those of the same trial on one host.
4. Not every share joined by the deadline (not enough free workers): the leader's ranks
   end, the leader puts the trial back in the queue (`TrialLifecycle.hand_back`, not a
   lost attempt) and sends its message again after a random delay of up to
   `GATHER_RETRY_SECONDS`, freeing its worker meanwhile; the shares that did come end at
   their own rendezvous timeout. No leader waits longer than its deadline, so two such
   trials that compete for the same workers never wait on each other for ever, and the
   random delays let one of them gather first.
5. A rank or a host lost mid-training: the other ranks' collectives fail (a closed
   connection at once, or ``execution.parallel.timeout``), each worker ends its ranks,
   and the leader's attempt ends lost (`AttemptLost`): the stale-heartbeat requeue
   retakes the trial from its last checkpoint, counted by the poison rule. A leader's
   host lost is a dead worker's attempt, retaken the same way.

Any free worker may take a share, one on the leader's own host too (a worker process is a
slot: its cores, or its GPU); spread the workers over hosts to spread the ranks.
"""

from __future__ import annotations

import fcntl
import logging
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from celery import Celery

from core.broker import RANKS_TASK_NAME, time_limits
from core.errors import AttemptLost, NotFound, TrainingError
from core.spec.config import TrialConfig
from core.store.roles import Artifacts, TrialLifecycle
from workers import shutdown

log = logging.getLogger(__name__)

#: The longest random delay before a trial whose ranks were not gathered is tried again.
GATHER_RETRY_SECONDS = 30.0
_SIOCGIFADDR = 0x8915


def rendezvous_address(broker_url: str | None, override: str | None = None) -> str:
    """The address other hosts reach this one at: `override`
    (``SWEEPSTACK_RENDEZVOUS_HOST``), else this host's address on the route to the broker,
    which every worker reaches (no packet is sent: the kernel only picks the route)."""
    if override:
        return override
    parsed = urlparse(broker_url or "")
    host = parsed.hostname
    if not host or parsed.scheme.startswith("filesystem"):
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((socket.gethostbyname(host), parsed.port or 5672))
        return str(probe.getsockname()[0])


def interface_of(address: str) -> str | None:
    """The name of the network interface holding IPv4 `address` (gloo binds to it), or None."""
    for _, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            try:
                packed = fcntl.ioctl(
                    probe.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15])
                )
            except OSError:
                continue
        if socket.inet_ntoa(packed[20:24]) == address:
            return name
    return None


def _route_to(master: str) -> str:
    """This host's address on the route to `master` (HOST:PORT)."""
    host, _, port = master.rpartition(":")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host.strip("[]"), int(port)))
        return str(probe.getsockname()[0])


class Gang:
    """A worker's side of gang scheduling (module docstring): the leader's `hosts_for`, and
    `execute_share` for a share of another worker's trial."""

    def __init__(
        self,
        app: Celery,
        lifecycle: TrialLifecycle,
        artifacts: Artifacts | None,
        broker_url: str | None,
        rendezvous_host: str | None = None,
        data_dir: Path | None = None,
    ) -> None:
        self.app, self.lifecycle, self.artifacts = app, lifecycle, artifacts
        self.broker_url, self.rendezvous_host = broker_url, rendezvous_host
        self.data_dir = data_dir

    def hosts_for(self, trial_id: str, attempt: int, config: dict[str, Any]) -> Any:
        """The `workers.training.parallel.Hosts` of the trial's attempt: where its rank 0
        is reached, and how its other shares are asked for."""
        from workers.training.parallel import Hosts

        address = rendezvous_address(self.broker_url, self.rendezvous_host)
        parallel = TrialConfig.model_validate(config).execution.parallel
        limit = float(config.get("execution", {}).get("time_limit", 3600.0))

        def gather(master: str, shares: list[list[int]], resume_epoch: int | None) -> None:
            deadline = time.time() + parallel.gather_timeout
            for share in shares:
                self.app.send_task(
                    RANKS_TASK_NAME,
                    kwargs={
                        "trial_id": trial_id,
                        "attempt": attempt,
                        "master": master,
                        "ranks": share,
                        "config": config,
                        "deadline": deadline,
                        "resume_epoch": resume_epoch,
                    },
                    **time_limits(limit + parallel.gather_timeout),
                )
            log.info("trial %s: asked for %d other host(s)' ranks, rendezvous at %s",
                     trial_id, len(shares), master)  # fmt: skip

        return Hosts(address, interface_of(address), gather)

    def execute_share(
        self,
        trial_id: str,
        attempt: int,
        master: str,
        ranks: list[int],
        config: dict[str, Any],
        deadline: float,
        resume_epoch: int | None,
    ) -> str:
        """Run a share of another worker's trial (module docstring); what happened:
        ``late`` or ``stale`` (dropped), ``ran``, or ``failed``."""
        if time.time() > deadline:
            log.info("trial %s: ranks %s asked for too late; dropping", trial_id, ranks)
            return "late"
        try:
            doc = self.lifecycle.trial(trial_id)
        except NotFound:
            return "stale"
        if doc["state"] != "running" or doc["attempt"] != attempt:
            log.info("trial %s: attempt %d no longer holds it; dropping ranks %s", trial_id,
                     attempt, ranks)  # fmt: skip
            return "stale"
        resume = self._checkpoint(trial_id, resume_epoch)
        if resume_epoch is not None and resume is None:
            return "stale"
        from workers.training.parallel import run_share

        interface = interface_of(_route_to(master))
        try:
            run_share(
                TrialConfig.model_validate(config),
                ranks,
                master,
                interface=interface,
                data_dir=self.data_dir,
                resume=resume,
                should_stop=self._stop(trial_id, attempt),
            )
        except (TrainingError, AttemptLost) as exc:
            reason = exc.reason
            log.warning("trial %s: ranks %s ended: %s", trial_id, ranks, reason)
            return "failed"
        return "ran"

    def _checkpoint(self, trial_id: str, epoch: int | None) -> bytes | None:
        """The trial's checkpoint of `epoch`, which the leader's rank 0 resumes from."""
        if epoch is None or self.artifacts is None:
            return None
        found = self.artifacts.find(trial_id, "checkpoint", "last")
        if found is None or found.get("epoch") != epoch:
            log.warning("trial %s: no checkpoint of epoch %s to resume ranks from", trial_id,
                        epoch)  # fmt: skip
            return None
        return self.artifacts.read(found)

    def _stop(self, trial_id: str, attempt: int) -> Callable[[], bool]:
        """Whether this share's ranks should end: the worker shuts down, or the attempt lost
        the trial (asked every few seconds; its ranks also fail with the leader's)."""
        asked = [time.monotonic()]

        def stop() -> bool:
            if shutdown.requested():
                return True
            if time.monotonic() - asked[0] < 5.0:
                return False
            asked[0] = time.monotonic()
            try:
                doc = self.lifecycle.trial(trial_id)
            except NotFound:
                return True
            except Exception as exc:  # the store unreachable: the ranks decide alone
                log.warning("trial %s: cannot read it (%s)", trial_id, exc)
                return False
            return doc["state"] != "running" or doc["attempt"] != attempt

        return stop
