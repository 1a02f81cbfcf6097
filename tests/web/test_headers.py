"""`web.headers`: every response of the composed app (API and dashboard) carries the
security headers, a user's data is never stored by a cache, and plotly.js keeps its own
caching; the Content-Security-Policy runs only this server's script files, and allows no
inline style but plotly.js's own, by hash. The pages draw under these headers without a
console error or a policy violation in Chromium (every browser test checks the console;
`tests/dashboard/test_browser_csp.py` opens every page and checks both)."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from cli.app import create_app
from core.settings import Settings
from core.store.store import Store
from dashboard.plotlyjs import STYLE_SOURCES, style_sources
from scheduler.enqueue import sender_app
from tests.api import ALICE
from web.headers import HEADERS, policy


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
    assert response.headers["Content-Security-Policy"] == policy(STYLE_SOURCES), path
    assert response.headers["Cache-Control"] == "no-store", path


def _directives(csp: str) -> dict[str, list[str]]:
    parts = [d.split() for d in csp.split(";") if d.strip()]
    return {name: sources for name, *sources in parts}


def test_the_policy_runs_only_this_servers_scripts_and_no_inline_style(
    client: FlaskClient,
) -> None:
    csp = client.get("/login").headers["Content-Security-Policy"]
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp, csp
    directives = _directives(csp)
    assert directives["script-src"] == ["'self'"]
    assert directives["default-src"] == ["'self'"]
    assert directives["connect-src"] == ["'self'"]
    assert directives["object-src"] == ["'none'"]
    assert directives["frame-ancestors"] == ["'none'"]
    assert directives["base-uri"] == ["'none'"]
    assert directives["form-action"] == ["'self'"]
    # Styles: the server's files, and plotly.js's own <style> elements by their hashes.
    assert directives["style-src"] == ["'self'", *STYLE_SOURCES]
    assert all(s.startswith("'sha256-") for s in STYLE_SOURCES)


def test_the_style_sources_are_the_hashes_of_the_styles_plotly_js_writes() -> None:
    bundle = (
        'var e=document.createElement("style");e.id="abc",e.textContent=\'.map{font:12px}\';'
        'var f=document.createElement("style");f.id="def",f.textContent="p{margin:0}";'
    )
    assert style_sources(bundle) == (
        "'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='",  # "": filled by the CSSOM
        "'sha256-8CEzjrZ/HSjx1JhQuGsrm7LnzS2445vDvvSZVYRQSJI='",
        "'sha256-QRQPRLGyxt3RJiKpYNjpkgHcmHU2PywsfL2e8oI0LQA='",
    )
    # The installed plotly.js: its own empty element, and maplibre's text.
    assert len(STYLE_SOURCES) == 2, STYLE_SOURCES


def test_without_the_dashboard_the_policy_allows_no_inline_style(
    settings: Settings, store: Store
) -> None:
    app = create_app(settings, store=store, sender=sender_app(settings), dashboard=False)
    csp = app.test_client().get("/api/v1/health").headers["Content-Security-Policy"]
    assert _directives(csp)["style-src"] == ["'self'"]


def test_plotly_js_keeps_its_long_caching(client: FlaskClient) -> None:
    response = client.get("/dashboard/plotly.min.js")
    assert response.status_code == 200
    assert "max-age" in response.headers["Cache-Control"], response.headers["Cache-Control"]
    assert response.headers["X-Content-Type-Options"] == "nosniff"
