"""Turning what a caller asks of the trial list into something safe to run.

Everything a user can send (states, parameter filters, a sort field, a cursor) is checked
here against a fixed vocabulary before it reaches the store, and only ever becomes a
*value* in a query, never an operator or a field name of the user's choosing: parameter
paths must name a real config field, filter values must be scalars, strings starting with
``$`` are refused, and a cursor is a signed-by-content token that only says where the last
page ended.

Field sorts are ordered here, in Python, with `sort_key`, a copy of MongoDB's cross-type
order (null < numbers < strings < objects < booleans < dates; an array by its smallest
element ascending, its largest descending). Doing it here rather than in the server makes
keyset paging exact for every type, and is what SecantusDB is fastest at (see `core.store.store`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from core.errors import InvalidQuery
from core.spec.fields import field_adapter
from core.states import ALL_STATES

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_STATE_VALUES = tuple(s.value for s in ALL_STATES)

#: Sort fields that are trial fields; `result.<metric>` and parameter paths come on top.
TOP_LEVEL_SORTS = (
    "index",
    "objective",
    "train_seconds",
    "finished_at",
    "started_at",
    "updated_at",
    "param_count",
    "attempt",
)
MAX_LIMIT = 1000


def _show(value: Any) -> str:
    try:
        return json.dumps(value, default=str)[:80]
    except (TypeError, ValueError):
        return repr(value)[:80]


def check_name(field: str, name: Any) -> str:
    """A metric or extra-field name: an identifier, so it can never be an operator or path."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidQuery(
            field, f"names must be identifiers (letters, digits, _), got {_show(name)}"
        )
    return name


def check_keys(field: str, mapping: Any) -> dict[str, Any]:
    """A caller's mapping (metrics, result, worker) whose keys become stored field names."""
    if not isinstance(mapping, Mapping):
        raise InvalidQuery(field, f"must be a mapping, got {_show(mapping)}")
    for key in mapping:
        check_name(field, key)
    return dict(mapping)


def check_id(field: str, value: Any) -> str:
    """A sweep or trial id: a plain string, so a mapping cannot smuggle in an operator."""
    if not isinstance(value, str) or not value or value.startswith("$"):
        raise InvalidQuery(field, f"must be an id string, got {_show(value)}")
    return value


def check_attempt(attempt: Any) -> int:
    """An attempt number: an integer >= 1."""
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
        raise InvalidQuery("attempt", f"must be an integer >= 1, got {attempt!r}")
    return attempt


def check_max_attempts(max_attempts: Any) -> int:
    """How many times a trial's worker may die before the trial ends failed: an integer >= 1."""
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise InvalidQuery("max_attempts", f"must be an integer >= 1, got {max_attempts!r}")
    return max_attempts


def check_seconds(field: str, value: Any) -> float:
    """A duration in seconds: a finite number >= 0."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value < 0:
        raise InvalidQuery(field, f"must be a number of seconds >= 0, got {value!r}")
    return float(value)


def check_limit(limit: Any, field: str = "limit") -> int:
    """A page size between 1 and `MAX_LIMIT`."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidQuery(field, f"must be an integer from 1 to {MAX_LIMIT}, got {_show(limit)}")
    return limit


def check_states(state: str | Sequence[str] | None) -> list[str] | None:
    """None (every state) or a de-duplicated list of known state names."""
    if state is None:
        return None
    items = [state] if isinstance(state, str) else state
    if not isinstance(items, list | tuple) or not items:
        raise InvalidQuery("state", f"must be a state or a list of states, got {_show(state)}")
    out: list[str] = []
    for item in items:
        value = getattr(item, "value", item)
        if value not in _STATE_VALUES:
            raise InvalidQuery(
                "state", f"must be one of {', '.join(_STATE_VALUES)}, got {_show(value)}"
            )
        if value not in out:
            out.append(value)
    return out


#: A parameter of a trainable's free-form ``params`` (`core.spec.trainable`): identifiers.
_TRAINABLE_PARAM = re.compile(r"^params(\.[A-Za-z_][A-Za-z0-9_]{0,63}){1,8}$")


#: A field of a Caffe spec's net or solver (`core.spec.caffe.spec`): a layer's name (no dot, no
#: leading $), then identifiers.
_CAFFE_PARAM = re.compile(
    r"^caffe\.(layers\.[^.$\s][^.\s]{0,199}(\.[A-Za-z_][A-Za-z0-9_]{0,63}){1,6}"
    r"|solver_params\.[A-Za-z_][A-Za-z0-9_]{0,63})$"
)


def is_param(path: Any) -> bool:
    """Whether `path` names a parameter: a built-in leaf (``section.key``,
    ``section.sub.key``), a trainable's (``params.key``, ``params.group.key``) or a Caffe
    net's or solver's (``caffe.layers.ip1.num_output``, ``caffe.solver_params.base_lr``)."""
    if not isinstance(path, str):
        return False
    return (
        field_adapter(path) is not None
        or _TRAINABLE_PARAM.match(path) is not None
        or _CAFFE_PARAM.match(path) is not None
    )


def param_field(path: Any, field: str = "params") -> str:
    """The stored path of a parameter given as ``section.key`` or ``section.sub.key``
    (``params.section.key``, ``params.execution.parallel.tau``)."""
    if not is_param(path):
        raise InvalidQuery(
            f"{field}.{path}" if isinstance(path, str) else field,
            "is not a parameter (write section.key, e.g. model.hidden_units or "
            "execution.parallel.tau, or a trainable's params.key)",
        )
    return f"params.{path}"


def param_filters(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """``{"model.hidden_units": 64}`` -> ``{"params.model.hidden_units": 64}``, values checked.

    Values must be strings, numbers, booleans or None (None: the parameter is not set).
    Mappings, lists and ``$``-strings are refused, so no value can act as an operator.
    """
    if params is None:
        return {}
    if not isinstance(params, Mapping):
        raise InvalidQuery(
            "params", f"must be a mapping of parameter to value, got {_show(params)}"
        )
    out: dict[str, Any] = {}
    for path, value in params.items():
        stored = param_field(path)
        ok = value is None or isinstance(value, str | bool | int | float)
        if not ok or (isinstance(value, str) and value.startswith("$")):
            raise InvalidQuery(
                f"params.{path}",
                "must be a string, number, boolean or null (not an operator, mapping or "
                f"list), got {_show(value)}",
            )
        out[stored] = value
    return out


def sort_field(sort: Any) -> str:
    """The stored field a sort name refers to; refuses anything outside the vocabulary."""
    if isinstance(sort, str):
        if sort in TOP_LEVEL_SORTS:
            return sort
        if sort.startswith("result."):
            return "result." + check_name("sort", sort.removeprefix("result."))
        if is_param(sort):
            return f"params.{sort}"
    # A bare metric name is the likeliest slip (`sort=val_loss`): say how to write it.
    bare = isinstance(sort, str) and _NAME.match(sort) is not None
    hint = f"; a metric is written result.{sort}" if bare else ""
    raise InvalidQuery(
        "sort",
        f"must be one of {', '.join(TOP_LEVEL_SORTS)}, result.<metric> or a parameter "
        f"(section.key, section.sub.key or params.key), got {_show(sort)}{hint}",
    )


def get_path(doc: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted path of nested mappings, or None where it stops."""
    value: Any = doc
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def _equal_scalar(stored: Any, wanted: Any) -> bool:
    if wanted is None:
        return stored is None
    if isinstance(wanted, bool) or isinstance(stored, bool):
        return isinstance(wanted, bool) and isinstance(stored, bool) and stored == wanted
    if isinstance(wanted, int | float):
        return isinstance(stored, int | float) and stored == wanted
    return isinstance(stored, str) and stored == wanted


def params_match(doc: Mapping[str, Any], filters: Mapping[str, Any]) -> bool:
    """MongoDB's equality, as `param_filters` allows it: an array matches an element."""
    for path, wanted in filters.items():
        stored = get_path(doc, path)
        if isinstance(stored, list):
            if not any(_equal_scalar(item, wanted) for item in stored):
                return False
        elif not _equal_scalar(stored, wanted):
            return False
    return True


def sort_key(value: Any, descending: bool = False) -> tuple:
    """A key ordering values as MongoDB does across types (see the module docstring)."""
    if isinstance(value, list):
        if not value:
            return (0,)
        keys = [sort_key(item, descending) for item in value]
        return max(keys) if descending else min(keys)
    if value is None:
        return (1,)
    if isinstance(value, bool):
        return (6, value)
    if isinstance(value, int | float):
        if isinstance(value, float) and math.isnan(value):
            return (2, 0)
        return (2, 1, value)
    if isinstance(value, str):
        return (3, value)
    if isinstance(value, Mapping):
        return (4, json.dumps(value, sort_keys=True, default=str))
    if isinstance(value, datetime):
        return (7, value)
    return (8, repr(value))


# -- cursors --------------------------------------------------------------------------


def _tag(value: Any) -> Any:
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int | float):
        return value
    if isinstance(value, datetime):
        return {"t": int(value.timestamp() * 1000)}
    if isinstance(value, list):
        return {"l": [_tag(v) for v in value]}
    if isinstance(value, Mapping):
        return {"m": {str(k): _tag(v) for k, v in value.items()}}
    return {"r": repr(value)}


def _untag(value: Any) -> Any:
    if value is None or isinstance(value, bool | str | int | float):
        return value
    if isinstance(value, dict) and len(value) == 1:
        ((tag, inner),) = value.items()
        if tag == "t" and isinstance(inner, int):
            return datetime.fromtimestamp(inner / 1000, UTC)
        if tag == "l" and isinstance(inner, list):
            return [_untag(v) for v in inner]
        if tag == "m" and isinstance(inner, dict):
            return {k: _untag(v) for k, v in inner.items()}
        if tag == "r" and isinstance(inner, str):
            return inner
    raise ValueError("bad value")


def query_digest(*parts: Any) -> str:
    """A short digest of a query, so a cursor is only accepted by the query that made it."""
    text = json.dumps([_tag(p) for p in parts], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Position:
    """Where a page ended: the last trial's index and, for a field sort, its sort value."""

    index: int
    value: Any = None


def encode_cursor(digest: str, position: Position) -> str:
    """An opaque, URL-safe cursor."""
    body = {"q": digest, "i": position.index, "v": _tag(position.value)}
    raw = json.dumps(body, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: Any, digest: str) -> Position:
    """The position in `cursor`; `InvalidQuery` if it is malformed or from another query."""
    if not isinstance(cursor, str) or len(cursor) > 4096:
        raise InvalidQuery("cursor", "is not a cursor this store issued")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        body = json.loads(raw)
        index = body["i"]
        value = _untag(body.get("v"))
        if not isinstance(index, int) or isinstance(index, bool) or not isinstance(body["q"], str):
            raise ValueError("bad index")
    except (binascii.Error, ValueError, KeyError, TypeError, UnicodeDecodeError,
            RecursionError) as exc:  # fmt: skip
        raise InvalidQuery("cursor", "is not a cursor this store issued") from exc
    if body["q"] != digest:
        raise InvalidQuery(
            "cursor", "belongs to a different query (sweep, filters and sort must not change)"
        )
    return Position(index, value)


def after(position: Position | None, key: tuple, index: int, descending: bool) -> bool:
    """Whether (key, index) comes after `position` in the page order."""
    if position is None:
        return True
    here = (key, index)
    there = (sort_key(position.value, descending), position.index)
    return here < there if descending else here > there


def order(
    rows: Iterable[Mapping[str, Any]], field: str, descending: bool
) -> list[tuple[tuple, int, Mapping[str, Any]]]:
    """Rows as (sort key, index, row), in page order (ties broken by index)."""
    keyed = [(sort_key(get_path(r, field), descending), int(r["index"]), r) for r in rows]
    keyed.sort(key=lambda item: (item[0], item[1]), reverse=descending)
    return keyed
