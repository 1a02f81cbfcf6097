"""A data-parallel trial across hosts through the queue, the hosts being network namespaces
(#33, `tests.hosts`, `workers.gang`): a services host runs RabbitMQ and the store on its
address, each worker host one Celery worker that reaches them, and the other hosts' ranks,
only over the hosts' network.

- ``world_size: 4, hosts: 2`` over two worker hosts completes through the queue: ranks 0-1
  on the host whose worker claimed the trial, ranks 2-3 on the other, meeting at the first
  host's network address; the metrics equal one process's to 1e-6 (float64). About 50 s.
- The host running the other share killed outright (every process, ranks included) mid-trial:
  only that attempt is lost; the stale-heartbeat requeue retakes it and it completes with
  the third host, its curve whole, no epoch row twice. About 70 s.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from cli.worker import worker_commands
from core.spec.config import TrialConfig
from tests.hosts import Host, Hosts, HostsUnavailable
from tests.integration.stack import Process, Scheduler, Stack, wait_for
from tests.services import RabbitNode, SecantusProcess
from workers.training import train

pytestmark = pytest.mark.integration

METRICS = ("train_loss", "val_loss", "val_accuracy")
WORKER_HOSTS = ["host-a", "host-b", "host-c"]


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Hosts, str, str]]:
    """The hosts, and the broker and store URLs of the services host."""
    tmp = tmp_path_factory.mktemp("netns")
    try:
        made = Hosts(tmp, ["services", *WORKER_HOSTS])
    except HostsUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    with made:
        broker = RabbitNode(tmp / "rabbit", host=made["services"])
        store = SecantusProcess(tmp / "store", host=made["services"])
        try:
            yield made, broker.url, store.url
        finally:
            store.stop()
            broker.close()


@pytest.fixture
def netstack(hosts: tuple[Hosts, str, str], tmp_path: Path) -> Iterator[Stack]:
    _, broker_url, mongo_url = hosts
    stack = Stack(broker_url, mongo_url, f"sweepstack_test_{uuid.uuid4().hex[:10]}", tmp_path)
    try:
        yield stack
    finally:
        stack.close()


def _worker(stack: Stack, host: Host) -> Process:
    """One Celery worker process on `host` (a namespace), as `sweepstack worker` starts it."""
    ((argv, _),) = worker_commands(1, None, "INFO", stack.queue)
    argv = [*argv, "--without-gossip", "--hostname", f"test-{host.name}@%h"]
    worker = Process(host.command(argv), stack.env, stack.tmp / f"{host.name}.log", " ready.",
                     f"worker on {host.name}")  # fmt: skip
    stack.workers.append(worker)  # type: ignore[arg-type]  # stopped by `Stack.close`
    return worker


def _spec(epochs: int) -> str:
    return (
        f"name: netns-{uuid.uuid4().hex[:6]}\ndataset: {{name: digits}}\n"
        "objective: {metric: val_accuracy, direction: max}\n"
        "model: {hidden_layers: 2, hidden_units: 32}\n"
        f"training: {{optimizer: adam, lr: 0.003, epochs: {epochs}, batch_size: 64, seed: 3}}\n"
        "execution: {device: cpu, dtype: float64,"
        " parallel: {world_size: 4, hosts: 2, strategy: allreduce, gather_timeout: 60}}\n"
    )


def _equal_to_one_process(stack: Stack, trial_id: str) -> dict:
    full = stack.store.reads.get_trial(trial_id)
    one = TrialConfig.model_validate(full["config"]).model_dump()
    one["execution"]["parallel"] = {}
    torch.set_num_threads(1)
    alone = train(TrialConfig.model_validate(one))
    rows = [m["metrics"] for m in full["metrics"] if m["attempt"] == full["attempt"]]
    assert len(rows) == len(alone.metrics) > 0
    for row, expected in zip(rows, alone.metrics, strict=True):
        for name in METRICS:
            assert math.isclose(row[name], expected[name], rel_tol=0, abs_tol=1e-6), (name, row)
    return full


def _share_host(stack: Stack, names: list[str]) -> str:
    """The host whose worker ran the other share of the ranks (its log says so)."""
    for name in names:
        if "started ranks [2, 3]" in (stack.tmp / f"{name}.log").read_text():
            return name
    raise AssertionError(f"no host ran ranks 2-3:\n{stack.logs()}")


def test_world_size_4_over_2_namespace_hosts_equals_one_process(
    hosts: tuple[Hosts, str, str], netstack: Stack
) -> None:
    made, _, _ = hosts
    for name in WORKER_HOSTS[:2]:
        _worker(netstack, made[name])
    sweep_id, _ = netstack.submit(_spec(epochs=3))
    counts = netstack.wait_finished(sweep_id, timeout=150)
    assert counts["complete"] == 1, netstack.logs()
    (trial,) = netstack.all_trials(sweep_id)
    full = _equal_to_one_process(netstack, trial["_id"])
    leader = full["worker"]["host"]
    assert leader in WORKER_HOSTS[:2] and full["attempt"] == 1
    (other,) = [n for n in WORKER_HOSTS[:2] if n != leader]
    assert _share_host(netstack, WORKER_HOSTS[:2]) == other
    # The ranks met at the claiming host's address on the hosts' network.
    assert (
        f"whose rank 0 is at {made[leader].address}:" in (netstack.tmp / f"{other}.log").read_text()
    )


def test_a_namespace_host_killed_mid_trial_loses_only_that_attempt(
    hosts: tuple[Hosts, str, str], netstack: Stack
) -> None:
    made, _, _ = hosts
    netstack.env["SWEEPSTACK_STALE_AFTER_SECONDS"] = "5"
    scheduler = Scheduler(netstack.env, netstack.tmp / "scheduler.log")
    try:
        for name in WORKER_HOSTS:
            _worker(netstack, made[name])
        epochs = 40
        sweep_id, _ = netstack.submit(_spec(epochs))

        def training() -> dict | None:
            running, _ = netstack.store.reads.trials(sweep_id, state="running")
            return next(
                (d for d in running if int((d.get("progress") or {}).get("epoch", 0)) >= 2), None
            )

        doc = wait_for(training, 120, "the trial at epoch 2", every=0.05)
        lost = _share_host(netstack, WORKER_HOSTS)
        assert lost != doc["worker"]["host"]
        assert made[lost].kill_all() > 0  # the whole host: its worker and its ranks
        counts = netstack.wait_finished(sweep_id, timeout=240)
        assert counts["complete"] == 1, netstack.logs()
        full = _equal_to_one_process(netstack, doc["_id"])
        assert [h["state"] for h in full["history"]] == ["lost", "complete"], full["history"]
        assert full["lost_attempts"] == 1 and full["attempt"] == 2
        assert full["worker"]["host"] != lost
        rows = sorted(
            (row["attempt"], row["epoch"])
            for row in netstack.store.db["metrics"].find({"trial_id": doc["_id"]})
        )
        assert len(rows) == len(set(rows))  # no epoch row twice
        assert [e for a, e in rows if a == 2] == list(range(1, epochs + 1))
    finally:
        scheduler.stop()
