"""Data-parallel training on real rank processes (gloo on the CPU): equivalences, records,
failures. Each trial here starts its own rank processes, as a worker does."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from core.errors import AttemptLost, TrainingError
from core.procs import free_port
from core.spec.config import TrialConfig
from workers.training import train

ROOT = Path(__file__).resolve().parents[3]
METRICS = ("train_loss", "val_loss", "val_accuracy")


def _config(parallel: dict[str, Any] | None = None, **sections: dict[str, Any]) -> TrialConfig:
    data: dict[str, dict[str, Any]] = {
        "dataset": {"name": "digits"},
        "model": {"hidden_layers": 2, "hidden_units": 32},
        "training": {"optimizer": "sgd", "lr": 0.1, "batch_size": 64, "epochs": 3, "seed": 7},
        "execution": {"device": "cpu", "dtype": "float64"},
    }
    for name, values in sections.items():
        data[name] = {**data[name], **values}
    data["execution"]["parallel"] = parallel or {}
    return TrialConfig.model_validate(data)


def _close(a: list[dict[str, float]], b: list[dict[str, float]], tol: float = 1e-6) -> None:
    assert len(a) == len(b) > 0
    for row_a, row_b in zip(a, b, strict=True):
        for name in METRICS:
            assert math.isclose(row_a[name], row_b[name], rel_tol=0, abs_tol=tol), (
                name,
                row_a,
                row_b,
            )


def _rank_pids() -> dict[int, int]:
    """The rank processes this test process started: rank -> pid."""
    out: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and b"workers.training.parallel.rank" in argv:
            out[int(argv[argv.index(b"--rank") + 1])] = int(entry)
    return out


def _gone(pids: dict[int, int]) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if not any(Path(f"/proc/{pid}").exists() for pid in pids.values()):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("world_size", [2, 3])
def test_allreduce_equals_one_process_on_the_global_batch(world_size: int) -> None:
    """PCL-DNN's claim: same hyperparameters, same result, here within 1e-6 in float64,
    with Adam, weight decay, a schedule and a last batch that splits unevenly."""
    sections = {
        "training": {
            "optimizer": "adam",
            "lr": 0.003,
            "weight_decay": 1e-4,
            "lr_schedule": "step",
            "lr_step_size": 2,
            "epochs": 3,
            "batch_size": 64,
            "seed": 3,
        }
    }
    single = train(_config(**sections))
    parallel = train(_config({"world_size": world_size, "strategy": "allreduce"}, **sections))
    _close(parallel.metrics, single.metrics)
    assert parallel.param_count == single.param_count
    assert parallel.device["world_size"] == world_size and parallel.device["backend"] == "gloo"


def test_local_sgd_with_tau_1_equals_allreduce() -> None:
    """Plain SGD, averaged after every step, is synchronous SGD (equal slices: 400 rows,
    global batches of 40, 20 rows per rank)."""
    sections = {
        "dataset": {"name": "synthetic_classification", "samples": 500, "classes": 3},
        "training": {"optimizer": "sgd", "lr": 0.2, "batch_size": 40, "epochs": 3, "seed": 1},
    }
    allreduce = train(_config({"world_size": 2, "strategy": "allreduce"}, **sections))
    local = train(_config({"world_size": 2, "strategy": "local_sgd", "tau": 1}, **sections))
    _close(local.metrics, allreduce.metrics)
    single = train(_config(**sections))
    _close(local.metrics, single.metrics)


def test_every_epoch_records_compute_communication_and_bytes() -> None:
    config = _config({"world_size": 2, "strategy": "allreduce"}, training={"epochs": 2})
    result = train(config)
    steps = math.ceil(1437 / 64)  # digits: 1437 training rows
    # One all-reduce per step of the gradients and the loss, 8-byte floats, ring over 2.
    expected = steps * 2 * (2 - 1) * (result.param_count + 1) * 8
    for row in result.metrics:
        assert row["comm_bytes"] == expected
        assert row["compute_seconds"] > 0 and row["comm_seconds"] > 0
        assert row["epoch_seconds"] >= row["compute_seconds"]
    local = train(
        _config({"world_size": 2, "strategy": "local_sgd", "tau": 5}, training={"epochs": 2})
    )
    # tau counts steps across epochs (23 a epoch): averages after steps 5 .. 20, then 25 ..
    # 45, plus one average for each evaluation that does not fall on a synchronisation.
    payload = 2 * local.param_count * 8
    assert [row["comm_bytes"] for row in local.metrics] == [5 * payload, 6 * payload]


def test_easgd_sync_and_async_reach_the_accuracy_of_allreduce() -> None:
    """Elastic averaging, synchronous and asynchronous, ends within 0.05 of allreduce's
    validation accuracy on digits after 10 epochs."""
    training = {"optimizer": "sgd", "lr": 0.1, "epochs": 10, "batch_size": 32, "seed": 5}
    reference = train(_config({"world_size": 2, "strategy": "allreduce"}, training=training))
    sync = train(_config({"world_size": 2, "strategy": "easgd", "tau": 4}, training=training))
    asynchronous = train(
        _config(
            {"world_size": 2, "strategy": "easgd", "tau": 4, "asynchronous": True},
            training=training,
        )
    )
    target = reference.final["val_accuracy"]
    assert target > 0.9
    assert sync.final["val_accuracy"] >= target - 0.05
    assert asynchronous.final["val_accuracy"] >= target - 0.05
    assert asynchronous.device["backend"] == "rpc"
    assert sum(row["comm_bytes"] for row in asynchronous.metrics) > 0


def test_a_rank_killed_loses_the_attempt_and_leaves_no_rank_behind() -> None:
    killed: dict[int, int] = {}

    def kill_rank_1(epoch: int, row: dict[str, float]) -> None:
        if epoch == 1:
            killed.update(_rank_pids())
            os.kill(killed[1], signal.SIGKILL)

    config = _config({"world_size": 2}, training={"epochs": 200})
    with pytest.raises(AttemptLost, match="rank 1 of 2 was killed by SIGKILL"):
        train(config, on_epoch=kill_rank_1)
    assert set(killed) == {0, 1}
    assert _gone(killed)


def test_a_hung_rank_times_out_instead_of_hanging() -> None:
    stopped: dict[int, int] = {}

    def stop_rank_1(epoch: int, row: dict[str, float]) -> None:
        if epoch == 1:
            stopped.update(_rank_pids())
            os.kill(stopped[1], signal.SIGSTOP)

    config = _config({"world_size": 2, "timeout": 3}, training={"epochs": 200})
    started = time.monotonic()
    with pytest.raises(TrainingError, match="rank 0") as caught:
        train(config, on_epoch=stop_rank_1)
    assert "timed out" in str(caught.value).lower() or "timeout" in str(caught.value).lower()
    assert time.monotonic() - started < 120
    assert _gone(stopped)


def test_should_stop_ends_every_rank_and_keeps_the_epochs_so_far() -> None:
    seen: list[int] = []
    pids: dict[int, int] = {}

    def note(epoch: int, row: dict[str, float]) -> None:
        seen.append(epoch)
        pids.update(_rank_pids())

    config = _config({"world_size": 2, "strategy": "local_sgd"}, training={"epochs": 500})
    result = train(config, on_epoch=note, should_stop=lambda: len(seen) >= 2)
    assert result.stopped_early
    assert [row["epoch"] for row in result.metrics] == seen[: len(result.metrics)]
    assert len(result.metrics) >= 2 and result.param_count > 0
    assert _gone(pids)


def test_a_stop_asked_at_an_epoch_takes_no_epoch_after_it() -> None:
    seen: list[int] = []
    config = _config({"world_size": 2, "strategy": "allreduce"}, training={"epochs": 500})
    result = train(
        config, on_epoch=lambda epoch, _: seen.append(epoch), should_stop=lambda: len(seen) >= 3
    )
    assert result.stopped_early and seen == [1, 2, 3]  # however far ahead the ranks ran
    assert [row["epoch"] for row in result.metrics] == [1, 2, 3]


def test_a_diverging_parallel_trial_fails_with_the_reason() -> None:
    config = _config(
        {"world_size": 2, "strategy": "local_sgd", "tau": 3},
        dataset={"name": "synthetic_regression"},
        training={"optimizer": "sgd", "lr": 50.0, "epochs": 5},
        execution={"device": "cpu", "dtype": "float32"},
    )
    with pytest.raises(TrainingError, match=r"(nan|inf)"):
        train(config)


BY_HAND = """
name: by-hand
dataset: {name: digits}
model: {hidden_layers: 2, hidden_units: 32}
training: {optimizer: sgd, lr: 0.1, batch_size: 64, epochs: 3, seed: 7}
execution: {device: cpu, dtype: float64, parallel: {world_size: 2, strategy: allreduce}}
"""


def test_ranks_started_by_hand_rendezvous_at_a_tcp_store(tmp_path: Path) -> None:
    """What docs/spec.md shows for several hosts: the trial's config from `sweepstack
    generate --with-config`, then one command per rank, all naming rank 0's store."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(BY_HAND)
    trials = tmp_path / "trials.jsonl"
    cli = [sys.executable, "-m", "cli.main"]
    subprocess.run(
        [*cli, "generate", str(spec), "--format", "jsonl", "--with-config", "--out", str(trials)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    master = f"127.0.0.1:{free_port()}"
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo"}
    rank = [sys.executable, "-m", "workers.training.parallel.rank", "--config", str(trials)]
    procs = [
        subprocess.Popen(
            [*rank, "--rank", str(index), "--master", master],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for index in range(2)
    ]
    outputs = [proc.communicate(timeout=120)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0]
    events = [json.loads(line) for line in outputs[0].splitlines()]
    assert [e["event"] for e in events] == ["ready", "epoch", "epoch", "epoch", "result"]
    assert outputs[1] == ""  # only rank 0 reports
    single = train(_config())
    _close(events[-1]["result"]["metrics"], single.metrics)


def _check(build: Callable[[], TrialConfig], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()


def test_parallel_config_rules() -> None:
    _check(lambda: _config({"world_size": 2, "asynchronous": True}), "only for strategy easgd")
    _check(
        lambda: _config({"world_size": 4, "strategy": "easgd", "alpha": 0.5}),
        "alpha \\* world_size must be <= 1",
    )
    _check(lambda: _config({"world_size": 2, "backend": "nccl"}), "nccl needs a CUDA device")
    _check(
        lambda: _config({"world_size": 2}, execution={"device": "cuda:1"}),
        "one GPU per rank",
    )
    _check(lambda: _config({"world_size": 4, "hosts": 3}), "hosts must divide world_size")
    _check(
        lambda: _config({"world_size": 2, "hosts": 2, "strategy": "easgd", "asynchronous": True}),
        "asynchronous easgd runs its ranks on one host",
    )
    _check(lambda: _config({"world_size": 2, "hosts": 0}), "greater than or equal to 1")
    _check(lambda: _config({"world_size": 2, "gather_timeout": 0}), "greater than 0")
    with pytest.raises(TrainingError, match="needs a worker that gathers"):
        train(_config({"world_size": 2, "hosts": 2}))  # no worker to gather the other host
    _check(lambda: _config({"world_size": 0}), "greater than or equal to 1")
    _check(lambda: _config({"tau": 0}), "greater than or equal to 1")
    config = _config({"world_size": 3, "strategy": "easgd"})
    assert math.isclose(config.execution.parallel.elastic_alpha, 0.3)
    assert _config({"world_size": 4, "strategy": "easgd", "asynchronous": True, "alpha": 0.5})
