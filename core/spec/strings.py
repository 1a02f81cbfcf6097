"""The free strings of a spec, and their ceiling: ``SWEEPSTACK_MAX_STRING_BYTES`` (#29).

A spec takes strings where no rule bounds their length: ``dataset.target``, a trainable's
string parameters (fixed values and every value of a grid or ``choice``), ``name``,
``dataset.path``, ``execution.device``, a condition's accepted values. Each is copied into
trials, messages, exports and pages, so `string_problems` holds every string and every key
of the document to one ceiling of UTF-8 bytes, except those with their own:
``description`` (``SWEEPSTACK_MAX_DESCRIPTION_BYTES``) and a Caffe net's and solver's texts
(``SWEEPSTACK_MAX_PROTOTXT_BYTES``, `core.spec.caffe.kind`). `core.spec.limits` applies it
with the server's other ceilings (API: 422; CLI: exit 2).

A problem names the parameter's path as the spec writes it (the keys of a dimension,
``choice``, ``value`` ..., and a list's positions are not part of it), the rule and the
size: ``dataset.target: its UTF-8 bytes must be <= 4,096 on this server
(SWEEPSTACK_MAX_STRING_BYTES), got 10,000``.
"""

from __future__ import annotations

from typing import Any

from core.errors import Problem
from core.spec.ceilings import over
from core.spec.space import DIMENSION_KEYS

__all__ = ["OWN_CEILINGS", "string_problems"]

#: Paths of the document whose strings have a ceiling of their own.
OWN_CEILINGS = frozenset({"description", "caffe.net_text", "caffe.solver_text"})
#: Keys of a dimension: the values under them belong to the parameter that holds them.
_DIMENSION_KEYS = frozenset(DIMENSION_KEYS)
_SETTING = "SWEEPSTACK_MAX_STRING_BYTES"


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def string_problems(document: Any, limit: int) -> list[Problem]:
    """A problem for each path of `document` holding a string or key of more than `limit`
    UTF-8 bytes (the largest one there), the paths of `OWN_CEILINGS` excepted."""
    largest: dict[str, tuple[int, str]] = {}

    def note(path: str, size: int, what: str) -> None:
        if size > limit and size > largest.get(path, (0, ""))[0]:
            largest[path] = (size, what)

    def walk(value: Any, path: str, inside: bool) -> None:
        if path in OWN_CEILINGS:
            return
        if isinstance(value, str):
            # Fewer characters than limit / 4 cannot pass it in UTF-8: most strings stop here.
            if len(value) * 4 > limit:
                note(path or "(document)", _size(value),
                     "the UTF-8 bytes of one of its values" if inside else "its UTF-8 bytes")
            return
        if isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str) and len(key) * 4 > limit:
                    note(path or "(document)", _size(key), "the UTF-8 bytes of one of its keys")
                if key in _DIMENSION_KEYS and path:
                    walk(item, path, True)
                else:
                    walk(item, f"{path}.{key}" if path else str(key), False)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item, path, True)

    walk(document, "", False)
    return [over(path, what, size, limit, _SETTING) for path, (size, what) in largest.items()]
