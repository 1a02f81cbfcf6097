"""`sweepstack run`: the whole platform on one machine, with nothing but the project installed."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pymongo
import pytest

from tests.integration.stack import ROOT, wait_for
from tests.services import SecantusProcess

pytestmark = pytest.mark.integration
SWEEPSTACK = [sys.executable, "-m", "scheduler.cli"]


def clean_env(tmp_path: Path) -> dict[str, str]:
    """No SWEEPSTACK_* variable at all: every service is embedded."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWEEPSTACK_")}
    env["HOME"] = str(tmp_path / "home")
    env["PYTHONPATH"] = str(ROOT)
    return env


def processes_using(marker: str) -> list[int]:
    """Pids whose command line or environment mentions `marker` (our data folder)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            text = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker.encode() in text:
            found.append(int(entry.name))
    return found


def _describe(pid: int) -> str:
    """A leftover process for a failure message: command line, state, threads, signals."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return "(gone)"
    keep = ("State", "PPid", "Threads", "SigPnd", "ShdPnd", "SigBlk", "SigCgt")
    return argv + " | " + "; ".join(line for line in status if line.startswith(keep))


def read_trials(data_dir: Path, sweep_id: str) -> dict[str, dict]:
    """Open the embedded store's data with a SecantusDB of the test's own."""
    server = SecantusProcess(data_dir / "db")
    try:
        client = pymongo.MongoClient(server.url, serverSelectionTimeoutMS=10000)
        docs = client["sweepstack"]["trials"].find({"sweep_id": sweep_id})
        out = {d["_id"]: d for d in docs}
        client.close()
        return out
    finally:
        server.stop()


def test_run_quickstart_with_no_settings(tmp_path: Path) -> None:
    data = tmp_path / "data"
    out = subprocess.run(
        [
            *SWEEPSTACK,
            "run",
            str(ROOT / "configs" / "quickstart.yaml"),
            "--json",
            "--data",
            str(data),
            "--port",
            "0",
        ],
        env=clean_env(tmp_path),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout)
    assert summary["counts"]["complete"] == 12
    assert sum(summary["counts"].values()) == 12
    assert summary["best"]["objective"] > 0.8
    assert summary["dashboard"].startswith("http://127.0.0.1:")
    assert "dashboard: http://127.0.0.1:" in out.stderr
    trials = read_trials(data, summary["sweep_id"])
    assert len(trials) == 12 and all(t["state"] == "complete" for t in trials.values())
    assert processes_using(str(data)) == []


def test_kill_mid_sweep_then_resume(tmp_path: Path) -> None:
    data = tmp_path / "data"
    spec = tmp_path / "slow.yaml"
    spec.write_text(
        "name: slow\ndataset: {name: digits}\nexecution: {device: cpu}\n"
        "model:\n  hidden_units: 64\n  hidden_layers: [1, 2, 3, 4]\n"
        "training:\n  epochs: 25\n  batch_size: 32\n  seed: [0, 1]\n"
        "objective: {metric: val_accuracy, direction: max}\n"
    )
    env = clean_env(tmp_path)
    first = subprocess.Popen(
        [*SWEEPSTACK, "run", str(spec), "--data", str(data), "--no-dashboard", "--workers", "2"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    header = first.stderr.readline()
    match = re.search(r"sweep (\w+) ", header)
    assert match, header
    sweep_id = match.group(1)
    logs = data / "logs" / "worker.log"
    wait_for(
        lambda: logs.exists() and logs.read_text().count("succeeded") >= 2,
        300,
        "two trials to complete",
    )
    first.send_signal(signal.SIGKILL)
    first.wait()
    first.stderr.close()
    try:
        wait_for(lambda: processes_using(str(data)) == [], 30, "every child to exit")
    except AssertionError as exc:
        left = {pid: _describe(pid) for pid in processes_using(str(data))}
        logs = {p.name: p.read_text()[-1500:] for p in (data / "logs").glob("*.log")}
        raise AssertionError(f"{exc}; still running: {left}; logs: {logs}") from exc

    before = read_trials(data, sweep_id)
    done = {k: v for k, v in before.items() if v["state"] == "complete"}
    assert 2 <= len(done) < 8

    second = subprocess.run(
        [
            *SWEEPSTACK,
            "run",
            "--resume",
            sweep_id,
            "--data",
            str(data),
            "--no-dashboard",
            "--workers",
            "2",
            "--json",
        ],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert second.returncode == 0, second.stderr[-3000:]
    assert json.loads(second.stdout)["counts"]["complete"] == 8
    after = read_trials(data, sweep_id)
    for trial_id, doc in done.items():
        assert after[trial_id]["finished_at"] == doc["finished_at"]
        assert after[trial_id]["attempt"] == doc["attempt"]
    assert all(doc["state"] == "complete" for doc in after.values())
    time.sleep(0.5)
    assert processes_using(str(data)) == []


def test_a_busy_dashboard_port_is_refused_before_anything_starts(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        spec = str(ROOT / "configs" / "quickstart.yaml")
        out = subprocess.run(
            [*SWEEPSTACK, "run", spec, "--data", str(data), "--port", str(port)],
            env=clean_env(tmp_path),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert out.returncode == 2, out.stderr[-3000:]
    assert f"127.0.0.1:{port} is in use" in out.stderr and "--port" in out.stderr
    assert not (data / "logs").exists() or not any((data / "logs").iterdir())
    assert processes_using(str(data)) == []
