from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from cli.app import create_app
from core.settings import Settings
from core.store.store import Store
from scheduler.enqueue import sender_app
from tests.api import api_settings, remove_queue
from tests.integration.stack import Stack
from tests.services import SecantusProcess, broker_url_or_fail, reachable


def _store_backends() -> list[str]:
    backends = ["secantus"]
    if os.environ.get("SWEEPSTACK_TEST_MONGO_URL"):
        backends.append("mongod")
    return backends


@pytest.fixture(scope="session")
def secantus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The SecantusDB that `make test` started, or one started here."""
    url = os.environ.get("SWEEPSTACK_TEST_SECANTUS_URL")
    if url:
        if not reachable(url):
            pytest.fail(f"SWEEPSTACK_TEST_SECANTUS_URL={url} is not reachable", pytrace=False)
        yield url
        return
    server = SecantusProcess(tmp_path_factory.mktemp("secantus") / "data")
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session", params=_store_backends())
def mongo_url(request: pytest.FixtureRequest) -> str:
    """A MongoDB wire-protocol server: SecantusDB always, a real mongod when one is named."""
    if request.param == "mongod":
        url = os.environ["SWEEPSTACK_TEST_MONGO_URL"]
        if not reachable(url):
            pytest.fail(f"SWEEPSTACK_TEST_MONGO_URL={url} is not reachable", pytrace=False)
        return url
    return request.getfixturevalue("secantus_url")


@pytest.fixture
def db_name() -> str:
    """A database name of the test's own; the fixture that uses it drops it."""
    return f"sweepstack_test_{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def broker_url() -> str:
    """The real RabbitMQ; fails (never skips) when it is not there."""
    return broker_url_or_fail()


@pytest.fixture
def stack(broker_url: str, secantus_url: str, db_name: str, tmp_path: Path) -> Iterator[Stack]:
    """A queue, a database and workers of the test's own, on the real services."""
    s = Stack(broker_url, secantus_url, db_name, tmp_path)
    try:
        yield s
    finally:
        s.close()


# The composed web app (API, dashboard, the shared web layer) on the real store and broker:
# what tests/api, tests/web and tests/cli serve. tests/core and tests/dashboard have stores
# of their own.
@pytest.fixture
def settings(broker_url: str, secantus_url: str, db_name: str) -> Settings:
    return api_settings(broker_url, secantus_url, db_name)


@pytest.fixture
def store(settings: Settings) -> Iterator[Store]:
    assert settings.mongo_url is not None
    store = Store.connect(settings.mongo_url, settings.mongo_db, timeout_ms=2000)
    try:
        yield store
    finally:
        store.client.drop_database(settings.mongo_db)
        store.close()
        remove_queue(settings)


@pytest.fixture
def app(settings: Settings, store: Store) -> Flask:
    return create_app(settings, store=store, sender=sender_app(settings))


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()
