"""The store process of `sweepstack run`: real SecantusDB, stopped by signals however many."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pymongo import MongoClient

from tests.services import free_port, wait_listening

ROOT = Path(__file__).resolve().parents[2]


def _start(storage: Path, port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "cli.embedded_store", "--port", str(port)),
            *("--storage-path", str(storage)),
        ],
        cwd=ROOT,
    )
    wait_listening("127.0.0.1", port, 60, proc)
    return proc


def test_a_burst_of_sigterms_stops_the_store_once_and_keeps_its_data(tmp_path: Path) -> None:
    port = free_port()
    proc = _start(tmp_path / "db", port)
    url = f"mongodb://127.0.0.1:{port}/?retryWrites=false"
    with MongoClient(url) as client:
        client.t.docs.insert_one({"_id": 1, "state": "complete"})
    # A stream of SIGTERMs while it stops: `secantusd-py` re-enters its handler and either
    # deadlocks or dies by the signal; this process stops once and exits 0.
    end = time.monotonic() + 2
    while time.monotonic() < end and proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        time.sleep(0.001)
    assert proc.wait(timeout=30) == 0
    port = free_port()
    again = _start(tmp_path / "db", port)
    try:
        with MongoClient(f"mongodb://127.0.0.1:{port}/?retryWrites=false") as client:
            assert client.t.docs.find_one({"_id": 1}) == {"_id": 1, "state": "complete"}
    finally:
        again.send_signal(signal.SIGINT)
        assert again.wait(timeout=30) == 0
