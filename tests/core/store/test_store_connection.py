"""The store contract, connecting: ping, indexes, an unreachable server, a bad URL.

Runs against the real server of the `mongo_url` fixture (SecantusDB, and a real mongod
when SWEEPSTACK_TEST_MONGO_URL is set); each test uses a database of its own and drops it.
"""

from __future__ import annotations

import pytest

from core.errors import (
    ConfigError,
    StoreUnavailable,
)
from core.store.store import Store
from tests.core import WORKER
from tests.services import free_port

# -- connection ------------------------------------------------------------------------


def test_ping_and_idempotent_indexes(store: Store) -> None:
    assert 0 < store.ping() < 5
    store.ensure_indexes()
    store.ensure_indexes()
    names = set(store.db["trials"].index_information())
    assert {"sweep_index", "state_sweep_index", "sweep_updated"} <= names
    assert "trial_attempt_epoch" in store.db["metrics"].index_information()
    assert {"sweep_kind", "trial"} <= set(store.db["artifacts"].index_information())


def test_unreachable_server_raises_store_unavailable() -> None:
    url = f"mongodb://127.0.0.1:{free_port()}/?retryWrites=false"
    store = Store.connect(url, "nothing", timeout_ms=200)
    try:
        with pytest.raises(StoreUnavailable):
            store.ping()
        with pytest.raises(StoreUnavailable):
            store.reads.get_sweep("abcdef012345")
        with pytest.raises(StoreUnavailable):
            store.lifecycle.claim("abc-def", WORKER, stale_after=60)
    finally:
        store.close()


def test_malformed_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="store URL"):
        Store.connect("http://not-mongo:27017")
