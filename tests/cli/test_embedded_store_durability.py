"""A ``kill -9`` of the embedded store loses no acknowledged write (#29).

The store is started as `sweepstack run` starts it (`cli.embedded.start_store`), written to
as a worker writes (`TrialLifecycle.report_many`, one epoch row per call, the store's
default write concern), and killed with SIGKILL at a random point of 1,000 epoch writes.
Started again on the same folder, it must hold every row whose write had returned before
the kill; the writer then goes on through the new store, as a worker retries, to 1,000.
Before #29 (no sync on commit, no ``j: true``) such kills lost the last few acknowledged
writes.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli import embedded
from core.errors import StoreUnavailable
from core.settings import Settings
from core.spec.sweep import load_spec
from core.store.roles import EpochRow
from core.store.store import Store
from scheduler.expand import expand

EPOCHS = 1000
WORKER = {"host": "durability", "pid": 1, "name": "durability"}


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[embedded.Processes]:
    procs = embedded.Processes(tmp_path)
    yield procs
    procs.stop()


def _store(procs: embedded.Processes, folder: Path) -> tuple[embedded.Service, Store]:
    """The folder's store started as `sweepstack run` does, and a client of it as a
    worker's (the platform's default settings)."""
    service = embedded.start_store(procs, folder)
    url = service.wait(60)
    store = Store.connect(url, timeout_ms=2000, **Settings().store_options())
    return service, store


def _running_trial(store: Store) -> str:
    """A one-trial sweep whose trial a worker has claimed: attempt 1 may report epochs."""
    spec = load_spec({"name": "durability", "dataset": {"name": "iris"}})
    points = expand(spec, with_config=True)
    sweep_id = store.admin.create_sweep(spec, points)
    trial_id = f"{sweep_id}-{points[0].id}"
    assert store.lifecycle.claim_queued({trial_id: 0}, WORKER) == [trial_id]
    return trial_id


class Writer(threading.Thread):
    """Epoch rows `start`.. of one attempt, a write each; stops at the first that fails.

    `acknowledged` holds the epochs whose write returned, in order.
    """

    def __init__(self, store: Store, trial_id: str, start: int) -> None:
        super().__init__(daemon=True)
        self.store, self.trial_id, self.start_epoch = store, trial_id, start
        self.acknowledged: list[int] = []

    def run(self) -> None:
        for epoch in range(self.start_epoch, EPOCHS + 1):
            row = EpochRow(self.trial_id, 1, epoch, {"loss": 1 / epoch, "val_accuracy": 0.5})
            try:
                self.store.lifecycle.report_many([row])
            except StoreUnavailable:
                return
            self.acknowledged.append(epoch)


def _stored_epochs(store: Store, trial_id: str) -> set[int]:
    rows = store.db["metrics"].find({"trial_id": trial_id, "attempt": 1}, {"epoch": 1})
    return {row["epoch"] for row in rows}


def test_a_kill_9_of_the_embedded_store_loses_no_acknowledged_epoch_row(
    procs: embedded.Processes, tmp_path: Path
) -> None:
    kill_after = random.randint(EPOCHS // 5, EPOCHS * 4 // 5)
    service, store = _store(procs, tmp_path)
    trial_id = _running_trial(store)
    writer = Writer(store, trial_id, 1)
    writer.start()
    deadline = time.monotonic() + 120
    while len(writer.acknowledged) < kill_after and writer.is_alive():
        assert time.monotonic() < deadline, f"{len(writer.acknowledged)} writes in 120 s"
        time.sleep(0.001)
    os.kill(service.proc.pid, signal.SIGKILL)
    writer.join(60)
    store.close()
    before = set(writer.acknowledged)
    assert kill_after <= len(before) < EPOCHS, "the kill did not land mid-way"

    _, store = _store(procs, tmp_path)
    try:
        missing = sorted(before - _stored_epochs(store, trial_id))
        assert not missing, (
            f"{len(missing)} of {len(before)} acknowledged epoch rows lost by a kill -9 "
            f"after {kill_after} writes: epochs {missing[:20]}"
        )
        # The trial's progress, the other half of each report, came back too.
        assert store.lifecycle.trial(trial_id)["progress"]["epoch"] >= max(before)
        # A worker retries what the kill cut short; the attempt reaches its 1,000 rows.
        rest = Writer(store, trial_id, max(before) + 1)
        rest.run()
        assert rest.acknowledged == list(range(max(before) + 1, EPOCHS + 1))
        assert _stored_epochs(store, trial_id) == set(range(1, EPOCHS + 1))
    finally:
        store.close()
