"""`sweepstack worker`: how processes and torch threads are split."""

from __future__ import annotations

import pytest

from scheduler.commands import usable_cores, worker_commands


def test_worker_command_splits_cores_between_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SWEEPSTACK_TORCH_THREADS", raising=False)
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


def test_torch_threads_from_the_environment_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWEEPSTACK_TORCH_THREADS", "3")
    ((_, env),) = worker_commands(2, None, "INFO", "q")
    assert env["SWEEPSTACK_TORCH_THREADS"] == "3" == env["OMP_NUM_THREADS"]
