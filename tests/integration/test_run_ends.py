"""`sweepstack run` when a sweep goes wrong or is stopped, and what the commands after it
say: every trial failed (the reasons, grouped, and exit 1), and a run stopped with Ctrl-C
(the `--resume` hint, `ls` saying stopped, `delete`). The run helpers are test_run's."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path

import pytest

from tests.integration.stack import ROOT, wait_for
from tests.integration.test_run import SWEEPSTACK, clean_env, processes_using, read_trials

pytestmark = pytest.mark.integration


def sweepstack(env: dict[str, str], *args: str, timeout: float = 200
               ) -> subprocess.CompletedProcess:
    """A `sweepstack` command in a process of its own, no terminal on standard input."""
    return subprocess.run([*SWEEPSTACK, *args], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)  # fmt: skip


def test_a_run_whose_every_trial_failed_says_why_and_exits_1(tmp_path: Path) -> None:
    """A learning rate that blows the loss up: both trials fail. `run` prints the failures
    grouped by reason and exits 1; `--json` carries them; `status` prints them too."""
    spec = tmp_path / "diverges.yaml"
    spec.write_text(
        "name: diverges\ndataset: {name: iris}\nexecution: {device: cpu}\n"
        "model: {hidden_layers: 1, hidden_units: [4, 8]}\n"
        "training: {optimizer: sgd, lr: 100.0, epochs: 3, batch_size: 16, seed: 0}\n"
        "objective: {metric: val_accuracy, direction: max}\n"
    )
    env, data = clean_env(tmp_path), tmp_path / "data"
    out = sweepstack(env, "run", str(spec), "--data", str(data), "--no-dashboard", "--workers", "1")
    assert out.returncode == 1, out.stderr[-3000:]
    assert "2 of 2 trials failed:" in out.stderr
    assert re.search(r"\n  1  loss became (nan|inf) at epoch \d+.*\(e\.g\. trial #\d\)",
                     out.stderr), out.stderr  # fmt: skip
    match = re.search(r"error: no trial of sweep (\w+) completed; the reasons are above",
                      out.stderr)  # fmt: skip
    assert match, out.stderr[-2000:]
    assert "top 10 trials" not in out.stdout  # no empty table
    as_json = sweepstack(env, "run", str(spec), "--data", str(data), "--no-dashboard",
                         "--workers", "1", "--json")  # fmt: skip
    assert as_json.returncode == 1, as_json.stderr[-3000:]
    failures = json.loads(as_json.stdout)["failures"]
    assert sum(f["n"] for f in failures) == 2
    assert all(f["reason"].startswith("loss became") for f in failures)
    status = sweepstack(env, "status", match.group(1), "--data", str(data))
    assert status.returncode == 0, status.stderr
    assert "no trial completed" in status.stdout and "2 of 2 trials failed" in status.stdout


def test_ctrl_c_names_the_resume_ls_says_stopped_and_delete_removes_it(tmp_path: Path) -> None:
    data, env = tmp_path / "data", clean_env(tmp_path)
    spec = tmp_path / "slow.yaml"
    spec.write_text(
        "name: slow\ndataset: {name: digits}\nexecution: {device: cpu}\n"
        "model: {hidden_units: 64, hidden_layers: [1, 2, 3, 4]}\n"
        "training: {epochs: 25, batch_size: 32, seed: [0, 1]}\n"
        "objective: {metric: val_accuracy, direction: max}\n"
    )
    run = subprocess.Popen(
        [*SWEEPSTACK, "run", str(spec), "--data", str(data), "--no-dashboard", "--workers", "1"],
        env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    header = run.stderr.readline()
    match = re.search(r"sweep (\w+) ", header)
    assert match, header
    sweep_id = match.group(1)
    logs = data / "logs" / "worker.log"
    wait_for(lambda: logs.exists() and "received" in logs.read_text(), 120, "a trial to start")
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=60)
    assert run.returncode == 130, err
    assert f"`sweepstack run --resume {sweep_id} --data {data}` finishes it" in err, err
    wait_for(lambda: processes_using(str(data)) == [], 30, "every child to exit")

    listed = sweepstack(env, "ls", "--data", str(data), "--json")
    (entry,) = json.loads(listed.stdout)
    assert entry["sweep_id"] == sweep_id and entry["status"] == "stopped", entry
    table = sweepstack(env, "ls", "--data", str(data))
    assert f"run --resume {sweep_id} --data {data}` finishes it" in table.stdout

    refused = sweepstack(env, "delete", sweep_id, "--data", str(data))
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert read_trials(data, sweep_id)  # nothing deleted
    deleted = sweepstack(env, "delete", sweep_id, "--data", str(data), "--yes")
    assert deleted.returncode == 0, deleted.stderr
    assert f"deleted sweep {sweep_id}: 8 trials" in deleted.stdout
    assert read_trials(data, sweep_id) == {}
    gone = sweepstack(env, "status", sweep_id, "--data", str(data))
    assert gone.returncode == 1 and f"no sweep {sweep_id}" in gone.stderr
    assert processes_using(str(data)) == []
