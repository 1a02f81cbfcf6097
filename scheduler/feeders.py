"""Every unfinished sweep's `Feeder`, in one loop: what `sweepstack scheduler` runs.

Each pass takes the lease of the sweeps it does not feed yet (a sweep another scheduler
feeds is skipped until that one stops renewing), sizes every feeder's window to its
sweep's fair share of the workers online (`core.shares`, read from the store, so several
schedulers agree and a restarted one needs no memory), steps every feeder it holds, and
drops those whose sweep is finished, cancelled or deleted. `sweepstack run` steps one `Feeder`
of its own instead.

A feeder that could not send its window (the broker down) is dropped and its lease given
back: the window's trials are stored and named in the sweep's ``sending`` list, and the
feeder a later pass opens sends them (`Feeder.open`), as after a kill -9.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery
from kombu.exceptions import OperationalError

from core.errors import SpecError, SweepstackError
from core.shares import Share
from core.store.shares import current_shares
from core.store.store import Store
from scheduler.feed import BIG_WINDOW, LEASE_SECONDS, Feeder, judge_until, owner_name

log = logging.getLogger(__name__)


def workers_online(app: Celery, timeout: float = 1.0) -> int | None:
    """Worker processes online that take this deployment's trials (the sum of their pools'
    sizes), None when none answers. Celery's remote control reaches every worker on the
    broker's virtual host, so those consuming another queue (another deployment's, or a
    test's) are left out: the fair share divides only the workers that serve it."""
    try:
        inspector = app.control.inspect(timeout=timeout)
        stats = inspector.stats() or {}
        queues = inspector.active_queues() or {}
    except Exception as exc:  # the broker is down: no default from workers this time
        log.warning("cannot ask the workers: %s", exc)
        return None
    mine = app.conf.task_default_queue
    total = sum(
        int((s.get("pool") or {}).get("max-concurrency") or 1)
        for name, s in stats.items()
        if any(q.get("name") == mine for q in queues.get(name) or [])
    )
    return total or None


class Feeders:
    """The feeders this scheduler holds, by sweep id."""

    def __init__(
        self,
        store: Store,
        app: Celery,
        *,
        owner: str | None = None,
        workers: int | None = None,
        lease_seconds: float = LEASE_SECONDS,
        big_window: int = BIG_WINDOW,
        quota_running: int | None = None,
    ) -> None:
        self.store, self.app = store, app
        self.quota_running = quota_running
        #: Every active sweep's fair share at the last pass (`core.shares.Share`), by id;
        #: empty while the workers online are unknown.
        self.shares: dict[str, Share] = {}
        self.owner = owner or owner_name()
        self.workers = workers
        self.lease_seconds = lease_seconds
        self.big_window = big_window
        self.feeders: dict[str, Feeder] = {}
        self._broken: set[str] = set()

    def step(self) -> int:
        """One pass over the unfinished sweeps; how many this scheduler feeds now."""
        for doc in self.store.feeding.unfinished_sweeps():
            sweep_id = doc["_id"]
            if sweep_id in self.feeders or sweep_id in self._broken:
                continue
            try:
                feeder = Feeder.open(
                    self.store,
                    self.app,
                    sweep_id,
                    owner=self.owner,
                    workers=self.workers,
                    lease_seconds=self.lease_seconds,
                    big_window=self.big_window,
                )
            except SpecError as exc:
                log.error("sweep %s cannot be fed: %s", sweep_id, exc)
                self._broken.add(sweep_id)
                self.store.feeding.release_lease(sweep_id, self.owner)
                continue
            except OperationalError as exc:
                log.warning("sweep %s: its unsent trials wait for the broker: %s", sweep_id, exc)
                self.store.feeding.release_lease(sweep_id, self.owner)
                continue
            if feeder is not None:
                log.info("feeding sweep %s (%d trials)", sweep_id, feeder.total)
                self.feeders[sweep_id] = feeder
        self._share()
        for sweep_id, feeder in list(self.feeders.items()):
            try:
                alive = feeder.step()
            except SweepstackError as exc:
                log.warning("feeding sweep %s failed this pass: %s", sweep_id, exc)
                continue
            except OperationalError as exc:
                log.warning("sweep %s: its window waits for the broker: %s", sweep_id, exc)
                feeder.close()
                del self.feeders[sweep_id]
                continue
            if not alive:
                log.info("sweep %s needs no more feeding", sweep_id)
                del self.feeders[sweep_id]
        return len(self.feeders)

    def _share(self) -> None:
        """Size every feeder's window to its sweep's fair share of the workers online
        (`core.shares`), from the store: every scheduler computes the same. Without a count
        of the workers (this scheduler's, else one another recorded in the last five
        minutes), the windows are the feeders' own."""
        # None answered this scheduler yet (it just started): another's recent count.
        workers = self.workers or self.store.shares.workers()
        if not workers:
            self.shares = {}
        else:
            self.shares = current_shares(self.store.shares, workers, self.quota_running)
        for sweep_id, feeder in self.feeders.items():
            share = self.shares.get(sweep_id)
            feeder.share_window = share.window if share is not None else None

    def judge_until(self, deadline: float) -> None:
        """Sleep until `deadline`, deciding pruning meanwhile (`scheduler.feed.judge_until`)."""
        judge_until(list(self.feeders.values()), deadline)

    def set_workers(self, workers: int | None) -> None:
        """The workers online, for the window of sweeps without `search.parallelism` and
        the fair share; recorded in the store for the API's submit (`scheduler.submit`)."""
        self.workers = workers
        if workers:  # a scheduler that reached none leaves another's count standing
            self.store.shares.note_workers(workers)

    def close(self) -> None:
        """Give every lease back, so another scheduler can take over at once."""
        for sweep_id in list(self.feeders):
            self.store.feeding.release_lease(sweep_id, self.owner)
        self.feeders.clear()

    def __enter__(self) -> Feeders:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
