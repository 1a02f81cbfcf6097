"""One JSON shape for every error the API and the dashboard answer:
``{"code", "message", "details"}`` (built by `web.context.error_response`).

`code` is a stable snake_case word a client can branch on; `message` is for people and
names the field, the rule and the value; `details` holds what a program needs (the list of
spec problems, the parameter at fault, the trial count). Routing errors (404, 405),
oversized bodies (413) and unexpected exceptions (500) get the same shape. A client never
sees a stack trace: an unexpected exception is logged here and answered with a generic
500.

- 400 ``invalid_parameter``: a query parameter or body key that is unknown, repeated,
  malformed, or an operator (``$ne``, ``$where``); ``malformed_body``: not JSON or YAML;
- 400 ``csrf_failed``: a dashboard form without this session's CSRF token;
- 401 ``unauthorized``: no bearer token, or one the server does not know;
- 404 ``not_found``: a missing sweep or trial, one owned by someone else, an unknown URL;
  a trial of the caller's with no kept model (``details.reason``: ``not_complete``,
  ``not_kept`` or ``gone``, and the message says why: `core.errors.NoModel`);
- 405 ``method_not_allowed``: a method the URL does not serve (with ``Allow``);
- 409 ``conflict``: deleting a sweep with queued or running trials, retrying a cancelled one;
- 413 ``body_too_large``: a body over ``SWEEPSTACK_API_MAX_BODY_BYTES``;
- 414 ``uri_too_long``, 431 ``headers_too_large``, 400 ``bad_request``: what gunicorn
  refuses before the app sees the request (`cli.gunicorn_conf`);
- 415 ``unsupported_media_type``: a spec that is not JSON or YAML;
- 429 ``too_many_failures``: too many failed authentications from one address (with
  ``Retry-After``; `web.auth`);
- 422 ``invalid_spec`` (every problem listed) or ``too_many_trials`` (the count named);
- 503 ``store_unavailable``, ``broker_unavailable``: MongoDB or RabbitMQ did not answer;
- 500 ``internal_error``: anything else (logged with its trace, never shown).
"""

from __future__ import annotations

import logging
from typing import Any

from amqp.exceptions import AMQPError
from flask import Flask, Response, request
from kombu.exceptions import OperationalError
from werkzeug.exceptions import HTTPException, MethodNotAllowed

from core.errors import (
    InvalidQuery,
    InvalidTransition,
    NoModel,
    NotFound,
    SpecError,
    StoreUnavailable,
    SweepstackError,
    TooManyTrials,
)
from web.context import error_response

log = logging.getLogger(__name__)

#: Codes for the HTTP errors Flask and Werkzeug raise themselves.
_HTTP_CODES = {
    400: "invalid_parameter",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "body_too_large",
    414: "uri_too_long",
    415: "unsupported_media_type",
    431: "headers_too_large",
}


class ApiError(Exception):
    """An error the API answers with its own status, code, message and details."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}
        self.headers = headers or {}


def bad_parameter(parameter: str, rule: str) -> ApiError:
    """A 400 naming the query parameter (or body path) at fault and the rule it broke."""
    return ApiError(400, "invalid_parameter", f"{parameter}: {rule}", {"parameter": parameter})


#: The most problems one error body lists: a spec of 60,000 broken layers answered a 6 MB
#: list; the count in the message and ``problems_total`` say how many there were.
MAX_PROBLEMS = 100


def _problems(exc: SpecError | InvalidQuery) -> list[dict[str, str]]:
    return [{"path": p.path, "message": p.message} for p in exc.problems[:MAX_PROBLEMS]]


def _api_error(exc: ApiError) -> Response:
    return error_response(exc.status, exc.code, exc.message, exc.details, exc.headers)


def _http_error(exc: HTTPException) -> Response:
    status = exc.code or 500
    code = _HTTP_CODES.get(status, (exc.name or "error").lower().replace(" ", "_"))
    headers: dict[str, str] = {}
    message = exc.description or exc.name
    if isinstance(exc, MethodNotAllowed) and exc.valid_methods:
        headers["Allow"] = ", ".join(sorted(exc.valid_methods))
        message = f"{request.method} is not allowed here; use {headers['Allow']}"
    elif status == 404:
        message = f"no such resource: {request.path}"
    elif status == 413:
        message = "the request body is over this server's limit"
    return error_response(status, code, message, None, headers)


def _too_many(exc: TooManyTrials) -> Response:
    details = {"count": exc.count, "limit": exc.limit, "problems": _problems(exc)}
    return error_response(422, "too_many_trials", str(exc), details)


def _spec_error(exc: SpecError) -> Response:
    problems, total = _problems(exc), len(exc.problems)
    message = f"the spec has {total:,} problem{'s' if total != 1 else ''}"
    if problems:
        message += f"; the first: {exc.problems[0]}"
    details: dict[str, object] = {"problems": problems}
    if total > len(problems):
        details["problems_total"] = total  # the list holds the first MAX_PROBLEMS
    return error_response(422, "invalid_spec", message, details)


def _invalid_query(exc: InvalidQuery) -> Response:
    details = {"parameter": exc.field, "problems": _problems(exc)}
    return error_response(400, "invalid_parameter", str(exc), details)


def _not_found(exc: NotFound) -> Response:
    return error_response(404, "not_found", f"no {exc.kind} {exc.ident}", {"kind": exc.kind})


def _no_model(exc: NoModel) -> Response:
    details = {"kind": "model", "reason": exc.reason}
    return error_response(404, "not_found", str(exc), details)


def _conflict(exc: InvalidTransition) -> Response:
    return error_response(409, "conflict", str(exc))


def _store_down(exc: StoreUnavailable) -> Response:
    log.warning("store unavailable: %s", exc)
    return error_response(503, "store_unavailable", "the store did not answer; try again later")


def _broker_down(exc: OperationalError | AMQPError | ConnectionError) -> Response:
    log.warning("broker unavailable: %s", exc)
    return error_response(503, "broker_unavailable", "the broker did not answer; try again later")


def _other_sweepstack(exc: SweepstackError) -> Response:
    log.error("unexpected %s: %s", type(exc).__name__, exc)
    return error_response(500, "internal_error", "internal error; see the server log")


def _unexpected(exc: Exception) -> Response:
    log.exception("unhandled error in %s %s", request.method, request.path)
    return error_response(500, "internal_error", "internal error; see the server log")


def register_error_handlers(app: Flask) -> None:
    """Give every error, expected or not, the one JSON shape (handlers pick by class)."""
    app.register_error_handler(ApiError, _api_error)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(TooManyTrials, _too_many)
    app.register_error_handler(SpecError, _spec_error)
    app.register_error_handler(InvalidQuery, _invalid_query)
    app.register_error_handler(NotFound, _not_found)
    app.register_error_handler(NoModel, _no_model)
    app.register_error_handler(InvalidTransition, _conflict)
    app.register_error_handler(StoreUnavailable, _store_down)
    app.register_error_handler(OperationalError, _broker_down)
    app.register_error_handler(AMQPError, _broker_down)
    app.register_error_handler(ConnectionError, _broker_down)
    app.register_error_handler(SweepstackError, _other_sweepstack)
    app.register_error_handler(Exception, _unexpected)
