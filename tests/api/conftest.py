"""Fixtures for the API tests: the app on the real store and broker (see `tests.api`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flask import Flask
from flask.testing import FlaskClient

from cli.app import create_app
from core.settings import Settings
from core.store.store import Store
from scheduler.enqueue import sender_app
from tests.api import api_settings, remove_queue


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
