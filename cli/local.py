"""The results of `sweepstack run` after it has ended: the store kept in its data folder.

`sweepstack run` with no ``SWEEPSTACK_MONGO_URL`` keeps every sweep in the embedded
SecantusDB of its data folder (``--data``, default ``SWEEPSTACK_DATA_DIR`` or
``~/.sweepstack``), and the folder remembers them after the run. `local_store` reaches
that store for one command (`ls`, `status`, `export`, `report`, `open`: every command
that takes its store from `open_store`):

- the folder is free: it is held for this command (`cli.datafolder`), its SecantusDB
  started (about a second) and stopped again when the command ends;
- another process holds it (a `run` still going or holding its dashboard, an `open`): the
  store that process serves is used, as its record names it, and nothing is started.

With ``SWEEPSTACK_MONGO_URL`` set, `open_store` connects to that store and no folder is
read. `reached` says which it was, and `find_sweep` names the folder when a sweep is not in it.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from cli import datafolder, embedded
from cli.datafolder import FolderInUse, FolderLock, Holder
from cli.shared import program
from core.errors import NotFound, StoreUnavailable, SweepstackError
from core.settings import Settings

if TYPE_CHECKING:
    from core.store.store import Store

#: How long the folder's SecantusDB may take to listen (a cold start on a loaded host).
STORE_START_TIMEOUT = 60.0
#: Where `open_store` leaves the `Reached` of a data folder, in ``ctx.meta``.
LOCAL_KEY = "sweepstack.local"


class NoResults(SweepstackError):
    """The data folder holds no store: no `sweepstack run` has kept a sweep there."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        super().__init__(
            f"no results in {folder}: no `sweepstack run` has stored a sweep there "
            "(give the folder it ran with: --data DIR, or SWEEPSTACK_DATA_DIR)"
        )


@dataclasses.dataclass
class Reached:
    """A store reached for a command: its URL, and whose it is (`holder` None: this
    command started it and holds the folder, `lock`; nothing else writes to it)."""

    store: Store
    url: str
    folder: Path
    holder: Holder | None
    lock: FolderLock | None = None

    @property
    def live(self) -> bool:
        """Whether another process serves this store (a run may still be writing to it)."""
        return self.holder is not None


def with_data_dir(settings: Settings, data_dir: str | None) -> Settings:
    """`settings` with the folder ``--data`` gave, if it gave one."""
    if not data_dir:
        return settings
    return dataclasses.replace(settings, data_dir=Path(data_dir).expanduser())


def _connect(url: str, db: str) -> Store:
    from cli.shared import read_settings
    from core.store.store import Store  # imported by the commands that read a store

    store = Store.connect(url, db, **read_settings().store_options())
    store.ensure_indexes()
    return store


@contextlib.contextmanager
def local_store(folder: Path, command: str, db: str = "sweepstack") -> Iterator[Reached]:
    """The store of the data folder `folder`, for the length of the block (see the module
    docstring); `NoResults` if no run ever stored anything there."""
    if not folder.is_dir():
        raise NoResults(folder)
    try:
        lock = datafolder.acquire(folder, command)
    except FolderInUse as exc:
        if exc.holder is None or not exc.holder.store:
            raise
        try:
            store = _connect(exc.holder.store, db)
        except StoreUnavailable as unreachable:
            raise SweepstackError(f"{exc}; its store does not answer: {unreachable}") from exc
        try:
            yield Reached(store, exc.holder.store, folder, exc.holder)
        finally:
            store.close()
        return
    procs = embedded.Processes(folder)
    store = None
    try:
        if not (folder / "db").is_dir():
            raise NoResults(folder)
        try:
            service = embedded.start_store(procs, folder, keep_fds=(lock.fd,))
            lock.update(store=service.url)
            service.wait(STORE_START_TIMEOUT)
        except RuntimeError as exc:  # the store exited, or did not listen in time
            raise SweepstackError(f"{exc}; see {procs.logs / 'store.log'}") from exc
        store = _connect(service.url, db)
        yield Reached(store, service.url, folder, None, lock)
    finally:
        if store is not None:
            store.close()
        procs.stop()
        lock.release()


def open_store(settings: Settings) -> Store:
    """The store of ``SWEEPSTACK_MONGO_URL``; unset, that of the data folder
    (``settings.data_dir``), started for this command and stopped when it ends
    (`local_store`; what was reached is `reached`)."""
    if not settings.mongo_url:
        ctx = click.get_current_context()
        command = ctx.info_name or "sweepstack"
        found = ctx.with_resource(local_store(settings.data_dir, command, settings.mongo_db))
        ctx.meta[LOCAL_KEY] = found
        return found.store
    return _connect(settings.mongo_url, settings.mongo_db)


def reached() -> Reached | None:
    """The data folder's store `open_store` reached for this command (None: a MongoDB URL)."""
    return click.get_current_context().meta.get(LOCAL_KEY)


def find_sweep(store: Store, sweep_id: str) -> dict[str, Any]:
    """The sweep `sweep_id` of `store`, or an error that says where it was looked for and
    how to list the sweeps there."""
    try:
        return store.reads.get_sweep(sweep_id)
    except NotFound as exc:
        found = reached()
        where = f" in {found.folder}" if found else ""
        raise click.ClickException(
            f"no sweep {sweep_id}{where}; `{program()} ls` lists the sweeps there"
        ) from exc


def reach_commands(sweep_id: str, folder: Path, default_folder: Path) -> list[str]:
    """The commands that reach a finished run's results, as the user can type them."""
    name = program()
    data = "" if folder == default_folder else f" --data {folder}"
    return [
        f"{name} ls{data}",
        f"{name} status {sweep_id}{data}",
        f"{name} export {sweep_id}{data} --format csv -o {sweep_id}.csv",
        f"{name} open {sweep_id}{data}",
    ]


def dashboard_port(port: int) -> tuple[int, int | None]:
    """The port the dashboard will listen on (0: a free one, chosen when it starts), and
    the busy port it fell back from, if it did.

    The default port (8050) falls back to a free one when something else listens on it
    (another run's dashboard, most often), and the caller says so. A busy port given
    explicitly with ``--port`` is refused, exit 2, before anything starts: the user named
    that port (a tunnel, a bookmark), and a dashboard quietly elsewhere would look like the
    other process's pages. ``--port 0`` asks for any free port.
    """
    if not port or embedded.port_free(port):
        return port, None
    source = click.get_current_context().get_parameter_source("port")
    if source is not click.core.ParameterSource.DEFAULT:
        raise click.BadParameter(
            f"127.0.0.1:{port} is in use; choose another port, 0 for any free one, or leave "
            "--port out (the default port falls back to a free one when busy)",
            param_hint="--port",
        )
    return 0, port
