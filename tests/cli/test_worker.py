"""`sweepstack worker`: how processes and torch threads are split, node names, options."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import main
from cli.worker import node_names, usable_cores, worker_commands
from core.settings import Settings


def test_worker_command_splits_cores_between_processes() -> None:
    ((cmd, env),) = worker_commands(2, None, "INFO", "q")
    assert cmd[cmd.index("--concurrency") + 1] == "2"
    cores = usable_cores()
    assert int(env["SWEEPSTACK_TORCH_THREADS"]) * 2 <= max(cores, 2)
    ((cmd, env),) = worker_commands(1, None, "INFO", "q")
    assert env["SWEEPSTACK_TORCH_THREADS"] == str(cores)


def test_worker_command_one_process_per_gpu() -> None:
    procs = worker_commands(4, "0,2", "INFO", "q")
    assert [env["CUDA_VISIBLE_DEVICES"] for _, env in procs] == ["0", "2"]
    assert all(cmd[cmd.index("--concurrency") + 1] == "1" for cmd, _ in procs)


def test_torch_threads_from_the_settings_win() -> None:
    threads = Settings.from_env({"SWEEPSTACK_TORCH_THREADS": "3"}).torch_threads
    ((_, env),) = worker_commands(2, None, "INFO", "q", threads=threads)
    assert env["SWEEPSTACK_TORCH_THREADS"] == "3" == env["OMP_NUM_THREADS"]
    assert Settings.from_env({}).torch_threads is None  # unset: the cores, shared out


def test_node_names_are_unique_per_command_and_follow_name() -> None:
    assert node_names(None, pid=12) == ["cpu-12@%h"]
    assert node_names(["0", "2"], pid=12) == ["gpu0-12@%h", "gpu2-12@%h"]
    assert node_names(None, "big", pid=12) == ["big@%h"]
    assert node_names(None, "big@box", pid=12) == ["big@box"]
    assert node_names(["1"], "big@%h", pid=12) == ["big-gpu1@%h"]
    ((cmd, _),) = worker_commands(1, None, "INFO", "q")
    assert cmd[cmd.index("--hostname") + 1] == f"cpu-{os.getpid()}@%h"
    ((cmd, _),) = worker_commands(1, None, "INFO", "q", name="mine")
    assert cmd[cmd.index("--hostname") + 1] == "mine@%h"


def test_the_api_reads_the_device_from_the_default_names() -> None:
    from api.celery_workers import device

    assert [device(n) for n in node_names(None, pid=3)] == ["cpu"]
    assert [device(n) for n in node_names(["0", "5"], pid=3)] == ["gpu:0", "gpu:5"]
    assert [device(n) for n in node_names(["1"], "big", pid=3)] == ["gpu:1"]
    assert device("test-1@box") is None


def test_worker_help_names_workers_and_hides_concurrency() -> None:
    out = CliRunner().invoke(main, ["worker", "--help"])
    assert out.exit_code == 0
    assert "--workers" in out.output and "--name" in out.output
    assert "--concurrency" not in out.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workers", "2", "--concurrency", "3"], "--workers 2 and --concurrency 3 disagree"),
        (["--name", "@box"], "must be NAME or NAME@HOST, got '@box'"),
        (["--name", "a b"], "must be NAME or NAME@HOST, got 'a b'"),
    ],
)
def test_worker_refuses_bad_options_before_starting(
    monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    monkeypatch.setenv("SWEEPSTACK_BROKER_URL", "amqp://127.0.0.1:1//")
    monkeypatch.setenv("SWEEPSTACK_MONGO_URL", "mongodb://127.0.0.1:1/")
    out = CliRunner().invoke(main, ["worker", *args])
    assert out.exit_code == 2
    assert message in out.output


def test_worker_gpus_all_without_nvidia_smi_exits_2(tmp_path: Path) -> None:
    env = {
        "PATH": str(tmp_path),  # an empty folder: no nvidia-smi on it
        "SWEEPSTACK_BROKER_URL": "amqp://127.0.0.1:9//",
        "SWEEPSTACK_MONGO_URL": "mongodb://127.0.0.1:9/",
    }
    result = CliRunner().invoke(main, ["worker", "--gpus", "all"], env=env)
    assert result.exit_code == 2, result.output
    assert "--gpus all: cannot run nvidia-smi" in result.output
    assert "--gpus 0,1" in result.output and "Traceback" not in result.output
