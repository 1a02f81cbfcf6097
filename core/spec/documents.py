"""Reading a spec document: strict YAML and JSON, and the values no spec may hold.

PyYAML and `json` keep the last of two equal keys silently, so a copy-pasted key would win
unseen: `SpecLoader` and `unique_keys` refuse it. `value_problems` walks a parsed document
for what would break a rule's arithmetic or the store rather than a field's rule: a NUL in
a string, an integer BSON cannot store (past 64 bits), NaN or an infinity, a key that is
not a string. `core.spec.sweep.load_spec` applies both; the API adds its own limits on top.
"""

from __future__ import annotations

import math
from typing import Any

import yaml

from core.errors import Problem

#: What BSON can store: every integer of a spec must fit in a signed 64-bit integer.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: Problems reported for the values of one document before giving up (NUL, numbers).
_MAX_VALUE_PROBLEMS = 20


class DuplicateKey(ValueError):
    """A mapping of a JSON or YAML document names the same key twice."""

    def __init__(self, key: Any) -> None:
        self.key = key
        super().__init__(f"duplicate key {key!r}")


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`json.loads`'s ``object_pairs_hook`` that refuses a key given twice in one object
    (JSON itself keeps the last one silently, so a typo'd copy would win unseen)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(key)
        out[key] = value
    return out


class SpecLoader(yaml.SafeLoader):
    """YAML's safe loader that refuses a mapping key given twice (a ``ConstructorError``
    naming the key and its line), where PyYAML would keep the last one silently."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                continue
            key = self.construct_object(key_node, deep=False)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key; the dict below refuses it
                continue
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping",
                    node.start_mark,
                    f"found duplicate key {key!r}",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def number_error(exc: ValueError) -> str:
    """What a parser's ValueError on a number means, in a user's words."""
    if "digits" in str(exc):
        return "a number has more than 4,300 digits"
    return f"a value cannot be read: {exc}"


def _int_text(value: int) -> str:
    return str(value) if value.bit_length() <= 256 else f"an integer of {value.bit_length()} bits"


def value_problems(value: Any, path: str = "", out: list[Problem] | None = None) -> list[Problem]:
    """What no value of a spec may be, wherever it is: a string holding NUL, an integer
    outside 64 bits (BSON cannot store it), NaN or an infinity, a key that is not a string.
    Stops after a few problems: one document can hold thousands of the same mistake."""
    out = [] if out is None else out
    if len(out) >= _MAX_VALUE_PROBLEMS:
        return out
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                out.append(Problem(path, f"keys must be strings, got {key!r}"))
                continue
            where = f"{path}.{key}" if path else key
            if "\x00" in key:
                out.append(Problem(where.replace("\x00", "\\0"), "keys must not contain NUL"))
                continue
            value_problems(item, where, out)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            value_problems(item, f"{path}[{i}]", out)
    elif isinstance(value, bool):
        pass
    elif isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            rule = f"must be a 64-bit integer (-2**63 to 2**63-1), got {_int_text(value)}"
            out.append(Problem(path, rule))
    elif isinstance(value, float):
        if not math.isfinite(value):
            out.append(Problem(path, f"must be a finite number, got {value}"))
    elif isinstance(value, str) and "\x00" in value:
        out.append(Problem(path, "must not contain a NUL character"))
    return out
