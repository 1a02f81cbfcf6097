"""Data-parallel trials through the platform: a real Celery worker starts the ranks, the
store gets one record per trial, the dashboard shows `execution.parallel.tau` like any
other parameter, and a killed worker leaves no rank behind."""

from __future__ import annotations

import dataclasses
import os
import signal
import time
import uuid
from pathlib import Path

import pytest

from cli.app import create_app
from tests.integration.stack import Scheduler, Stack, wait_for
from tests.integration.test_checkpoints import checkpointed

pytestmark = pytest.mark.integration


def _spec(name: str, training: str, parallel: str, execution: str = "") -> str:
    return (
        f"name: {name}-{uuid.uuid4().hex[:6]}\ndataset: {{name: digits}}\n"
        "objective: {metric: val_accuracy, direction: max}\n"
        f"model: {{hidden_layers: 2, hidden_units: 64}}\ntraining: {training}\n"
        f"execution:\n  device: cpu\n{execution}  parallel: {parallel}\n"
    )


def _children(pid: int) -> list[int]:
    """Every process under `pid`, depth first."""
    out: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out += [int(entry), *_children(int(entry))]
    return out


def _ranks_of(pid: int) -> list[int]:
    ranks = []
    for child in _children(pid):
        try:
            argv = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"workers.training.parallel.rank" in argv:
            ranks.append(child)
    return ranks


def _all_gone(pids: list[int], timeout: float = 15) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [p for p in pids if Path(f"/proc/{p}").exists() and not _zombie(p)]
        if not alive:
            return True
        time.sleep(0.1)
    return False


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def test_a_sweep_over_tau_runs_and_shows_on_the_dashboard(stack: Stack) -> None:
    stack.start_worker()
    sweep_id, count = stack.submit(
        _spec(
            "tau",
            "{optimizer: sgd, lr: 0.1, epochs: 3, seed: 0}",
            "{world_size: 2, strategy: local_sgd, tau: [1, 5, 20]}",
        )
    )
    assert count == 3
    counts = stack.wait_finished(sweep_id, timeout=300)
    assert counts["complete"] == 3, stack.logs()
    trials, _ = stack.store.reads.trials(sweep_id, limit=10)
    taus = set()
    for doc in trials:
        full = stack.store.reads.get_trial(doc["_id"])
        taus.add(full["params"]["execution"]["parallel"]["tau"])
        assert full["device_info"]["world_size"] == 2
        assert full["device_info"]["strategy"] == "local_sgd"
        assert [m["epoch"] for m in full["metrics"]] == [1, 2, 3]
        for row in (m["metrics"] for m in full["metrics"]):
            assert row["comm_bytes"] > 0 and row["comm_seconds"] >= 0
            assert row["compute_seconds"] > 0
        assert full["result"]["objective"] > 0.5
        assert len([h for h in full["history"] if h["state"] == "complete"]) <= 1
    assert taus == {1, 5, 20}
    # Fewer synchronisations, fewer bytes: tau 20 moves less than tau 1.
    by_tau = {
        t["params"]["execution"]["parallel"]["tau"]: stack.store.reads.get_trial(t["_id"])
        for t in trials
    }
    assert (
        by_tau[20]["metrics"][0]["metrics"]["comm_bytes"]
        < (by_tau[1]["metrics"][0]["metrics"]["comm_bytes"])
    )

    # No tokens, served on loopback: the dashboard's open local mode (as `sweepstack run`).
    local = dataclasses.replace(stack.settings, bind_host="127.0.0.1")
    client = create_app(local, store=stack.store, sender=stack.app).test_client()
    page = client.get(f"/sweeps/{sweep_id}")
    assert page.status_code == 200
    figure = client.get(f"/dashboard/data/sweeps/{sweep_id}/parallel").get_json()
    assert "parallel.tau" in str(figure)
    table = client.get(f"/dashboard/data/sweeps/{sweep_id}").get_json()
    assert "execution.parallel.tau" in str(table)
    trial_id = trials[0]["_id"]
    assert client.get(f"/trials/{trial_id}").status_code == 200
    detail = client.get(f"/dashboard/data/trials/{trial_id}").get_json()
    assert "comm_seconds" in str(detail) and "world_size" in str(detail)


def test_kill_9_of_the_training_child_ends_its_ranks_and_the_trial_is_retried(
    stack: Stack,
) -> None:
    stack.start_worker()
    sweep_id, _ = stack.submit(
        _spec(
            "kill-parallel",
            "{optimizer: sgd, lr: 0.05, epochs: 60, batch_size: 16, seed: 0}",
            "{world_size: 2, strategy: allreduce}",
        )
    )

    def running() -> dict | None:
        trials, _ = stack.store.reads.trials(sweep_id, state="running")
        if trials and stack.store.reads.get_trial(trials[0]["_id"])["metrics"]:
            return trials[0]
        return None

    doc = wait_for(running, 180, "a running parallel trial with a reported epoch")
    holder = doc["worker"]["pid"]
    ranks = _ranks_of(holder)
    assert len(ranks) == 2, ranks
    os.kill(holder, signal.SIGKILL)
    assert _all_gone(ranks), "a rank outlived the worker process that started it"
    stack.wait_finished(sweep_id, timeout=300)
    full = stack.store.reads.get_trial(doc["_id"])
    assert full["state"] == "complete", (full.get("error"), stack.logs())
    assert full["attempt"] == 2
    epochs = [(m["attempt"], m["epoch"]) for m in full["metrics"]]
    assert len(epochs) == len(set(epochs))


def test_time_limit_fails_a_parallel_trial_and_ends_its_ranks(stack: Stack) -> None:
    worker = stack.start_worker()
    sweep_id, _ = stack.submit(
        _spec(
            "slow-parallel",
            "{optimizer: sgd, lr: 0.01, epochs: 5000, seed: 0}",
            "{world_size: 2, strategy: local_sgd, tau: 2}",
            execution="  time_limit: 8\n",
        )
    )
    counts = stack.wait_finished(sweep_id, timeout=180)
    assert counts["failed"] == 1, stack.logs()
    (doc,), _ = stack.store.reads.trials(sweep_id)
    assert "time limit" in doc["error"]
    assert _all_gone(_ranks_of(worker.proc.pid), timeout=5)


def test_a_rank_killed_loses_the_attempt_and_the_retaken_trial_resumes_from_rank_0s_checkpoint(
    stack: Stack,
) -> None:
    # The worker stays; its attempt goes silent, and the scheduler requeues it once stale.
    stack.env["SWEEPSTACK_STALE_AFTER_SECONDS"] = "4"
    scheduler = Scheduler(stack.env, stack.tmp / "scheduler.log")
    try:
        stack.start_worker()
        sweep_id, _ = stack.submit(
            _spec(
                "rank-lost",
                "{optimizer: sgd, lr: 0.05, epochs: 40, batch_size: 16, seed: 0}",
                "{world_size: 2, strategy: allreduce}",
            )
            + "artifacts: {checkpoint_every: 5}\n"
        )

        doc, _ = checkpointed(stack, sweep_id, 5)
        ranks = _ranks_of(doc["worker"]["pid"])
        assert len(ranks) == 2, ranks
        os.kill(ranks[-1], signal.SIGKILL)
        stack.wait_finished(sweep_id, timeout=300)
    finally:
        scheduler.stop()
    full = stack.store.reads.get_trial(doc["_id"])
    assert full["state"] == "complete", (full.get("error"), stack.logs())
    assert [h["state"] for h in full["history"]] == ["lost", "complete"]
    assert full["lost_attempts"] == 1
    (resumed,) = full["resumed"]
    assert resumed["epoch"] >= 5 and resumed["epoch"] % 5 == 0
    final = [m["epoch"] for m in full["metrics"] if m["attempt"] == full["attempt"]]
    assert final == list(range(1, 41))
