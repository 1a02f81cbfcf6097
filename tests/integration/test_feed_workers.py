"""The feeding loop with everything real: Celery worker processes train the trials and a
`sweepstack scheduler` process feeds the sweeps (RabbitMQ, SecantusDB, the Flask app).

What a user relies on: a TPE sweep creates exactly its budget and never has more than
`search.parallelism` trials queued or running; kill -9 of the scheduler loses and repeats
nothing; a grid larger than one window (``SWEEPSTACK_FEED_WINDOW``) submitted through the
API is fed to the end. One stack (queue, database, workers) serves the module: worker
start-up is most of the cost.
"""

from __future__ import annotations

import os
import signal
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from cli.app import create_app
from core.settings import Settings
from core.states import TERMINAL_STATES
from core.store.records import flatten_params
from scheduler.enqueue import sender_app
from tests.api import ALICE_TOKEN
from tests.integration.stack import Scheduler, Stack, wait_for

pytestmark = pytest.mark.integration

LIVE = ["queued", "running"]
TERMINAL = sorted(s.value for s in TERMINAL_STATES)
#: Seconds a killed scheduler's lease outlives it before another scheduler takes over.
LEASE = 3


class Sampler:
    """Counts the sweep's queued + running trials in the store every 50 ms, in a thread."""

    def __init__(self, stack: Stack, sweep_id: str) -> None:
        self.stack, self.sweep_id = stack, sweep_id
        self.most = 0
        self.samples = 0
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        trials = self.stack.store.db["trials"]
        while not self._halt.is_set():
            n = trials.count_documents({"sweep_id": self.sweep_id, "state": {"$in": LIVE}})
            self.most = max(self.most, n)
            self.samples += 1
            self._halt.wait(0.05)

    def stop(self) -> int:
        self._halt.set()
        self._thread.join(10)
        return self.most


@pytest.fixture(scope="module")
def fed(
    broker_url: str, secantus_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """A stack with one worker of two processes, and a small feeding window."""
    tmp = tmp_path_factory.mktemp("feed")
    stack = Stack(broker_url, secantus_url, f"sweepstack_test_{uuid.uuid4().hex[:10]}", tmp)
    stack.env["SWEEPSTACK_FEED_WINDOW"] = "8"
    try:
        stack.start_worker(concurrency=2)
        yield stack
    finally:
        stack.close()


@pytest.fixture
def scheduler_log(fed: Stack) -> Iterator[list[Scheduler]]:
    """Schedulers a test starts (`start`), stopped after it."""
    started: list[Scheduler] = []
    yield started
    for s in started:
        s.stop()


def start(fed: Stack, started: list[Scheduler]) -> Scheduler:
    s = Scheduler(fed.env, fed.tmp / f"scheduler-{uuid.uuid4().hex[:6]}.log", LEASE)
    started.append(s)
    return s


def logs(fed: Stack, started: list[Scheduler]) -> str:
    return fed.logs() + "\n".join(s.log_path.read_text()[-3000:] for s in started)


def tpe(trials: int, parallelism: int, seed: int) -> str:
    return (
        f"name: feed-tpe-{uuid.uuid4().hex[:6]}\ndataset: {{name: digits}}\n"
        "execution: {device: cpu, fuse: off}\n"
        "model: {hidden_layers: 1, hidden_units: {int: [4, 32]}, activation: [relu, tanh]}\n"
        "training: {epochs: 1, batch_size: 256, lr: {loguniform: [0.001, 0.1]}}\n"
        "objective: {metric: val_accuracy, direction: max}\n"
        f"search: {{algorithm: tpe, trials: {trials}, parallelism: {parallelism}, "
        f"seed: {seed}}}\n"
    )


def check_finished_once(fed: Stack, sweep_id: str, n: int) -> list[dict[str, Any]]:
    """Exactly `n` trials, each terminal after one claim (attempt 1), counts that add up."""
    docs = list(fed.store.db["trials"].find({"sweep_id": sweep_id}))
    assert len(docs) == n
    assert sorted(d["index"] for d in docs) == list(range(n))
    assert [d["_id"] for d in docs if d["state"] not in TERMINAL or d["attempt"] != 1] == []
    # One ended attempt each, in the trial's final state: none lost, none ended twice.
    assert [d["_id"] for d in docs if [h["state"] for h in d["history"]] != [d["state"]]] == []
    counts = fed.store.reads.counts(sweep_id)
    assert counts == fed.store.admin.recount(sweep_id)
    assert counts["queued"] == counts["running"] == 0 and sum(counts.values()) == n
    sweep = fed.store.reads.get_sweep(sweep_id)
    assert sweep["planned"] == 0 and sweep["trial_count"] == n and sweep["sending"] == []
    return docs


def test_tpe_sweep_creates_its_budget_with_at_most_parallelism_in_flight(
    fed: Stack, scheduler_log: list[Scheduler]
) -> None:
    sweep_id, total = fed.submit(tpe(trials=40, parallelism=4, seed=3))
    sampler = Sampler(fed, sweep_id)
    assert total == 40 and fed.store.reads.counts(sweep_id)["queued"] == 40
    start(fed, scheduler_log)
    try:
        counts = fed.wait_finished(sweep_id, timeout=240)
    finally:
        most = sampler.stop()
    assert counts["complete"] == 40, logs(fed, scheduler_log)
    assert most == 4, f"at most {most} in flight over {sampler.samples} samples"
    check_finished_once(fed, sweep_id, 40)


def test_a_scheduler_killed_mid_sweep_is_replaced_without_losing_or_repeating(
    fed: Stack, scheduler_log: list[Scheduler]
) -> None:
    sweep_id, _ = fed.submit(tpe(trials=40, parallelism=4, seed=5))
    first = start(fed, scheduler_log)
    trials = fed.store.db["trials"]
    wait_for(lambda: trials.count_documents({"sweep_id": sweep_id}) >= 15, 120, "15 trials")
    first.kill_all()
    created = trials.count_documents({"sweep_id": sweep_id})
    assert 15 <= created < 40

    # Nobody feeds meanwhile: the workers drain what was sent (all but a window the kill
    # caught stored and not yet sent: the sweep's `sending`), and nothing new appears.
    def drained() -> bool:
        live = {d["_id"] for d in trials.find({"sweep_id": sweep_id, "state": {"$in": LIVE}})}
        return live <= set(fed.store.reads.get_sweep(sweep_id).get("sending") or [])

    wait_for(drained, 60, "the sent trials to finish")
    assert trials.count_documents({"sweep_id": sweep_id}) == created
    assert sum(fed.store.reads.counts(sweep_id).values()) == 40  # the rest still planned
    start(fed, scheduler_log)  # takes the lease once the dead one's runs out
    counts = fed.wait_finished(sweep_id, timeout=240)
    assert counts["complete"] == 40, logs(fed, scheduler_log)
    docs = check_finished_once(fed, sweep_id, 40)
    asked = {repr(sorted(flatten_params(d["params"]).items())) for d in docs}
    assert len(asked) == 40  # no point asked twice
    # The rebuilt study went on where the first stopped: no Optuna number given twice.
    assert len({d["optuna"]["number"] for d in docs}) == 40


def test_a_grid_larger_than_a_window_submitted_through_the_api_is_fed_to_the_end(
    fed: Stack, scheduler_log: list[Scheduler]
) -> None:
    settings = Settings.from_env(
        {**fed.env, "SWEEPSTACK_API_TOKENS": f"alice:{ALICE_TOKEN}", "SWEEPSTACK_BIND_HOST": ""}
    )
    assert settings.feed_window == 8
    app = create_app(settings, store=fed.store, sender=sender_app(settings))
    spec = {
        "name": f"feed-grid-{uuid.uuid4().hex[:6]}",
        "dataset": {"name": "iris"},
        "execution": {"device": "cpu", "fuse": "off"},
        "model": {"hidden_units": [4, 6, 8, 10, 12, 14, 16], "activation": ["relu", "tanh", "elu"]},
        "training": {"epochs": 1},
        "objective": {"metric": "val_accuracy", "direction": "maximize"},
    }
    reply = app.test_client().post(
        "/api/v1/sweeps", json=spec, headers={"Authorization": f"Bearer {ALICE_TOKEN}"}
    )
    assert reply.status_code == 201, reply.get_json()
    sweep_id = reply.get_json()["id"]
    assert reply.get_json()["trials"] == 21
    assert fed.store.db["trials"].count_documents({"sweep_id": sweep_id}) <= 8
    shown = app.test_client().get(
        f"/api/v1/sweeps/{sweep_id}", headers={"Authorization": f"Bearer {ALICE_TOKEN}"}
    )
    assert sum(shown.get_json()["counts"].values()) == 21  # the whole sweep from the start
    start(fed, scheduler_log)
    counts = fed.wait_finished(sweep_id, timeout=240)
    assert counts["complete"] == 21, logs(fed, scheduler_log)
    docs = check_finished_once(fed, sweep_id, 21)
    assert len({d["key"] for d in docs}) == 21


def adaptive_fused_pruning(trials: int) -> str:
    """TPE + ASHA over small nets that fuse in groups of 6 (`scheduler.units.ADAPTIVE_GROUP_CAP`),
    with epochs enough that a kill lands while groups train."""
    return (
        f"name: feed-kill-{uuid.uuid4().hex[:6]}\ndataset: {{name: digits}}\n"
        "execution: {device: cpu}\n"
        "model: {hidden_layers: 2, hidden_units: [16, 32], activation: [relu, tanh]}\n"
        "training: {epochs: 90, batch_size: 64, lr: {loguniform: [0.001, 0.3]}}\n"
        "objective: {metric: val_accuracy, direction: max}\n"
        f"search: {{algorithm: tpe, trials: {trials}, parallelism: 2, seed: 9}}\n"
        "pruning: {algorithm: asha, min_resource: 5, reduction_factor: 3}\n"
    )


def test_kill_9_of_scheduler_worker_child_and_whole_worker_mid_adaptive_fused_pruning_sweep(
    fed: Stack, scheduler_log: list[Scheduler]
) -> None:
    """The last test of the module: it kills the module's worker and starts another."""
    sweep_id, total = fed.submit(adaptive_fused_pruning(trials=48))
    assert total == 48
    trials, metrics = fed.store.db["trials"], fed.store.db["metrics"]
    # The first window is fused: two units of six points, one message each.
    first = list(trials.find({"sweep_id": sweep_id}))
    assert len(first) == 12 and len({d["optuna"]["unit"] for d in first}) == 2

    def training(after: int = 0, not_pid: int = 0) -> dict[str, Any] | None:
        """A running trial with an epoch row, created after the first `after` trials and
        trained by another process than `not_pid`."""
        for doc in trials.find({"sweep_id": sweep_id, "state": "running"}):
            if doc["index"] < after or doc["worker"]["pid"] == not_pid:
                continue
            if metrics.count_documents({"trial_id": doc["_id"], "attempt": doc["attempt"]}):
                return doc
        return None

    scheduler = start(fed, scheduler_log)
    wait_for(training, 120, "a fused trial training")
    scheduler.kill_all()  # mid-decisions: workers at a rung wait, bounded, then train on
    start(fed, scheduler_log)
    doc = wait_for(lambda: training(after=12), 120, "a trial of the new scheduler training")
    os.kill(doc["worker"]["pid"], signal.SIGKILL)  # the training child
    wait_for(lambda: training(not_pid=doc["worker"]["pid"]), 120, "training after the kill")
    fed.workers[0].kill_all()  # the whole worker: its messages go back to the queue
    fed.start_worker(concurrency=2)
    counts = fed.wait_finished(sweep_id, timeout=300)
    assert counts["complete"] + counts["pruned"] == 48, logs(fed, scheduler_log)

    docs = list(trials.find({"sweep_id": sweep_id}))
    assert len(docs) == 48 and sorted(d["index"] for d in docs) == list(range(48))
    ended = [h for d in docs for h in d["history"] if h["state"] in TERMINAL]
    assert len(ended) == 48  # each trial ended once, in its final state
    assert all(d["history"][-1]["state"] == d["state"] for d in docs)
    assert max(d["attempt"] for d in docs) >= 2  # the kills did take trials over
    rows = [(r["trial_id"], r["attempt"], r["epoch"]) for r in metrics.find({"sweep_id": sweep_id})]
    assert len(rows) == len(set(rows))  # no epoch row twice
    assert len({repr(sorted(flatten_params(d["params"]).items())) for d in docs}) == 48
    assert len({d["optuna"]["number"] for d in docs}) == 48  # no point asked twice
    assert fed.store.reads.counts(sweep_id) == fed.store.admin.recount(sweep_id)
