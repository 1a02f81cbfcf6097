"""Benchmarks that print figures. Not part of `make test`; run one with `python -m bench.NAME`."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def store_url(url: str | None) -> Iterator[str]:
    """`url` (``--url`` / ``SWEEPSTACK_BENCH_MONGO_URL``) if given, else that of a SecantusDB
    started in a temporary folder for the block and stopped after it."""
    if url:
        yield url
        return
    from tests.services import SecantusProcess

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        secantus = SecantusProcess(data)
        try:
            yield secantus.url
        finally:
            secantus.stop()
