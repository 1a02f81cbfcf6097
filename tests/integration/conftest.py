from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.stack import Stack


@pytest.fixture
def stack(broker_url: str, secantus_url: str, db_name: str, tmp_path: Path) -> Iterator[Stack]:
    """A queue, a database and workers of the test's own, on the real services."""
    s = Stack(broker_url, secantus_url, db_name, tmp_path)
    try:
        yield s
    finally:
        s.close()
