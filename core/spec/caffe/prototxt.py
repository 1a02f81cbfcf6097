"""Caffe's prototxt files: the protocol-buffer text format, read and written without Caffe.

`parse` turns a text such as ``layer { name: "ip1" type: "InnerProduct" }`` into a `Message`,
or raises `PrototxtError` naming the file, the line, the column and what was expected.
`dumps` writes a `Message` back in the same format, so that a net whose fields a sweep
changed (`Message.set`) can be stored and read again unchanged.

A `Message` keeps its fields in the order the text gives them, each with the line and column
it started at; a field written several times (Caffe's ``repeated`` fields: ``layer``,
``bottom``, ``stepvalue``) keeps every value. Values are:

- `Message` for ``name { ... }`` (or ``name < ... >``);
- `int` for an integer literal (decimal, ``0x`` hex), `float` for one with a point or an
  exponent (``1e-4``, ``.5``, ``5f``);
- `bool` for ``true`` / ``false`` (``True``, ``t``, ``f`` too, as protobuf reads them);
- `Ident` (a `str`) for any other bare word: an enum value (``MAX``, ``TRAIN``, ``xavier``)
  or ``inf`` / ``nan``;
- `str` for a quoted string, escapes decoded; adjacent strings join (``"a" "b"`` is ``"ab"``).

Nothing here knows Caffe's schema: which fields exist and what they mean is `core.spec.caffe`'s
business, which reports errors by layer name; this module only knows the syntax.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Union

from core.errors import SweepstackError

#: The largest prototxt text accepted (a LeNet net is ~2 KB, ResNet-152's ~230 KB).
MAX_TEXT_BYTES = 1_000_000
#: How deeply messages may nest (Caffe's own nest 3-4 levels).
MAX_DEPTH = 32


#: The longest number a prototxt may write: a 64-bit value and a float's digits fit with room
#: to spare, and Python's int of a longer decimal text is refused (or slow) past 4,300 digits.
MAX_NUMBER_CHARS = 64


class PrototxtError(SweepstackError):
    """A prototxt text that cannot be read: where (file, line, column) and what was expected."""

    def __init__(self, source: str, line: int, column: int, message: str) -> None:
        self.source, self.line, self.column = source, line, column
        self.reason = message
        super().__init__(f"{source}:{line}:{column}: {message}")


class Ident(str):
    """A bare word: an enum value such as ``MAX`` or ``TRAIN`` (written back unquoted)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Ident({str(self)!r})"


Value = Union["Message", int, float, bool, Ident, str]


@dataclass
class Field:
    """One ``name: value`` of a message, with where its name starts in the text (1-based)."""

    name: str
    value: Value
    line: int = 0
    column: int = 0


@dataclass
class Message:
    """A protocol-buffer message read from text: its fields in order, repeats kept."""

    fields: list[Field] = field(default_factory=list)
    line: int = 0
    column: int = 0

    def get(self, name: str, default: Value | None = None) -> Value | None:
        """The value of a singular field (the last one written, as protobuf reads it)."""
        for item in reversed(self.fields):
            if item.name == name:
                return item.value
        return default

    def getall(self, name: str) -> list[Value]:
        """Every value of a repeated field, in order (empty when the field is absent)."""
        return [item.value for item in self.fields if item.name == name]

    def has(self, name: str) -> bool:
        return any(item.name == name for item in self.fields)

    def field(self, name: str) -> Field | None:
        """The (last) `Field` of that name, to report its line and column."""
        for item in reversed(self.fields):
            if item.name == name:
                return item
        return None

    def names(self) -> list[str]:
        """The field names present, each once, in the order they first appear."""
        return list(dict.fromkeys(item.name for item in self.fields))

    def set(self, name: str, value: Value | list[Value]) -> None:
        """Replace every value of `name` with `value` (a list for a repeated field).

        The new value takes the place of the first one it replaces, or goes last.
        """
        values = value if isinstance(value, list) else [value]
        at = next((i for i, item in enumerate(self.fields) if item.name == name), None)
        kept = [item for item in self.fields if item.name != name]
        new = [Field(name, v) for v in values]
        if at is None:
            self.fields = kept + new
        else:
            before = sum(1 for item in self.fields[:at] if item.name != name)
            self.fields = kept[:before] + new + kept[before:]

    def remove(self, name: str) -> None:
        self.fields = [item for item in self.fields if item.name != name]

    def copy(self) -> Message:
        """A deep copy: changing it leaves this message as it is."""
        return Message(
            [
                Field(
                    f.name,
                    f.value.copy() if isinstance(f.value, Message) else f.value,
                    f.line,
                    f.column,
                )
                for f in self.fields
            ],
            self.line,
            self.column,
        )

    def to_dict(self) -> dict[str, object]:
        """Plain data for JSON: a field written once is its value, a repeated one a list."""
        out: dict[str, object] = {}
        for name in self.names():
            values = [v.to_dict() if isinstance(v, Message) else v for v in self.getall(name)]
            out[name] = values[0] if len(values) == 1 else values
        return out


_TOKEN = re.compile(
    r"""
    (?P<space>[ \t\r\f\v]+)
  | (?P<newline>\n)
  | (?P<comment>\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<number>[-+]?(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?[fF]?)(?![A-Za-z0-9_]))
  | (?P<word>-?[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<symbol>[{}<>\[\]:,;])
    """,
    re.VERBOSE,
)
_TRUE = {"true", "True", "t"}
_FALSE = {"false", "False", "f"}
_ESCAPES = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "v": "\v",
    "?": "?",
}
_FLOAT_WORDS = {"inf", "-inf", "infinity", "-infinity", "nan", "-nan"}


@dataclass(frozen=True)
class _Tok:
    kind: str
    text: str
    line: int
    column: int


def _tokens(text: str, source: str) -> Iterator[_Tok]:
    pos, line, line_start = 0, 1, 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        column = pos - line_start + 1
        if match is None:
            if text[pos] in "\"'":
                raise PrototxtError(source, line, column, "a string is not closed on its line")
            raise PrototxtError(source, line, column, f"unexpected character {text[pos]!r}")
        kind = match.lastgroup or ""
        if kind == "newline":
            line, line_start = line + 1, match.end()
        elif kind not in ("space", "comment"):
            yield _Tok(kind, match.group(), line, column)
        pos = match.end()
    yield _Tok("end", "", line, pos - line_start + 1)


def _unquote(token: _Tok, source: str) -> str:
    body, out, i = token.text[1:-1], [], 0
    while i < len(body):
        char = body[i]
        if char != "\\":
            out.append(char)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in _ESCAPES:
            out.append(_ESCAPES[nxt])
            i += 2
        elif nxt in "xX" and re.match(r"[0-9a-fA-F]{1,2}", body[i + 2 :]):
            digits = re.match(r"[0-9a-fA-F]{1,2}", body[i + 2 :]).group()  # type: ignore[union-attr]
            out.append(chr(int(digits, 16)))
            i += 2 + len(digits)
        elif nxt in "01234567":
            digits = re.match(r"[0-7]{1,3}", body[i + 1 :]).group()  # type: ignore[union-attr]
            out.append(chr(int(digits, 8)))
            i += 1 + len(digits)
        else:
            raise PrototxtError(
                source, token.line, token.column + i + 1, f"unknown escape \\{nxt} in a string"
            )
    return "".join(out)


def _number(text: str) -> int | float:
    body = text.rstrip("fF") if not text.lower().startswith(("0x", "-0x", "+0x")) else text
    if re.fullmatch(r"[-+]?0[xX][0-9a-fA-F]+", body):
        return int(body, 16)
    if re.fullmatch(r"[-+]?\d+", body) and not text.endswith(("f", "F")):
        return int(body)
    return float(body)


class _Parser:
    def __init__(self, text: str, source: str) -> None:
        self.source = source
        self.tokens = list(_tokens(text, source))
        self.at = 0

    def peek(self) -> _Tok:
        return self.tokens[self.at]

    def take(self) -> _Tok:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def fail(self, token: _Tok, message: str) -> PrototxtError:
        found = "the end of the file" if token.kind == "end" else repr(token.text)
        return PrototxtError(self.source, token.line, token.column, f"{message}, found {found}")

    def message(self, close: str | None, depth: int, start: _Tok | None) -> Message:
        if depth > MAX_DEPTH:
            raise self.fail(self.peek(), f"messages nest more than {MAX_DEPTH} deep")
        msg = Message(line=start.line if start else 1, column=start.column if start else 1)
        while True:
            token = self.peek()
            if close is not None and token.kind == "symbol" and token.text == close:
                self.take()
                return msg
            if token.kind == "end":
                if close is None:
                    return msg
                raise self.fail(
                    token, f"expected {close!r} to close the message opened at line {msg.line}"
                )
            if token.kind != "word" or token.text.startswith("-"):
                raise self.fail(token, "expected a field name")
            self.take()
            self.field(msg, token, depth)
            nxt = self.peek()
            if nxt.kind == "symbol" and nxt.text in ",;":
                self.take()

    def field(self, msg: Message, name: _Tok, depth: int) -> None:
        token = self.peek()
        colon = token.kind == "symbol" and token.text == ":"
        if colon:
            self.take()
            token = self.peek()
        if token.kind == "symbol" and token.text in "{<":
            self.take()
            value: Value = self.message("}" if token.text == "{" else ">", depth + 1, name)
            msg.fields.append(Field(name.text, value, name.line, name.column))
            return
        if not colon:
            raise self.fail(token, f"expected ':' or '{{' after field {name.text!r}")
        if token.kind == "symbol" and token.text == "[":
            self.take()
            while not (self.peek().kind == "symbol" and self.peek().text == "]"):
                msg.fields.append(Field(name.text, self.scalar(name), name.line, name.column))
                sep = self.peek()
                if sep.kind == "symbol" and sep.text == ",":
                    self.take()
                elif not (sep.kind == "symbol" and sep.text == "]"):
                    raise self.fail(sep, "expected ',' or ']' in a list")
            self.take()
            return
        msg.fields.append(Field(name.text, self.scalar(name), name.line, name.column))

    def scalar(self, name: _Tok) -> Value:
        token = self.take()
        if token.kind == "string":
            parts = [_unquote(token, self.source)]
            while self.peek().kind == "string":
                parts.append(_unquote(self.take(), self.source))
            return "".join(parts)
        if token.kind == "number":
            if len(token.text) > MAX_NUMBER_CHARS:
                raise PrototxtError(
                    self.source, token.line, token.column,
                    f"{name.text}: a number of {len(token.text):,} characters; at most "
                    f"{MAX_NUMBER_CHARS} are read",
                )  # fmt: skip
            return _number(token.text)
        if token.kind == "word":
            if token.text in _TRUE:
                return True
            if token.text in _FALSE:
                return False
            if token.text.lower() in _FLOAT_WORDS:
                return float(token.text.lower().replace("infinity", "inf"))
            if token.text.startswith("-"):
                raise PrototxtError(
                    self.source,
                    token.line,
                    token.column,
                    f"expected a value for field {name.text!r}, found {token.text!r}",
                )
            return Ident(token.text)
        raise PrototxtError(
            self.source,
            token.line,
            token.column,
            f"expected a value for field {name.text!r}, found "
            + ("the end of the file" if token.kind == "end" else repr(token.text)),
        )


def parse(text: str | bytes, source: str = "<prototxt>") -> Message:
    """Read a prototxt text into a `Message`; `source` names it in errors (a file name).

    Raises `PrototxtError` with the line and column of the first thing that is not valid
    protocol-buffer text format, or when the text is larger than `MAX_TEXT_BYTES`.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PrototxtError(source, 1, 1, f"not UTF-8 text (byte {exc.start})") from None
    if len(text.encode("utf-8")) > MAX_TEXT_BYTES:
        raise PrototxtError(source, 1, 1, f"larger than {MAX_TEXT_BYTES} bytes")
    if "\x00" in text:
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise PrototxtError(source, line, 1, "contains a NUL character")
    return _Parser(text, source).message(None, 0, None)


def _quote(value: str) -> str:
    out = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    out = out.replace("\t", "\\t").replace("\r", "\\r")
    return f'"{out}"'


def _scalar_text(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Ident):
        return str(value)
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, float):
        if value != value:
            return "nan"
        if value in (float("inf"), float("-inf")):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    return str(value)


def dumps(message: Message, indent: int = 0) -> str:
    """Write `message` as prototxt text that `parse` reads back to the same fields."""
    pad = "  " * indent
    lines: list[str] = []
    for item in message.fields:
        if isinstance(item.value, Message):
            lines.append(f"{pad}{item.name} {{")
            body = dumps(item.value, indent + 1)
            if body:
                lines.append(body)
            lines.append(f"{pad}}}")
        else:
            lines.append(f"{pad}{item.name}: {_scalar_text(item.value)}")
    return "\n".join(lines) + ("\n" if lines and indent == 0 else "")
