"""The store contract, durability: the write concern every write asks for (#29).

Runs against the real server of the `mongo_url` fixture (SecantusDB, and a real mongod
when SWEEPSTACK_TEST_MONGO_URL is set), which must accept the default (``w: majority``,
``j: true``) on a standalone server; each test uses a database of its own and drops it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pymongo
import pytest
from pymongo import monitoring

from core.errors import ConfigError
from core.settings import Settings
from core.store.roles import EpochRow
from core.store.store import Store
from scheduler.expand import expand
from tests.core import WORKER, small_spec


class Sent(monitoring.CommandListener):
    """The write concern of each write command a client sent, by command name."""

    WRITES = frozenset({"insert", "update", "delete", "findAndModify"})

    def __init__(self) -> None:
        self.concerns: list[tuple[str, Any]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name in self.WRITES:
            self.concerns.append((event.command_name, event.command.get("writeConcern")))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def _with_option(url: str, option: str) -> str:
    """`url` with one more URL option."""
    parts = urlsplit(url)
    query = f"{parts.query}&{option}" if parts.query else option
    return urlunsplit(parts._replace(path=parts.path or "/", query=query))


def _concern(url: str, settings: Settings | None = None) -> dict[str, Any]:
    """The write concern of a store connected to `url` with `settings` (nothing is sent)."""
    store = Store.connect(url, **(settings or Settings()).store_options())
    try:
        return store.db.write_concern.document
    finally:
        store.close()


@pytest.fixture
def sent_store(mongo_url: str, db_name: str) -> Iterator[tuple[Store, Sent]]:
    sent = Sent()
    client: pymongo.MongoClient = pymongo.MongoClient(
        mongo_url, event_listeners=[sent], tz_aware=True, serverSelectionTimeoutMS=5000
    )
    store = Store(client, db_name, **Settings().store_options())
    try:
        yield store, sent
    finally:
        client.drop_database(db_name)
        client.close()


def test_every_write_asks_for_a_majority_and_the_journal_by_default(
    sent_store: tuple[Store, Sent],
) -> None:
    store, sent = sent_store
    spec = small_spec()
    points = expand(spec, with_config=True)[:3]
    sweep_id = store.admin.create_sweep(spec, points)
    ids = [f"{sweep_id}-{p.id}" for p in points]
    assert store.lifecycle.claim_queued(dict.fromkeys(ids, 0), WORKER) == ids
    store.lifecycle.report_many([EpochRow(t, 1, 1, {"loss": 0.5}) for t in ids])
    assert store.reads.epoch_rows({ids[0]: 1}) == {ids[0]: {1: {"loss": 0.5}}}
    names = {name for name, _ in sent.concerns}
    assert {"insert", "update"} <= names
    others = [(name, c) for name, c in sent.concerns if c != {"w": "majority", "j": True}]
    assert others == []


def test_the_urls_own_options_win_over_the_setting_and_the_default(mongo_url: str) -> None:
    chosen = Settings.from_env({"SWEEPSTACK_WRITE_CONCERN": "w=1,wtimeoutMS=5000"})
    assert _concern(mongo_url) == {"w": "majority", "j": True}
    assert _concern(mongo_url, chosen) == {"w": 1, "wtimeout": 5000}
    no_journal = _with_option(mongo_url, "journal=false")
    assert _concern(no_journal, chosen) == {"w": 1, "wtimeout": 5000, "j": False}
    assert _concern(_with_option(mongo_url, "w=1")) == {"w": 1, "j": True}


def test_unacknowledged_writes_are_refused(mongo_url: str) -> None:
    with pytest.raises(ConfigError, match=r"w=0 \(the store URL\)"):
        Store.connect(_with_option(mongo_url, "w=0"))
