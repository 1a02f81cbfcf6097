"""`web.headers`: every response of the composed app (API and dashboard) carries the
security headers, a user's data is never stored by a cache, and plotly.js keeps its own
caching. The pages draw under these headers without a console error in Chromium (every
browser test checks that)."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from cli.app import create_app
from core.settings import Settings
from core.store.store import Store
from scheduler.enqueue import sender_app
from tests.api import ALICE
from web.headers import HEADERS


@pytest.fixture
def client(settings: Settings, store: Store) -> FlaskClient:
    return create_app(settings, store=store, sender=sender_app(settings)).test_client()


@pytest.mark.parametrize(
    "path",
    ["/api/v1/sweeps", "/api/v1/health", "/api/v1/openapi.json", "/login", "/",
     "/dashboard/data/sweeps", "/no/such/page", "/api/v1/no-such-route"],
)  # fmt: skip
def test_every_response_carries_the_headers_and_is_not_stored(
    client: FlaskClient, path: str
) -> None:
    response = client.get(path, headers=ALICE if path.startswith("/api/") else {})
    for name, value in HEADERS.items():
        assert response.headers.get(name) == value, (path, name)
    assert "frame-ancestors 'none'" in response.headers["Content-Security-Policy"]
    assert response.headers["Cache-Control"] == "no-store", path


def test_plotly_js_keeps_its_long_caching(client: FlaskClient) -> None:
    response = client.get("/dashboard/plotly.min.js")
    assert response.status_code == 200
    assert "max-age" in response.headers["Cache-Control"], response.headers["Cache-Control"]
    assert response.headers["X-Content-Type-Options"] == "nosniff"
