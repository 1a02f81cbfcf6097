"""`sweepstack run`: the whole platform on one machine, with nothing but the project installed."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pandas
import pymongo
import pytest
from click.testing import CliRunner, Result

from cli.main import main
from tests.integration.stack import ROOT, wait_for
from tests.services import SecantusProcess

pytestmark = pytest.mark.integration
SWEEPSTACK = [sys.executable, "-m", "cli.main"]
DEFAULT_DASHBOARD_PORT = 8050


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


@dataclass(frozen=True)
class FinishedRun:
    """One `sweepstack run` of configs/quickstart.yaml that has ended, and its folder."""

    env: dict[str, str]
    data: Path
    out: subprocess.CompletedProcess

    @property
    def summary(self) -> dict:
        return json.loads(self.out.stdout)

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """A `sweepstack` command in a process of its own, with the run's environment."""
        return subprocess.run(
            [*SWEEPSTACK, *args], env=self.env, cwd=ROOT, capture_output=True, text=True,
            timeout=timeout,
        )  # fmt: skip

    def invoke(self, *args: str) -> Result:
        """A `sweepstack` command in this process (no interpreter start and imports to pay
        for), with the run's environment: every SWEEPSTACK_* variable unset, its HOME."""
        unset: dict[str, str | None] = {k: None for k in os.environ if k.startswith("SWEEPSTACK_")}
        return CliRunner().invoke(main, list(args), env={**unset, "HOME": self.env["HOME"]})


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> FinishedRun:
    """`sweepstack run configs/quickstart.yaml --json --hold`, with nothing set in the
    environment (its data folder the default, ~/.sweepstack of a HOME of its own), standard
    input not a terminal, and the default dashboard port 8050 busy. The ls, status, export
    and open tests then read its folder."""
    base = tmp_path_factory.mktemp("quickstart")
    env = clean_env(base)
    with socket.socket() as busy:
        try:
            busy.bind(("127.0.0.1", DEFAULT_DASHBOARD_PORT))
            busy.listen()
        except OSError:
            pass  # something else listens there already: busy either way
        out = subprocess.run(
            [*SWEEPSTACK, "run", str(ROOT / "configs" / "quickstart.yaml"), "--json", "--hold"],
            env=env, cwd=ROOT, capture_output=True, text=True, timeout=600,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    return FinishedRun(env, base / "home" / ".sweepstack", out)


def test_run_quickstart_with_no_settings(quickstart: FinishedRun) -> None:
    out, data = quickstart.out, quickstart.data
    assert out.returncode == 0, out.stderr[-3000:]
    summary = quickstart.summary
    sweep_id = summary["sweep_id"]
    assert summary["counts"]["complete"] == 12
    assert sum(summary["counts"].values()) == 12
    assert summary["best"]["objective"] > 0.8
    assert summary["data_dir"] == str(data)
    # The default port was busy: a free one instead, and the run says so.
    board = summary["dashboard"]
    assert board.startswith("http://127.0.0.1:") and ":8050/" not in board
    assert f"dashboard: {board}sweeps/{sweep_id}" in out.stderr
    port = board.rsplit(":", 1)[1].rstrip("/")
    assert f"note: 127.0.0.1:{DEFAULT_DASHBOARD_PORT} is in use; the dashboard is on {port}" in (
        out.stderr
    )
    assert "note: --hold is ignored: standard input is not a terminal" in out.stderr
    assert re.search(r"12/12 \S+ eta \S+ best val_accuracy", out.stderr), out.stderr[-2000:]
    # Where the results are, and the commands that reach them (the default folder: no --data).
    assert f"results: sweep {sweep_id}, kept in {data}; reach them with" in out.stderr
    commands = ("ls", f"status {sweep_id}", f"export {sweep_id} --format csv", f"open {sweep_id}")
    for command in commands:
        assert f"\n  sweepstack {command}" in out.stderr, command
    trials = read_trials(data, sweep_id)
    assert len(trials) == 12 and all(t["state"] == "complete" for t in trials.values())
    assert processes_using(str(data)) == []
    assert not (data / "holder.json").exists()


def test_ls_status_and_export_read_the_folder_after_the_run(
    quickstart: FinishedRun, tmp_path: Path
) -> None:
    """Each command starts the folder's store (nothing serves it since the run ended),
    reads, and stops it again."""
    summary, data = quickstart.summary, quickstart.data
    sweep_id, best = summary["sweep_id"], summary["best"]
    listed = quickstart.invoke("ls", "--json")
    assert listed.exit_code == 0, listed.output
    (entry,) = json.loads(listed.stdout)
    assert entry["sweep_id"] == sweep_id and entry["name"] == "quickstart"
    assert entry["status"] == "finished" and entry["trials"] == 12
    assert entry["counts"] == summary["counts"]
    assert (entry["best"], entry["best_trial"]) == (best["objective"], best["_id"])
    table = quickstart.invoke("ls")
    assert table.exit_code == 0, table.output
    assert f"sweeps in {data}" in table.stdout
    row = rf"{sweep_id} .* quickstart .* finished .* 12 .* {best['objective']:.4f}"
    assert re.search(row, table.stdout), table.stdout
    ids_only = quickstart.invoke("ls", "-q", "--limit", "1")
    assert (ids_only.exit_code, ids_only.stdout) == (0, f"{sweep_id}\n"), ids_only.output
    assert quickstart.invoke("ls", "-q", "--json").exit_code == 2

    status = quickstart.invoke("status", sweep_id, "--json")
    assert status.exit_code == 0, status.output
    shown = json.loads(status.stdout)
    assert shown["counts"] == summary["counts"] and shown["best"]["_id"] == best["_id"]
    missing = quickstart.invoke("status", "nosuchsweep")
    assert missing.exit_code == 1 and f"no sweep nosuchsweep in {data}" in missing.output

    exported = quickstart.invoke("export", sweep_id)
    assert exported.exit_code == 0, exported.output
    rows = list(csv.DictReader(io.StringIO(exported.stdout)))
    assert len(rows) == 12 and {r["state"] for r in rows} == {"complete"}
    assert {"model.hidden_layers", "model.hidden_units", "val_accuracy"} <= set(rows[0])
    ids = sorted(r["id"] for r in rows)
    assert best["_id"] in ids
    jsonl, parquet = tmp_path / "t.jsonl", tmp_path / "t.parquet"
    written = quickstart.invoke("export", sweep_id, "--format", "jsonl", "-o", str(jsonl))
    assert f"wrote 12 trials of sweep {sweep_id} to {jsonl}" in written.output
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert sorted(line["id"] for line in lines) == ids
    assert all(line["params"]["model.hidden_layers"] in (1, 2) for line in lines)
    written = quickstart.invoke("export", sweep_id, "--format", "parquet", "-o", str(parquet))
    assert written.exit_code == 0, written.output
    frame = pandas.read_parquet(parquet)
    assert sorted(frame["id"]) == ids and str(frame["objective"].dtype) == "float64"
    assert frame["objective"].max() == best["objective"]
    assert quickstart.invoke("export", sweep_id, "--format", "parquet").exit_code == 2
    # Per epoch: each trial's curve, one row an epoch (quickstart: 8 epochs each).
    curves = quickstart.invoke("export", sweep_id, "--epochs")
    assert curves.exit_code == 0, curves.output
    epochs = list(csv.DictReader(io.StringIO(curves.stdout)))
    assert len(epochs) == 12 * 8
    assert sorted({r["id"] for r in epochs}) == ids
    assert {int(r["epoch"]) for r in epochs} == set(range(1, 9))
    assert {"model.hidden_units", "val_accuracy", "train_loss"} <= set(epochs[0])
    last = {r["id"]: float(r["val_accuracy"]) for r in epochs if r["epoch"] == "8"}
    assert last[best["_id"]] == pytest.approx(best["result"]["final"]["val_accuracy"])
    per_epoch = tmp_path / "e.jsonl"
    written = quickstart.invoke("export", sweep_id, "--epochs", "--format", "jsonl", "-o",
                                str(per_epoch))  # fmt: skip
    assert f"wrote 96 epoch rows of sweep {sweep_id}" in written.output
    first = json.loads(per_epoch.read_text().splitlines()[0])
    assert first["epoch"] == 1 and "val_loss" in first["metrics"] and first["params"]
    assert processes_using(str(data)) == []
    assert not (data / "holder.json").exists()


def test_open_serves_the_sweep_and_holds_the_folder_until_sigterm(
    quickstart: FinishedRun,
) -> None:
    data, sweep_id = quickstart.data, quickstart.summary["sweep_id"]
    opened = subprocess.Popen(
        [*SWEEPSTACK, "open", sweep_id, "--port", "0"],
        env=quickstart.env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        url = opened.stdout.readline().strip()  # type: ignore[union-attr]
        assert re.fullmatch(rf"http://127\.0\.0\.1:\d+/sweeps/{sweep_id}", url), (
            url,
            opened.poll(),
        )
        with urllib.request.urlopen(url, timeout=30) as page:
            assert page.status == 200 and sweep_id in page.read().decode()
        # While it holds the folder: a run there is refused, naming it; ls reads its store.
        refused = quickstart.cli("run", str(ROOT / "configs" / "quickstart.yaml"), "--no-dashboard")
        assert refused.returncode == 2, refused.stderr
        board = url.rsplit("/sweeps/", 1)[0] + "/"
        holder = f"`sweepstack open` (pid {opened.pid}, dashboard {board}, sweep {sweep_id}"
        assert f"error: the data folder {data} is in use by {holder}" in refused.stderr
        assert "Nothing was submitted" in refused.stderr
        listed = quickstart.invoke("ls", "--json")
        assert [e["sweep_id"] for e in json.loads(listed.stdout)] == [sweep_id], listed.output
    finally:
        opened.send_signal(signal.SIGTERM)
        code = opened.wait(30)
        err = opened.stderr.read()  # type: ignore[union-attr]
    assert code == 0, err
    assert "stopping the dashboard" in err
    wait_for(lambda: processes_using(str(data)) == [], 10, "every child of open to exit")
    assert not (data / "holder.json").exists()


def test_a_busy_default_port_falls_back_and_the_browser_finds_the_sweep_there(
    quickstart: FinishedRun,
) -> None:
    """`open` on the default port while something else holds 8050: it says where it went,
    and that URL in headless Chromium draws this sweep's page (not the other server's)."""
    from playwright.sync_api import sync_playwright

    from tests.dashboard.browser import VIEWPORT, launch, open_drawn

    sweep_id = quickstart.summary["sweep_id"]
    with socket.socket() as busy:
        try:
            busy.bind(("127.0.0.1", DEFAULT_DASHBOARD_PORT))
            busy.listen()
        except OSError:
            pass  # something else listens there already: busy either way
        opened = subprocess.Popen(
            [*SWEEPSTACK, "open", sweep_id],
            env=quickstart.env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        try:
            url = opened.stdout.readline().strip()  # type: ignore[union-attr]
            port = int(url.split(":")[2].split("/")[0]) if url.count(":") == 2 else None
            assert port not in (None, DEFAULT_DASHBOARD_PORT), (url, opened.poll())
            with sync_playwright() as pw:
                browser = launch(pw)
                try:
                    context = browser.new_context(viewport=VIEWPORT)
                    page, console = open_drawn(context, url)
                    assert sweep_id in page.content()
                    assert "quickstart" in page.inner_text("body")
                    assert console.errors() == []
                finally:
                    browser.close()
        finally:
            opened.send_signal(signal.SIGTERM)
            opened.wait(30)
            err = opened.stderr.read()  # type: ignore[union-attr]
    note = f"note: 127.0.0.1:{DEFAULT_DASHBOARD_PORT} is in use; the dashboard is on {port}"
    assert note in err, err[-2000:]


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


def test_a_busy_port_given_with_port_is_refused_before_anything_starts(tmp_path: Path) -> None:
    """A busy default port falls back to a free one (`test_run_quickstart_with_no_settings`);
    one the user named with --port is refused, exit 2, nothing started or submitted."""
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
    assert "leave --port out" in out.stderr
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
