"""Pydantic's validation errors in a spec's words: one `Problem` per error, naming the
dotted path, the rule and the value, e.g. ``model.hidden_units[2]: must be > 0, got -5``.

Every kind's loader (`core.spec.kinds`) reports through `problems_from`, so a rule reads the
same whichever kind of spec breaks it; `show_value` is how a problem shows the value.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from core.errors import Problem


def show_value(value: Any) -> str:
    """A value as a problem shows it: whole floats as integers, strings quoted, else JSON."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, str):
        return repr(value)
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


_RULES = {
    "greater_than": "must be > {gt}",
    "greater_than_equal": "must be >= {ge}",
    "less_than": "must be < {lt}",
    "less_than_equal": "must be <= {le}",
    "literal_error": "must be one of {expected}",
    "missing": "is required",
    "extra_forbidden": "unknown key",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "string_too_short": "must not be empty",
    "string_too_long": "must be at most {max_length} characters",
    "too_short": "must have at least {min_length} items",
    "finite_number": "must be a finite number",
}


def problems_from(error: ValidationError, prefix: str, value: Any = None) -> list[Problem]:
    """Turn pydantic's errors into Problems: dotted path, rule, and the offending value."""
    errors = error.errors()
    # For a field typed `int | list[int]`, keep only the branch that matches the input's shape.
    branches = {
        e["loc"][0]
        for e in errors
        if e["loc"] and isinstance(e["loc"][0], str) and ("[" in e["loc"][0] or "-" in e["loc"][0])
    }
    if len(branches) > 1:
        want_list = isinstance(value, list)
        errors = [e for e in errors if str(e["loc"][0]).startswith("list[") == want_list]
        errors = [{**e, "loc": e["loc"][1:]} for e in errors]
    out = []
    for e in errors:
        path = prefix
        for part in e["loc"]:
            if isinstance(part, int):
                path += f"[{part}]"
            elif isinstance(part, str) and ("[" in part or "-" in part):
                continue  # a union branch tag, not a location
            else:
                path = f"{path}.{part}" if path else str(part)
        template = _RULES.get(e["type"])
        if e["type"] == "value_error":
            rule = str(e["ctx"]["error"]) if e.get("ctx") else e["msg"]
        elif template:
            ctx = {
                k: show_value(v) if isinstance(v, float) else v
                for k, v in (e.get("ctx") or {}).items()
            }
            rule = template.format(**ctx)
        else:
            rule = e["msg"][0].lower() + e["msg"][1:]
        model_level = e["type"] == "value_error" and not e["loc"]
        if e["type"] not in ("missing", "extra_forbidden") and not model_level:
            rule += f", got {show_value(e['input'])}"
        out.append(Problem(path, rule))
    return out
