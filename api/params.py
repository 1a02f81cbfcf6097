"""Query parameters, checked before anything reaches the store.

Each view names the parameters it accepts; anything else is a 400 naming the parameter.
That is how ``?state[$ne]=x`` or ``?$where=...`` is refused: a key that is not one of the
view's plain names never gets further. Values are strings that become *values* in a
query, never keys, and the store checks them again (`core.store.query`): a value starting with
``$`` is refused here as well, so the message names the parameter.

Trial filters:

- ``state``: a state, repeated or comma-separated (``state=failed,complete``);
- ``param``: ``section.key:value`` (``section.sub.key:value`` in a sub-section such as
  ``execution.parallel.tau:5``), repeated; a value that is a JSON number, ``true``,
  ``false`` or ``null`` is read as one, anything else is text; a value that starts like an
  object, a list or an operator (``{``, ``[``, ``$``) is refused;
- ``sort``: ``index``, ``objective``, ``result.<metric>``, a parameter path, ... and
  ``order=asc|desc``; ``limit`` and ``cursor`` page.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from flask import request

from core.settings import Settings
from web.errors import bad_parameter

_STATE_SPLIT = ","


def accept(allowed: Iterable[str]) -> None:
    """400 for any query parameter not in `allowed`, or whose value starts with ``$``."""
    names = set(allowed)
    for key, value in request.args.items(multi=True):
        if key not in names:
            rule = "is an operator, not a parameter" if "$" in key else "is not a parameter here"
            known = ", ".join(sorted(names)) or "none"
            raise bad_parameter(key, f"{rule} (accepted: {known})")
        if value.startswith("$"):
            raise bad_parameter(key, f"values may not start with $, got {value[:40]!r}")


def single(name: str) -> str | None:
    """The one value of parameter `name`, or None; 400 if it is given twice."""
    values = request.args.getlist(name)
    if len(values) > 1:
        raise bad_parameter(name, "may be given once")
    return values[0] if values else None


def page_limit(settings: Settings) -> int:
    """``limit``: 1 to the server's largest page (`api_max_page_size`), default `api_page_size`."""
    raw = single("limit")
    if raw is None:
        return settings.api_page_size
    top = settings.api_max_page_size
    if not (raw.isascii() and raw.isdigit() and len(raw) < 10) or not 1 <= int(raw) <= top:
        raise bad_parameter("limit", f"must be an integer from 1 to {top}, got {raw[:40]!r}")
    return int(raw)


def cursor() -> str | None:
    """``cursor``: the opaque ``next_cursor`` of the previous page (the store checks it)."""
    return single("cursor")


def states() -> list[str] | None:
    """``state``: the states asked for, or None for all (the store checks the names)."""
    values = [
        part.strip()
        for value in request.args.getlist("state")
        for part in value.split(_STATE_SPLIT)
    ]
    if not request.args.getlist("state"):
        return None
    if not all(values):
        raise bad_parameter("state", "must not be empty")
    return values


def _scalar(path: str, text: str) -> Any:
    if text.lstrip()[:1] in ("{", "[", "$"):
        rule = f"values must be scalars, not objects, lists or operators, got {text[:40]!r}"
        raise bad_parameter("param", f"{path}: {rule}")
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if value is None or isinstance(value, bool | int | float) else text


def param_filters() -> dict[str, Any]:
    """``param=section.key:value`` pairs as ``{"section.key": value}`` (the store checks that
    the path, ``section.key`` or ``section.sub.key``, is a parameter)."""
    out: dict[str, Any] = {}
    for item in request.args.getlist("param"):
        path, sep, text = item.partition(":")
        if not sep or not path:
            raise bad_parameter("param", f"must be section.key:value, got {item[:60]!r}")
        if path in out:
            raise bad_parameter("param", f"{path} is given twice")
        out[path] = _scalar(path, text)
    return out


def descending() -> bool:
    """``order``: ``asc`` (the default) or ``desc``."""
    raw = single("order") or "asc"
    if raw not in ("asc", "desc"):
        raise bad_parameter("order", f"must be asc or desc, got {raw[:40]!r}")
    return raw == "desc"


def choice(name: str, options: tuple[str, ...], default: str) -> str:
    """A parameter that must be one of `options`."""
    raw = single(name) or default
    if raw not in options:
        raise bad_parameter(name, f"must be one of {', '.join(options)}, got {raw[:40]!r}")
    return raw
