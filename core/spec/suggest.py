""""Did you mean" for a misspelled spec key: the rule of an unknown key names the known
ones and, when one is close (`difflib`, as git and click do), the likeliest.

`core.spec.sweep` builds the rule of every unknown key with `unknown_key`; for the sections that
pydantic checks (objective, search, pruning, limits) `name_known_keys` rewrites pydantic's
bare "unknown key" the same way, from the model's fields.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from pydantic import BaseModel

from core.errors import Problem

#: How alike a known key must be to be offered (difflib's ratio, 0-1): `lr` for `lrr`,
#: `hidden_units` for `hiden_units`, nothing for an unrelated word.
CUTOFF = 0.6


def did_you_mean(word: str, known: Sequence[str]) -> str:
    """``; did you mean 'hidden_units'?`` for the closest of `known`, or "" if none is close."""
    close = difflib.get_close_matches(word, known, n=1, cutoff=CUTOFF)
    return f"; did you mean {close[0]!r}?" if close else ""


def unknown_key(key: object, known: Sequence[str]) -> str:
    """The rule an unknown `key` breaks: the known keys, and the likeliest of them."""
    rule = f"unknown key (known: {', '.join(known)})"
    return rule + did_you_mean(key, known) if isinstance(key, str) else rule


def _fields_at(model: type[BaseModel], parts: Sequence[str]) -> list[str] | None:
    """The field names of the (sub-)model at `parts` below `model`, or None."""
    for part in parts:
        info = model.model_fields.get(part)
        inner = info.annotation if info is not None else None
        if not (isinstance(inner, type) and issubclass(inner, BaseModel)):
            return None
        model = inner
    return list(model.model_fields)


def name_known_keys(problems: list[Problem], section: str, model: type[BaseModel]) -> list[Problem]:
    """`problems` of `model` (the section `section`) with each bare "unknown key" rule
    replaced by `unknown_key`'s."""
    out = []
    for problem in problems:
        parts = problem.path.split(".")
        known = None
        if problem.message == "unknown key" and parts[0] == section and len(parts) > 1:
            known = _fields_at(model, parts[1:-1])
        out.append(Problem(problem.path, unknown_key(parts[-1], known)) if known else problem)
    return out
