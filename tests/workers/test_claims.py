"""`workers.claims`: epoch rows in batches (pure logic), and the one heartbeat thread of a
process against the real store of the `mongo_url` fixture."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.store.store import Store
from tests.core import WORKER, make_sweep, open_store, trial_ids
from tests.integration.stack import wait_for
from workers.claims import EpochRows, HeartbeatSender, claim_trials, holder_is_dead


class Ticks:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_epoch_rows_go_first_at_once_then_every_two_seconds_and_on_demand() -> None:
    ticks = Ticks()
    rows = EpochRows(every=2.0, clock=ticks)
    first = rows.add("t-1", 1, 1, {"loss": 1.0})
    assert first is not None and [r.epoch for r in first] == [1]
    ticks.now = 1.0
    assert rows.add("t-1", 1, 2, {"loss": 0.9}) is None
    assert rows.add("t-2", 1, 1, {"loss": 0.8}) is None
    ticks.now = 2.5
    due = rows.add("t-1", 1, 3, {"loss": 0.7})
    assert due is not None and [(r.trial_id, r.epoch) for r in due] == [
        ("t-1", 2),
        ("t-2", 1),
        ("t-1", 3),
    ]
    assert rows.add("t-1", 1, 4, {"loss": 0.6}) is None
    assert [r.epoch for r in rows.take()] == [4]  # on demand: the end, or a pruning decision
    assert rows.take() == []


@pytest.fixture
def store(mongo_url: str, db_name: str) -> Iterator[Store]:
    from datetime import UTC, datetime

    yield from open_store(mongo_url, db_name, lambda: datetime.now(UTC))  # type: ignore[arg-type]


def test_one_heartbeat_thread_beats_for_every_held_trial(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    ids = trial_ids(sweep_id, points)[:3]
    configs = {t: (0, p.config) for t, p in zip(ids, points, strict=False)}
    claims = claim_trials(store.lifecycle, ids, WORKER, 60.0, configs, budget=5.0)
    assert [claims[t]["attempt"] for t in ids] == [1, 1, 1]
    sender = HeartbeatSender.of_process(store.lifecycle, 0.2)
    assert HeartbeatSender.of_process(store.lifecycle, 0.2) is sender  # one per process and store
    for trial_id in ids:
        sender.hold(trial_id, 1)
    before = {t: store.reads.get_trial(t)["heartbeat_at"] for t in ids}
    wait_for(
        lambda: all(store.reads.get_trial(t)["heartbeat_at"] > before[t] for t in ids), 10, "beats"
    )
    other = {**WORKER, "pid": WORKER["pid"] + 1}
    assert store.lifecycle.claim(ids[0], other, stale_after=60, takeover_attempt=1) is not None
    wait_for(lambda: sender.lost(ids[0]), 10, "the lost claim noted")
    store.admin.cancel_sweep(sweep_id)
    wait_for(lambda: sender.stopping(ids[1]) and sender.stopping(ids[2]), 10, "stop requests")
    assert not sender.lost(ids[1]) and sender.should_stop(ids[1])
    sender.hold(ids[0], 2)  # a new attempt held starts clean
    assert not sender.should_stop(ids[0])
    for trial_id in ids:
        sender.release(trial_id)


def test_an_epoch_check_notes_a_prune_request_at_once(store: Store) -> None:
    sweep_id, points = make_sweep(store)
    pruned, going_on = trial_ids(sweep_id, points)[:2]
    configs = {t: (0, p.config) for t, p in zip((pruned, going_on), points, strict=False)}
    claim_trials(store.lifecycle, [pruned, going_on], WORKER, 60.0, configs, budget=5.0)
    sender = HeartbeatSender(store.lifecycle, interval=3600.0)  # its thread would not beat in time
    sender.hold(pruned, 1)
    sender.hold(going_on, 1)
    assert store.admin.request_prune({pruned: (1, 4)}) == [pruned]
    assert not sender.should_stop(pruned)
    sender.check({pruned: 1, going_on: 1})
    assert sender.pruning(pruned) and sender.should_stop(pruned)
    assert not sender.stopping(pruned) and not sender.lost(pruned)
    assert not sender.should_stop(going_on)
    sender.hold(pruned, 2)  # a new attempt held starts clean
    assert not sender.pruning(pruned)


def test_epoch_rows_kept_wait_for_take() -> None:
    rows = EpochRows(every=2.0, clock=Ticks())
    rows.keep("t-1", 1, 1, {"loss": 1.0})
    rows.keep("t-2", 1, 1, {"loss": 0.9})
    assert [(r.trial_id, r.epoch) for r in rows.take()] == [("t-1", 1), ("t-2", 1)]
    assert rows.take() == []


def test_a_killed_process_not_yet_reaped_counts_as_dead() -> None:
    """A zombie answers signal 0 as a live process does; the pool's parent may not have
    reaped a killed child when its redelivered message is claimed."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    holder = {"host": socket.gethostname(), "pid": child.pid}
    try:
        assert not holder_is_dead(holder)
        child.kill()
        deadline = time.monotonic() + 10
        while not Path(f"/proc/{child.pid}/stat").read_bytes().rsplit(b")", 1)[1].startswith(b" Z"):
            assert time.monotonic() < deadline, "the child never became a zombie"
            time.sleep(0.01)
        os.kill(child.pid, 0)  # signal 0 still reaches it: not reaped
        assert holder_is_dead(holder)
    finally:
        child.kill()
        child.wait()
    assert holder_is_dead(holder)


def test_a_decision_wait_learns_how_to_end_with_no_heartbeat(store: Store) -> None:
    """A worker waiting at a pruner's epoch reads its verdicts and is done: the pruned one
    is noted pruning, the other trains on, and neither is beaten (no heartbeat was needed)."""
    sweep_id, points = make_sweep(store)
    pruned, going_on = trial_ids(sweep_id, points)[:2]
    configs = {t: (0, p.config) for t, p in zip((pruned, going_on), points, strict=False)}
    claim_trials(store.lifecycle, [pruned, going_on], WORKER, 60.0, configs, budget=5.0)
    sender = HeartbeatSender(store.lifecycle, interval=3600.0)  # its thread would not beat
    sender.hold(pruned, 1)
    sender.hold(going_on, 1)
    assert store.feeding.mark_judged({going_on: (1, 2)}, {pruned: (1, 2)}) == [pruned]
    beaten = {t: store.reads.get_trial(t)["heartbeat_at"] for t in (pruned, going_on)}
    started = time.monotonic()
    sender.await_decision({pruned: 1, going_on: 1}, 2, timeout=10.0)
    assert time.monotonic() - started < 5.0
    assert sender.pruning(pruned) and not sender.should_stop(going_on)
    assert {t: store.reads.get_trial(t)["heartbeat_at"] for t in beaten} == beaten
