"""Typed reads of a prototxt `Message`'s fields, each bad one reported as a `Problem`.

The schema checks of `core.spec.caffe` (the solver's, and any other message's) read numbers,
integers, strings and flags through a `FieldReader`, which collects every problem with the
file, line and column the field was written at, instead of stopping at the first.
"""

from __future__ import annotations

import difflib

from core.errors import Problem
from core.spec.caffe.prototxt import Field, Message


class FieldReader:
    """Typed reads of a message's fields, collecting one `Problem` per bad field.

    Problems are at ``<path>.<field>`` and their messages start with ``source:line:column``
    where the field came from a text (a field set by a sweep has no place and gets none).
    """

    def __init__(self, msg: Message, source: str, path: str) -> None:
        self.msg, self.source, self.path = msg, source, path
        self.problems: list[Problem] = []
        self._failed: set[str] = set()

    def failed(self, name: str) -> bool:
        return name in self._failed

    def fail(self, name: str, rule: str, item: Field | None = None) -> None:
        if name in self._failed:
            return
        self._failed.add(name)
        item = item if item is not None else self.msg.field(name)
        where = f"{self.source}:{item.line}:{item.column}: " if item and item.line else ""
        self.problems.append(Problem(f"{self.path}.{name}", f"{where}{rule}"))

    def check_names(
        self, fields: dict[str, tuple[str, bool]], refused: dict[str, str], schema: str
    ) -> None:
        """Refuse fields `schema` does not have (`fields`: name -> (kind, repeated)), the
        `refused` ones (name -> why), and a singular field written more than once."""
        for name in self.msg.names():
            items = [f for f in self.msg.fields if f.name == name]
            if name not in fields:
                close = difflib.get_close_matches(name, list(fields), n=1)
                hint = f"; did you mean {close[0]}?" if close else ""
                self.fail(name, f"is not a field of {schema}{hint}", items[0])
            elif name in refused:
                self.fail(name, refused[name], items[0])
            elif len(items) > 1 and not fields[name][1]:
                self.fail(name, f"is written {len(items)} times; it may be written once", items[1])

    def _items(self, name: str) -> list[Field]:
        return [f for f in self.msg.fields if f.name == name]

    def number(self, name: str) -> float | None:
        for item in self._items(name)[-1:]:
            value = item.value
            if isinstance(value, str) and value.lower().lstrip("-") in ("inf", "infinity", "nan"):
                value = float(value)
            if isinstance(value, bool) or not isinstance(value, int | float):
                self.fail(name, f"must be a number, got {value!r}", item)
                return None
            return float(value)
        return None

    def integer(self, name: str, item: Field | None = None) -> int | None:
        for field in [item] if item is not None else self._items(name)[-1:]:
            value = field.value
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            if isinstance(value, bool) or not isinstance(value, int):
                self.fail(name, f"must be an integer, got {value!r}", field)
                return None
            return value
        return None

    def integers(self, name: str) -> list[int]:
        out = [self.integer(name, item) for item in self._items(name)]
        return [v for v in out if v is not None] if not self.failed(name) else []

    def text(self, name: str, last: bool = True) -> str | None:
        items = self._items(name)
        for item in items[-1:] if last else items[:1]:
            if isinstance(item.value, str):
                return str(item.value)
            self.fail(name, f"must be a string, got {item.value!r}", item)
        return None

    def flag(self, name: str) -> bool | None:
        for item in self._items(name)[-1:]:
            if isinstance(item.value, bool):
                return item.value
            if isinstance(item.value, int) and item.value in (0, 1):  # protobuf reads 0/1 too
                return bool(item.value)
            self.fail(name, f"must be true or false, got {item.value!r}", item)
        return None
