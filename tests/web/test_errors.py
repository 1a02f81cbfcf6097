"""One error shape for everything: unknown URLs, wrong methods, unexpected exceptions."""

from __future__ import annotations

from flask import Flask
from flask.testing import FlaskClient

from tests.api import ALICE


def test_unknown_urls_are_404_in_the_error_shape(client: FlaskClient) -> None:
    for path in ("/nowhere", "/api/v1/sweeps/x/y/z", "/api/v2/sweeps"):
        response = client.get(path, headers=ALICE)
        assert response.status_code == 404 and response.mimetype == "application/json"
        assert response.json == {
            "code": "not_found", "message": f"no such resource: {path}", "details": {},
        }  # fmt: skip


def test_wrong_methods_are_405_with_allow(client: FlaskClient) -> None:
    response = client.put("/api/v1/sweeps", headers=ALICE)
    assert response.status_code == 405 and response.json["code"] == "method_not_allowed"
    assert {"GET", "POST"} <= set(response.headers["Allow"].replace(" ", "").split(","))
    assert client.post("/api/v1/health").status_code == 405


def test_an_unexpected_exception_is_a_500_without_a_trace(app: Flask) -> None:
    def explode() -> None:
        raise RuntimeError("secret detail /etc/passwd")

    app.add_url_rule("/api/v1/explode", "explode", explode)
    response = app.test_client().get("/api/v1/explode")
    assert response.status_code == 500
    assert response.json == {
        "code": "internal_error", "message": "internal error; see the server log", "details": {},
    }  # fmt: skip
    assert b"secret" not in response.data and b"Traceback" not in response.data


def test_a_declared_length_over_the_limit_is_413_on_any_route(client: FlaskClient) -> None:
    response = client.post(
        "/api/v1/sweeps/x/cancel", data=b"x" * (64 * 1024 + 1), headers=ALICE
    )
    assert response.status_code == 413 and response.json["code"] == "body_too_large"


def test_nan_in_a_stored_result_is_sent_as_null(client: FlaskClient, app: Flask) -> None:
    app.add_url_rule("/api/v1/nan", "nan", lambda: {"loss": float("nan"), "x": [float("inf")]})
    assert client.get("/api/v1/nan").json == {"loss": None, "x": [None]}
