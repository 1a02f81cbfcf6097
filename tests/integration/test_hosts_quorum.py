"""A broker without a single point of failure (#33): a 3-node RabbitMQ cluster on hosts of
the tests' own (`tests.hosts`), the trials queue a quorum queue (`SWEEPSTACK_QUEUE_TYPE=quorum`),
workers on two hosts and the scheduler reaching the cluster through a failover list of
broker URLs. The queue's leader node is killed (every process of its host) mid-sweep: the
queue elects a leader on another node, the workers and the scheduler reconnect to a live
node, and every trial still ends exactly once with no epoch row twice."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.hoststack import HostStack, Services, start_services
from tests.integration.stack import wait_for
from tests.services import RabbitNode

pytestmark = pytest.mark.integration

NODES = ["rmq1", "rmq2", "rmq3"]


class Cluster:
    """Three RabbitMQ nodes on their hosts, clustered by classic peer discovery: the first
    started alone, then the other two at once, which join it."""

    def __init__(self, services: Services) -> None:
        cookie = os.urandom(16).hex().upper()
        names = [f"rabbit@{n}" for n in NODES]
        self.nodes: dict[str, RabbitNode] = {}

        def start(name: str) -> None:
            self.nodes[name] = RabbitNode(
                services.tmp / name, host=services.hosts[name], cookie=cookie, cluster=names
            )

        start(NODES[0])
        threads = [threading.Thread(target=start, args=(n,)) for n in NODES[1:]]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        missing = [n for n in NODES if n not in self.nodes]
        if missing:
            raise AssertionError(f"RabbitMQ nodes {missing} did not start")
        status = self.nodes[NODES[0]].ctl("cluster_status", "--formatter", "json")
        for name in names:
            assert status.count(name) >= 2, status  # a disc node and a running node

    @property
    def url(self) -> str:
        """Every node, for kombu's failover (`;` between URLs)."""
        return ";".join(node.url for node in self.nodes.values())

    def leader(self, queue: str) -> str:
        """The host name of the node that leads `queue` now (asked of any live node)."""
        for node in self.nodes.values():
            try:
                out = node.ctl("list_queues", "name", "leader", "--no-table-headers", "-q")
            except RuntimeError:
                continue
            for line in out.splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[0] == queue:
                    return parts[1].split("@", 1)[1]
        raise AssertionError(f"no node knows the leader of {queue}")

    def close(self) -> None:
        for node in self.nodes.values():
            node.close()


@pytest.fixture(scope="module")
def cluster_services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    services = start_services(
        tmp_path_factory.mktemp("quorum"), ["host-a", "host-b"], extra=NODES, rabbit=False
    )
    try:
        cluster = Cluster(services)
    except BaseException:
        services.close()
        raise
    services.broker_url = cluster.url
    services.cluster = cluster  # type: ignore[attr-defined]
    try:
        yield services
    finally:
        cluster.close()
        services.close()


@pytest.mark.timeout(300)
def test_the_quorum_queue_survives_its_leader_node_killed_mid_sweep(
    cluster_services: Services, tmp_path: Path
) -> None:
    services = cluster_services
    cluster: Cluster = services.cluster  # type: ignore[attr-defined]
    with HostStack(services, tmp_path, env={"SWEEPSTACK_QUEUE_TYPE": "quorum"}) as stack:
        stack.start_scheduler()  # declares the quorum queue (`core.broker.check_queue`)
        leader = wait_for(lambda: cluster.leader(stack.queue), 30, "the queue's leader")
        stack.start_worker(services.hosts["host-a"])
        stack.start_worker(services.hosts["host-b"])
        spec = (
            f"name: quorum-{uuid.uuid4().hex[:6]}\n"
            "objective: {metric: val_accuracy, direction: max}\n"
            "dataset: {name: digits}\n"
            "model: {hidden_layers: 2, hidden_units: 256}\n"
            "training: {optimizer: sgd, epochs: 20, batch_size: 8,"
            " lr: [0.01, 0.05], seed: [0, 1, 2]}\n"
            "execution: {device: cpu, fuse: off}\n"
        )
        sweep_id, total = stack.submit(spec)
        wait_for(
            lambda: (
                stack.store.db["trials"].count_documents(
                    {"sweep_id": sweep_id, "state": {"$in": ["running", "complete"]}}
                )
                >= 2
            ),
            60,
            "trials to run on both hosts",
        )
        killed = services.hosts[leader].kill_all()
        assert killed >= 1
        new_leader = wait_for(
            lambda: (lead := cluster.leader(stack.queue)) != leader and lead,
            60,
            "a new leader for the queue",
        )
        # Both workers were on the first node of the list; those that lost their node
        # connected to another.
        if leader == NODES[0]:
            others = [services.hosts[n].address for n in NODES if n != leader]
            for worker in stack.workers:
                wait_for(
                    lambda w=worker: any(
                        f"Connected to amqp://guest:**@{a}" in w.log_path.read_text()
                        for a in others
                    ),
                    60,
                    f"{worker.name} to connect to another node",
                )
        every = stack.check_ended({sweep_id: ("quorum leader killed", total)}, timeout=150)
        assert all(d["state"] == "complete" for d in every), [d["state"] for d in every]
        # Nothing is left in the queue (the redelivered messages were acked as done).
        assert stack.queue_depth() == 0
        print(f"leader {leader} killed; new leader {new_leader}; {total} trials ended once")
