"""Property-based: schemathesis generates requests from ``/openapi.json`` (at most
`MAX_EXAMPLES` per operation) and checks that no answer is a 5xx and every answer
conforms to the document (status, content type, body), with schemathesis's other
default checks (auth is not ignored, undocumented methods are 405, ...).

One exception: ``positive_data_acceptance`` (a request the schema allows must not be
refused) is skipped for submitting a spec and for requests with a ``cursor``, whose rules
JSON Schema cannot state: a spec's cross-field and dataset rules (422), and cursors the
server never issued (400).
"""

from __future__ import annotations

import re

import hypothesis
import pytest
import schemathesis
from flask import Flask
from flask.testing import FlaskClient
from schemathesis.checks import positive_data_acceptance

from api import celery_workers
from api.openapi import document
from core.settings import Settings
from tests.api import ALICE, api_settings

MAX_EXAMPLES = 30
# The document of the test app's settings (the limits in it are the tests'), loaded here
# because schemathesis 4.32's `from_fixture` does not run under pytest 9 (it sets
# `request.node._nodeid`); each test points the schema at its own app (WSGI transport).
SETTINGS = api_settings("amqp://unused//", "mongodb://unused", "unused")
schema = schemathesis.openapi.from_dict(document(SETTINGS))


def test_the_served_document_is_valid_openapi(client: FlaskClient, settings: Settings) -> None:
    served = client.get("/openapi.json").json
    assert served == document(settings) == schema.raw_schema
    schemathesis.openapi.from_dict(served).validate()
    assert served["openapi"] == "3.1.0"
    documented = {(method.upper(), path) for path, ops in served["paths"].items() for method in ops}
    assert ("POST", "/api/v1/sweeps") in documented and len(documented) == 23


def test_every_api_route_is_documented(app: Flask) -> None:
    """Taken from the app's URL map, so a new route cannot be left out of the document."""
    served = document(SETTINGS)["paths"]
    routes = {
        (method, re.sub(r"<(\w+)>", r"{\1}", rule.rule))
        for rule in app.url_map.iter_rules()
        if rule.rule.startswith("/api/v1/")
        for method in (rule.methods or set()) - {"HEAD", "OPTIONS"}
    }
    documented = {(method.upper(), path) for path, ops in served.items() for method in ops}
    assert routes - documented == set()


@pytest.mark.parametrize("auth", ["token", "anonymous"])
@schema.parametrize()
@hypothesis.settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=list(hypothesis.HealthCheck),
    derandomize=True,
)
def test_answers_conform_to_the_document(
    case: schemathesis.Case, app: Flask, monkeypatch: pytest.MonkeyPatch, auth: str
) -> None:
    """With a token and without one: no 5xx, and every answer as documented (401s too)."""
    monkeypatch.setattr(celery_workers, "INSPECT_TIMEOUT", 0.05)  # no worker will answer
    submit = case.method.upper() == "POST" and case.path == "/api/v1/sweeps"
    # Valid data is refused without a token (401, as documented): no acceptance check then.
    anonymous = auth == "anonymous"
    excluded = (
        [positive_data_acceptance] if anonymous or submit or "cursor" in (case.query or {}) else []
    )
    case.operation.schema.app = app  # picks the WSGI transport, for the checks' probes too
    headers = ALICE if auth == "token" else {}
    case.call_and_validate(headers=headers, excluded_checks=excluded, app=app)
