"""The data folder's lock (`cli.datafolder`), held by real processes: one holder at a
time, named in the refusal; released by the kernel when its holder is killed; kept while a
child that inherited it (the store) lives; a record left by a dead holder is ignored."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cli.datafolder import HOLDER_NAME, FolderInUse, acquire, read_holder

ROOT = Path(__file__).resolve().parents[2]
#: A process that holds the folder (argv[1]) as the command argv[3] for argv[4] seconds,
#: saying "held"; or (argv[2] == "child") hands the lock to a child that outlives it (the
#: child sleeps, the holder exits), saying the child's pid.
HOLDER = """
import subprocess, sys, time
from pathlib import Path
from cli.datafolder import acquire
lock = acquire(Path(sys.argv[1]), sys.argv[3], dashboard="http://127.0.0.1:8050/", sweep="abc")
if sys.argv[2] == "child":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             pass_fds=(lock.fd,), start_new_session=True)
    print(child.pid, flush=True)
    sys.exit(0)
print("held", flush=True)
time.sleep(float(sys.argv[4]))
lock.release()
"""


def _holder(
    folder: Path, mode: str = "hold", command: str = "run", seconds: float = 60
) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder), mode, command, str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    proc.line = proc.stdout.readline().strip()  # type: ignore[attr-defined]
    return proc


def test_a_held_folder_is_refused_naming_its_holder_until_it_is_killed(tmp_path: Path) -> None:
    holder = _holder(tmp_path)
    try:
        assert holder.line == "held"  # type: ignore[attr-defined]
        with pytest.raises(FolderInUse) as refused:
            acquire(tmp_path, "run")
        message = str(refused.value)
        assert f"pid {holder.pid}" in message and "`sweepstack run`" in message
        assert "dashboard http://127.0.0.1:8050/" in message and "sweep abc" in message
        assert "gone" not in message
    finally:
        holder.send_signal(signal.SIGKILL)  # no clean release: the kernel's
        holder.wait()
    with acquire(tmp_path, "ls") as lock:
        assert read_holder(tmp_path).pid == os.getpid() == lock.holder.pid
    assert not (tmp_path / HOLDER_NAME).exists()


def test_a_child_that_inherited_the_lock_keeps_the_folder_held(tmp_path: Path) -> None:
    holder = _holder(tmp_path, "child")
    child = int(holder.line)  # type: ignore[attr-defined]
    holder.wait()
    try:
        with pytest.raises(FolderInUse) as refused:
            acquire(tmp_path, "run")
        assert f"pid {holder.pid}" in str(refused.value)
        assert "that process is gone and its store is still stopping" in str(refused.value)
    finally:
        os.kill(child, signal.SIGKILL)
    for _ in range(10):  # acquire retries for a second each time
        try:
            lock = acquire(tmp_path, "run")
            break
        except FolderInUse:
            continue
    else:
        pytest.fail("the lock stayed held after its last holder was killed")
    lock.release()


def test_a_record_left_by_a_dead_holder_is_stale(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (tmp_path / HOLDER_NAME).write_text(json.dumps({"pid": gone.pid, "command": "run"}))
    with acquire(tmp_path, "run", dashboard="http://127.0.0.1:9/") as lock:
        record = read_holder(tmp_path)
        assert record is not None and record.pid == os.getpid()
        lock.update(sweep="s1")
        assert read_holder(tmp_path).sweep == "s1"  # type: ignore[union-attr]
        assert read_holder(tmp_path).dashboard == "http://127.0.0.1:9/"  # type: ignore[union-attr]


def test_a_short_read_is_waited_for_before_the_folder_counts_as_in_use(tmp_path: Path) -> None:
    reader = _holder(tmp_path, command="ls", seconds=2)
    assert reader.line == "held"  # type: ignore[attr-defined]
    with acquire(tmp_path, "run") as lock:  # waits the read out (READ_WAIT_SECONDS)
        assert lock.holder.command == "run"
        assert reader.wait(10) == 0
