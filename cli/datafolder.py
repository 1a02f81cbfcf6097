"""Which process holds a data folder: one at a time serves the store kept in it.

The embedded store (SecantusDB) and broker keep their files in the data folder of
`sweepstack run`, and two servers on one folder do not mix: a second SecantusDB on the
same storage exits at start (its reason only in a log file), and two runs on one broker
folder take each other's messages. So every command that starts the folder's store (`run`,
`open`, and `ls`, `status`, `export` while they read) first takes ``DATA/lock``:

- with `fcntl.flock`, which the kernel releases when the last descriptor of the lock's
  open file closes: a holder killed with ``kill -9`` leaves no stale lock behind. The
  embedded store inherits the descriptor (`FolderLock.fd`, passed to the child), so the
  folder stays held until that store has exited too, not only the run that started it;
- ``DATA/holder.json`` says who holds it (pid, command, the store's and dashboard's URLs,
  the sweep), written whole (temp + rename) once the lock is taken and removed before it
  is given back. One found while the lock is free is stale and ignored. A lock held under
  the record of a pid that is gone is that pid's store, still stopping.

A command that only reads and finds the folder held uses the holder's store (its URL is in
the record) instead of starting another (`cli.local`). `run` refuses a held folder
before anything is submitted, naming the holder (`FolderInUse`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.errors import SweepstackError

LOCK_NAME = "lock"
HOLDER_NAME = "holder.json"
#: How long `acquire` retries a held lock, and a reader waits for the holder's record:
#: a lock just taken has no record for a moment.
SETTLE_SECONDS = 1.0
#: The commands that hold a folder for as long as they run (a sweep, a dashboard held
#: open). Any other holder (`ls`, `status`, `export`: a read of a second or two) is waited
#: for, up to `READ_WAIT_SECONDS`, before the folder counts as in use.
LONG_HOLDERS = frozenset({"run", "open"})
READ_WAIT_SECONDS = 15.0


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (signal 0 asks without sending anything)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True


@dataclass(frozen=True)
class Holder:
    """The process that holds a data folder, as its ``holder.json`` says."""

    pid: int
    command: str
    store: str | None = None
    dashboard: str | None = None
    sweep: str | None = None
    started: str = ""

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Holder:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known})

    def describe(self) -> str:
        """``sweepstack run (pid 12, dashboard http://..., sweep abc)``, for messages."""
        parts = [f"pid {self.pid}"]
        if self.dashboard:
            parts.append(f"dashboard {self.dashboard}")
        if self.sweep:
            parts.append(f"sweep {self.sweep}")
        if self.started:
            parts.append(f"since {self.started}")
        text = f"`sweepstack {self.command}` ({', '.join(parts)})"
        if not pid_alive(self.pid):
            text += "; that process is gone and its store is still stopping: try again shortly"
        return text


class FolderInUse(SweepstackError):
    """Another process holds the data folder; `holder` is who (None: it gave no record)."""

    def __init__(self, folder: Path, holder: Holder | None) -> None:
        self.folder = folder
        self.holder = holder
        who = holder.describe() if holder else "another process (it left no record)"
        super().__init__(f"the data folder {folder} is in use by {who}")


def read_holder(folder: Path) -> Holder | None:
    """The record in ``holder.json`` (stale or not), or None if there is none readable."""
    try:
        raw = json.loads((folder / HOLDER_NAME).read_text(encoding="utf-8"))
        return Holder.from_json(raw) if isinstance(raw, dict) else None
    except (OSError, ValueError, TypeError):
        return None


class FolderLock:
    """The lock on a data folder, held by this process (see the module docstring)."""

    def __init__(self, folder: Path, fd: int, holder: Holder) -> None:
        self.folder = folder
        self.fd = fd
        self.holder = holder
        self._write()

    def update(self, **changes: Any) -> None:
        """Record more about the holder (the store's URL once chosen, the sweep)."""
        self.holder = dataclasses.replace(self.holder, **changes)
        self._write()

    def _write(self) -> None:
        path = self.folder / HOLDER_NAME
        partial = path.with_name(f".{HOLDER_NAME}.{os.getpid()}.tmp")
        partial.write_text(json.dumps(dataclasses.asdict(self.holder)), encoding="utf-8")
        os.replace(partial, path)

    def release(self) -> None:
        """Remove the record and give the lock back (idempotent)."""
        if self.fd < 0:
            return
        with contextlib.suppress(OSError):
            (self.folder / HOLDER_NAME).unlink()
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = -1

    def __enter__(self) -> FolderLock:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def current_holder(folder: Path) -> Holder | None:
    """Who holds the folder now, waiting up to `SETTLE_SECONDS` for a new holder's record;
    None if it is free (or its holder wrote no record in that time)."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        holder = read_holder(folder)
        if holder is not None or time.monotonic() >= deadline:
            return holder
        time.sleep(0.05)


def acquire(folder: Path, command: str, **record: Any) -> FolderLock:
    """Hold `folder` for this process as `command`, or raise `FolderInUse` naming its holder.

    A held lock is retried for `SETTLE_SECONDS`, and for `READ_WAIT_SECONDS` while its
    holder is a short read (not one of `LONG_HOLDERS`). `record` fills the `Holder`
    (store, dashboard, sweep).
    """
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    started = time.monotonic()
    while not _try_lock(fd):
        waited = time.monotonic() - started
        if waited >= SETTLE_SECONDS:
            holder = current_holder(folder)
            short = holder is not None and holder.command not in LONG_HOLDERS
            if not short or waited >= READ_WAIT_SECONDS:
                os.close(fd)
                raise FolderInUse(folder, holder)
        time.sleep(0.05)
    started = datetime.now(UTC).astimezone().strftime("%Y-%m-%d %H:%M:%S")
    try:
        return FolderLock(folder, fd, Holder(os.getpid(), command, started=started, **record))
    except BaseException:
        os.close(fd)  # closing the only descriptor gives the lock back
        raise
