"""Fixtures of the store tests: a fake clock and a store on a database of the test's own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from core.store.store import Store
from tests.core import FakeClock, open_store


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(mongo_url: str, db_name: str, clock: FakeClock) -> Iterator[Store]:
    yield from open_store(mongo_url, db_name, clock)
