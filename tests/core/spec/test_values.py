"""A parameter value as text (`core.spec.values`): one spelling for every surface."""

from __future__ import annotations

from typing import Any

import pytest

from core.spec.values import SHORT_DIGITS, short_text, value_text


@pytest.mark.parametrize(("value", "full", "short"), [
    (True, "true", "true"),
    (None, "null", "null"),
    ("relu", "relu", "relu"),
    (1024, "1024", "1024"),
    (0.0031622776601683794, "0.0031622776601683794", "0.003162"),
    ([128, 64], "[128,64]", "[128,64]"),
    ((0.5, False), "[0.5,false]", "[0.5,false]"),
    ([[0.123456, 2]], "[[0.123456,2]]", "[[0.1235,2]]"),
])
def test_values_are_written_as_json_spells_them(value: Any, full: str, short: str) -> None:
    assert value_text(value) == full
    assert short_text(value) == short == value_text(value, SHORT_DIGITS)
