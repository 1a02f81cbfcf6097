"""What a worker process holds while it runs tasks: its settings and its store connection.

It sits below both `workers.app`, which makes one per app, and `workers.tasks`, whose tasks
are bound to it, so that neither of those imports the other.
"""

from __future__ import annotations

import os

from core.settings import Settings
from core.store.store import Store


class WorkerContext:
    """Per-process state: the settings and a store connection made after the fork."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._store: Store | None = None
        self._pid: int | None = None

    @property
    def store(self) -> Store:
        """The store, connected again in a process forked since the last connection."""
        if self._store is None or self._pid != os.getpid():
            if not self.settings.mongo_url:
                raise RuntimeError("no store URL: set SWEEPSTACK_MONGO_URL")
            self._store = Store.connect(
                self.settings.mongo_url, self.settings.mongo_db, **self.settings.store_options()
            )
            self._pid = os.getpid()
        return self._store
