"""Faults between hosts (#33): real workers on two hosts of the tests' own (network
namespaces, `tests.hosts`), RabbitMQ, SecantusDB and the scheduler on a third. A host whose
every process is killed mid-sweep has its trials taken over by the other host; a host cut
off for longer than the stale-heartbeat limit while it trains loses its attempt, whose late
writes the store refuses once the link is back; a slow, lossy link slows the sweep but
loses nothing. Each sweep ends with every trial ended exactly once and no epoch row twice
(`HostStack.check_ended`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.hoststack import HostStack, Services, start_services
from tests.integration.stack import wait_for

pytestmark = pytest.mark.integration

STALE_AFTER = 5.0
#: Epochs of trials that a fault must catch running: about 3 s of training on digits.
EPOCHS_LONG = 20


def spec(trials_per_lr: int = 2, epochs: int = 3, units: int = 128) -> str:
    seeds = ", ".join(str(s) for s in range(trials_per_lr))
    return (
        f"name: hosts-{uuid.uuid4().hex[:6]}\n"
        "objective: {metric: val_accuracy, direction: max}\n"
        "dataset: {name: digits}\n"
        f"model: {{hidden_layers: 2, hidden_units: {units}}}\n"
        f"training: {{optimizer: sgd, epochs: {epochs}, batch_size: 8,"
        f" lr: [0.01, 0.05], seed: [{seeds}]}}\n"
        "execution: {device: cpu, fuse: off}\n"
    )


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    s = start_services(tmp_path_factory.mktemp("hosts"), ["host-a", "host-b"])
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def stack(services: Services, tmp_path: Path) -> Iterator[HostStack]:
    with HostStack(services, tmp_path, stale_after=STALE_AFTER) as s:
        yield s


@pytest.mark.timeout(180)
def test_a_host_killed_mid_sweep_has_its_trials_taken_over_by_the_other(
    services: Services, stack: HostStack
) -> None:
    a, b = services.hosts["host-a"], services.hosts["host-b"]
    stack.start_worker(a)
    stack.start_worker(b)
    stack.start_scheduler()
    # Trials of a few seconds each: host-a holds one when it dies.
    sweep_id, total = stack.submit(spec(trials_per_lr=2, epochs=EPOCHS_LONG, units=256))
    held = wait_for(lambda: stack.running_on(a, sweep_id), 60, "a trial running on host-a")
    killed = a.kill_all()
    assert killed >= 2  # the worker's main process and its pool child at least
    every = stack.check_ended({sweep_id: ("host kill", total)}, timeout=90)
    # The trial host-a held lost that attempt and was trained again, to the end, on host-b.
    doc = next(d for d in every if d["_id"] == held[0]["_id"])
    assert doc["state"] == "complete" and int(doc.get("lost_attempts") or 0) >= 1, doc
    assert doc["worker"]["host"] == "host-b", doc["worker"]
    assert all(d["state"] == "complete" for d in every)


@pytest.mark.timeout(180)
def test_a_host_cut_off_beyond_the_stale_limit_loses_its_attempt_and_its_late_writes(
    services: Services, stack: HostStack
) -> None:
    a, b = services.hosts["host-a"], services.hosts["host-b"]
    stack.start_worker(a)
    stack.start_worker(b)
    stack.start_scheduler()
    # One trial per host, long enough (a few seconds) that host-a is training when its
    # link goes down; host-b, done with its own, takes host-a's over.
    sweep_id, total = stack.submit(spec(trials_per_lr=1, epochs=EPOCHS_LONG, units=256))
    held = wait_for(lambda: stack.running_on(a, sweep_id), 60, "a trial running on host-a")[0]
    a.cut()
    try:
        # Beyond the stale limit: the scheduler requeues the silent trial and host-b
        # takes it (attempt + 1) while host-a still thinks it holds it.
        try:
            wait_for(
                lambda: stack.store.db["trials"].find_one(
                    {"_id": held["_id"], "attempt": {"$gt": held["attempt"]}}
                ),
                STALE_AFTER + 30,
                "the cut-off trial to be taken over",
            )
        except AssertionError:
            doc = stack.store.db["trials"].find_one({"_id": held["_id"]}, {"config": 0})
            raise AssertionError(f"{doc}\n{stack.logs()}") from None
        time.sleep(2)
    finally:
        a.restore()
    every = stack.check_ended({sweep_id: ("link cut", total)}, timeout=90)
    doc = next(d for d in every if d["_id"] == held["_id"])
    assert doc["state"] == "complete" and doc["attempt"] > held["attempt"], doc
    assert int(doc.get("lost_attempts") or 0) >= 1
    assert any(h.get("state") == "lost" for h in doc.get("history", [])), doc.get("history")
    # The final attempt (host-b's) has every epoch once and the trial's result and holder
    # are its own; the cut-off attempt keeps the rows it wrote before it was taken over,
    # under its own attempt, and none that came in late (refused by attempt).
    assert doc["worker"]["host"] == "host-b", doc["worker"]
    rows = list(stack.store.db["metrics"].find({"trial_id": held["_id"]}, {"metrics": 0}))
    final = sorted(r["epoch"] for r in rows if r["attempt"] == doc["attempt"])
    assert final == list(range(1, EPOCHS_LONG + 1)), rows
    assert {r["attempt"] for r in rows} <= {held["attempt"], doc["attempt"]}, rows
    lost_at = next(h["finished_at"] for h in doc["history"]
                   if h.get("state") == "lost" and h["attempt"] == held["attempt"])  # fmt: skip
    late = [r for r in rows if r["attempt"] == held["attempt"] and r["reported_at"] > lost_at]
    assert not late, late
    # host-a, its link back, heard that its attempt was lost and recorded no finish: the
    # store refused it by attempt (the trial's one finish is host-b's, checked above).
    wait_for(
        lambda: f"attempt {held['attempt']} lost" in stack.workers[0].log_path.read_text(),
        30,
        "host-a to hear that its attempt was lost",
    )
    finishes = [h for h in doc["history"] if h["state"] != "lost"]
    assert [h["worker"]["host"] for h in finishes] == ["host-b"], doc["history"]


@pytest.mark.timeout(180)
def test_a_slow_lossy_link_slows_the_sweep_but_it_ends_exactly(
    services: Services, stack: HostStack
) -> None:
    a, b = services.hosts["host-a"], services.hosts["host-b"]
    applied = [a.slow(rate="1mbit", delay_ms=40, loss_percent=2.0),
               b.slow(rate="1mbit", delay_ms=40, loss_percent=2.0)]  # fmt: skip
    try:
        stack.start_worker(a)
        stack.start_worker(b)
        stack.start_scheduler()
        sweep_id, total = stack.submit(spec())
        every = stack.check_ended({sweep_id: ("slow link", total)}, timeout=120)
    finally:
        a.unslow()
        b.unslow()
    print(f"links: {applied[0]}")
    assert all(d["state"] == "complete" for d in every)
    assert {d["worker"]["host"] for d in every} <= {"host-a", "host-b"}
