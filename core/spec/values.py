"""A parameter value as text: the one spelling every surface writes (tables, axes, findings).

A spec's values are JSON's (numbers, strings, booleans, null, lists), so they are written
as JSON spells its words (``true``, ``false``, ``null``) and lists without spaces
(``[128,64]``). Floats are written in full, where the text must tell values apart (a
category of an axis, which the page matches against), or to `SHORT_DIGITS` significant
digits where it is read beside others (tables, the findings of an analysis, the CLI).
"""

from __future__ import annotations

from typing import Any

#: Significant digits of a float written short (`value_text(value, SHORT_DIGITS)`).
SHORT_DIGITS = 4


def value_text(value: Any, digits: int | None = None) -> str:
    """`value` as text; floats to `digits` significant digits when given (see the module)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, list | tuple):
        return "[" + ",".join(value_text(v, digits) for v in value) + "]"
    if digits is not None and isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def short_text(value: Any) -> str:
    """`value` as text with floats to `SHORT_DIGITS` significant digits, as read beside
    others (tables, findings)."""
    return value_text(value, SHORT_DIGITS)


#: What a spreadsheet reads as the start of a formula in a cell (OWASP, "CSV Injection").
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(value: Any) -> Any:
    """A CSV cell that no spreadsheet runs as a formula: text that starts like one is
    prefixed with a single quote, as OWASP advises; numbers (a negative one too) and other
    values are left as they are. Every CSV the platform writes passes its cells here."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value
