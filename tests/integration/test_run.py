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
import yaml

from core.records import flatten_params
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


def run_then_kill(env: dict[str, str], spec: Path, data: Path, completed: int) -> str:
    """`sweepstack run SPEC` until `completed` trials succeeded, then kill -9 (no clean
    stop); the sweep's id."""
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
    logs = data / "logs" / "worker.log"
    wait_for(
        lambda: logs.exists() and logs.read_text().count("succeeded") >= completed,
        300,
        f"{completed} trials to complete",
    )
    first.send_signal(signal.SIGKILL)
    first.wait()
    first.stderr.close()
    return match.group(1)


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
    sweep_id = run_then_kill(env, spec, data, 2)
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


def run_json(env: dict[str, str], *args: str) -> dict:
    """`sweepstack run ARGS --json --no-dashboard --workers 2`, which must exit 0; its
    summary."""
    try:
        out = subprocess.run(
            [*SWEEPSTACK, "run", *args, "--json", "--no-dashboard", "--workers", "2"],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=200,  # below pytest's 300 s, so what it printed is shown
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"run {args} still running after 200 s:\n{_tail(exc.stderr)}") from exc
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def _tail(text: str | bytes | None, n: int = 3000) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return (text or "")[-n:]


def mcleod_tpe(tmp_path: Path, **search: int) -> Path:
    """configs/mcleod-tpe.yaml with one epoch on the CPU (and these search settings)."""
    doc = yaml.safe_load((ROOT / "configs" / "mcleod-tpe.yaml").read_text())
    assert doc["search"] == {"algorithm": "tpe", "trials": 24, "parallelism": 4, "seed": 0}
    doc["training"] = {**doc["training"], "epochs": 1}
    doc["execution"] = {**doc["execution"], "device": "cpu"}
    doc["search"].update(search)
    spec = tmp_path / "mcleod-tpe.yaml"
    spec.write_text(yaml.safe_dump(doc))
    return spec


def distinct_points(trials: dict[str, dict]) -> int:
    return len({repr(sorted(flatten_params(t["params"]).items())) for t in trials.values()})


def test_run_a_tpe_sweep_feeds_it_to_its_budget(tmp_path: Path) -> None:
    """configs/mcleod-tpe.yaml with one epoch: `run` feeds TPE in-process to 24 trials,
    never more than 4 in flight (each asked after some results came back)."""
    data = tmp_path / "data"
    spec = mcleod_tpe(tmp_path)
    summary = run_json(clean_env(tmp_path), str(spec), "--data", str(data))
    assert summary["counts"]["complete"] == 24 and sum(summary["counts"].values()) == 24
    trials = read_trials(data, summary["sweep_id"])
    assert len(trials) == 24 and all(t["state"] == "complete" for t in trials.values())
    # Distinct Optuna numbers (not 0-23: a point TPE draws twice is dropped, its number too).
    assert len({t["optuna"]["number"] for t in trials.values()}) == 24
    assert distinct_points(trials) == 24
    # At most 4 in flight: the trial created k-th (k >= 4) waited for k - 3 to finish.
    by_created = sorted(trials.values(), key=lambda t: (t["queued_at"], t["index"]))
    finished = sorted(t["finished_at"] for t in trials.values())
    for k, trial in enumerate(by_created[4:], start=4):
        assert finished[k - 4] <= trial["queued_at"], k
    assert processes_using(str(data)) == []


def test_a_killed_tpe_run_resumes_to_its_budget_without_asking_twice(tmp_path: Path) -> None:
    """kill -9 of `run` mid-sweep leaves planned trials and a lease nobody gives back;
    `run --resume` takes the lease once it expires, rebuilds the study and feeds the rest."""
    data = tmp_path / "data"
    spec = mcleod_tpe(tmp_path, parallelism=2)
    env = clean_env(tmp_path)
    sweep_id = run_then_kill(env, spec, data, 6)
    wait_for(lambda: processes_using(str(data)) == [], 30, "every child to exit")
    before = read_trials(data, sweep_id)
    assert 6 <= len(before) < 24
    done = {k: v for k, v in before.items() if v["state"] == "complete"}
    counts = run_json(env, "--resume", sweep_id, "--data", str(data))["counts"]
    after = read_trials(data, sweep_id)
    assert counts["complete"] == 24, counts
    assert len(after) == 24 and all(t["state"] == "complete" for t in after.values())
    assert distinct_points(after) == 24
    assert len({t["optuna"]["number"] for t in after.values()}) == 24
    for trial_id, doc in done.items():
        assert after[trial_id]["finished_at"] == doc["finished_at"]
        assert after[trial_id]["params"] == doc["params"]
    assert processes_using(str(data)) == []


def test_a_pruning_run_stops_the_hopeless_trials_within_an_epoch(tmp_path: Path) -> None:
    """The whole path, in `run`: workers report every epoch, the in-process scheduler's
    Optuna pruner (threshold: val_accuracy below 0.5 after 2 epochs) decides, the store
    carries the request, and the worker stops at the next epoch end. Trials with a learning
    rate too small to learn are pruned, the others complete every epoch."""
    data = tmp_path / "data"
    doc = {
        "name": "pruning-run",
        "dataset": {"name": "digits"},
        "model": {"hidden_layers": 1, "hidden_units": [16, 32], "activation": "relu"},
        "training": {
            "optimizer": "sgd",
            "lr": [0.1, 0.00001],
            "batch_size": 8,
            "epochs": 25,
            "seed": 0,
        },
        "execution": {"device": "cpu", "time_limit": 300},
        "objective": {"metric": "val_accuracy", "direction": "maximize"},
        "pruning": {"algorithm": "threshold", "lower": 0.5, "n_warmup_steps": 2},
    }
    spec = tmp_path / "pruning.yaml"
    spec.write_text(yaml.safe_dump(doc))
    summary = run_json(clean_env(tmp_path), str(spec), "--data", str(data))
    assert summary["counts"]["pruned"] == 2 and summary["counts"]["complete"] == 2, summary
    trials = read_trials(data, summary["sweep_id"])
    for trial in trials.values():
        lr = trial["params"]["training"]["lr"]
        if lr < 0.001:
            assert trial["state"] == "pruned", trial["_id"]
            asked = trial["prune_requested"]["epoch"]
            assert asked <= trial["pruned_epoch"] <= asked + 1, (asked, trial["pruned_epoch"])
            assert trial["pruned_epoch"] < 25
        else:
            assert trial["state"] == "complete", trial["_id"]
            assert "prune_requested" not in trial
    server = SecantusProcess(data / "db")
    try:
        client = pymongo.MongoClient(server.url, serverSelectionTimeoutMS=10000)
        for trial in trials.values():
            rows = list(client["sweepstack"]["metrics"].find({"trial_id": trial["_id"]}))
            epochs = sorted(r["epoch"] for r in rows)
            assert epochs == sorted(set(epochs)), "an epoch row written twice"
            last = trial.get("pruned_epoch", 25)
            assert epochs[-1] == last, (trial["_id"], epochs[-1], last)
        client.close()
    finally:
        server.stop()
    assert processes_using(str(data)) == []
