"""Search dimensions: what a leaf of a sweep spec may be besides a plain value.

In YAML a leaf is one of:

- a plain value: fixed for every trial;
- a plain list, ``[16, 32, 64]``: a grid over those values;
- ``{choice: [...]}``: the same set, sampled uniformly by random search;
- ``{uniform: [a, b]}`` and ``{loguniform: [a, b]}``: continuous, random search only;
- ``{int: [a, b], step: s}``: integers from a to b inclusive;
- ``{range: [start, stop, step]}``: like Python's range, stop excluded, floats allowed;
- ``{value: x}``: a literal, for a value that is itself a list (``hidden_units``'s
  per-layer widths, ``{value: [128, 64]}``).

Any of the dict forms may carry ``when: {path: value-or-list}``: the dimension applies only
when every named value matches (``momentum`` only when ``training.optimizer`` is sgd);
otherwise the field keeps its default and the trial's params do not mention it. A bare key
names a field beside the leaf, in its own section or sub-section (``optimizer`` under
``training``; ``strategy`` under ``execution.parallel``); a dotted key is a full path from
the top (``training.optimizer``, ``execution.parallel.world_size``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from core.errors import Problem

MAX_LISTED_VALUES = 1_000_000
DIMENSION_KEYS = ("choice", "uniform", "loguniform", "int", "range", "value")
_EXTRA_KEYS = {"when", "step"}


class Dimension(BaseModel):
    """One searchable leaf of the spec, at a dotted path such as ``training.lr``."""

    model_config = ConfigDict(frozen=True)

    path: str
    kind: str
    when: dict[str, tuple[Any, ...]] = {}

    @property
    def finite(self) -> bool:
        """Whether grid search can enumerate it."""
        return True

    def values(self) -> list[Any]:
        """Every candidate, in order, for finite dimensions."""
        raise NotImplementedError

    def sample(self, rng: random.Random) -> Any:
        """Draw one value with the given generator."""
        candidates = self.values()
        return candidates[rng.randrange(len(candidates))]

    @property
    def varies(self) -> bool:
        """Whether the dimension contributes a parameter to each trial."""
        return True

    def active(self, lookup: dict[str, Any]) -> bool:
        """Whether every condition holds given the values assigned so far."""
        for path, accepted in self.when.items():
            if path not in lookup or lookup[path] not in accepted:
                return False
        return True


class Fixed(Dimension):
    """A single value; varies only if conditional (then it appears in params when active)."""

    value: Any

    def values(self) -> list[Any]:
        return [self.value]

    @property
    def varies(self) -> bool:
        return bool(self.when)


class Categorical(Dimension):
    """A finite list of values: a plain YAML list or ``{choice: [...]}``."""

    choices: tuple[Any, ...]

    def values(self) -> list[Any]:
        return list(self.choices)

    def sample(self, rng: random.Random) -> Any:
        return self.choices[rng.randrange(len(self.choices))]


class IntRange(Dimension):
    """Integers from low to high inclusive, every `step`: ``{int: [a, b], step: s}``.

    Kept as bounds, never listed up front: ``{int: [0, 2147483647]}`` is a fine seed range
    for random search, and grid search refuses it by its count before listing anything.
    """

    low: int
    high: int
    step: int = 1

    @property
    def size(self) -> int:
        return max(0, (self.high - self.low) // self.step + 1)

    def values(self) -> list[Any]:
        return list(range(self.low, self.high + 1, self.step))

    def sample(self, rng: random.Random) -> int:
        return self.low + self.step * rng.randrange(self.size)


class Uniform(Dimension):
    """A float drawn uniformly (or log-uniformly) between low and high."""

    low: float
    high: float
    log: bool = False

    @property
    def finite(self) -> bool:
        return False

    def values(self) -> list[Any]:
        raise TypeError(f"{self.path}: a {self.kind} dimension has no finite list of values")

    def sample(self, rng: random.Random) -> float:
        if self.log:
            return math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        return rng.uniform(self.low, self.high)


def _range_values(start: float, stop: float, step: float) -> list[Any]:
    count = max(0, math.ceil((stop - start) / step - 1e-9))
    if all(isinstance(x, int) for x in (start, stop, step)):
        return [int(start + i * step) for i in range(count)]
    return [round(start + i * step, 12) for i in range(count)]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _parse_when(raw: Any, path: str, problems: list[Problem]) -> dict[str, tuple[Any, ...]]:
    parent = path.rpartition(".")[0]
    if not isinstance(raw, dict) or not raw:
        problems.append(Problem(f"{path}.when", "must map a field path to a value or a list"))
        return {}
    out: dict[str, tuple[Any, ...]] = {}
    for key, accepted in raw.items():
        target = str(key) if "." in str(key) else f"{parent}.{key}"
        out[target] = tuple(accepted) if isinstance(accepted, list) else (accepted,)
    return out


def parse_dimension(raw: Any, path: str, problems: list[Problem]) -> tuple[Dimension, list[str]]:
    """Turn one raw spec leaf into a Dimension.

    Returns the dimension and, for each candidate value, the path suffix it is reported at
    (``[2]`` for a grid list, ``.choice[2]``, ``.uniform[0]``...), so that field rules can
    name exactly which value broke them. Structural problems are appended to `problems`.
    """
    if isinstance(raw, list):
        if not raw:
            problems.append(Problem(path, "a grid list must hold at least one value"))
        return Categorical(path=path, kind="grid", choices=tuple(raw)), [
            f"[{i}]" for i in range(len(raw))
        ]
    if not isinstance(raw, dict) or not any(k in raw for k in DIMENSION_KEYS):
        return Fixed(path=path, kind="value", value=raw), [""]

    kinds = [k for k in DIMENSION_KEYS if k in raw]
    if len(kinds) > 1:
        problems.append(Problem(path, f"use one of {', '.join(kinds)}, not several"))
    kind = kinds[0]
    allowed = {kind, "when"} | ({"step"} if kind == "int" else set())
    for key in raw:
        if key not in allowed and key not in kinds:
            rule = "only int takes a step" if key == "step" else "unknown key"
            problems.append(Problem(f"{path}.{key}", rule))
    when = _parse_when(raw["when"], path, problems) if "when" in raw else {}
    body = raw[kind]

    if kind == "value":
        return Fixed(path=path, kind=kind, value=body, when=when), [".value"]
    if kind == "choice":
        if not isinstance(body, list) or not body:
            problems.append(Problem(f"{path}.choice", "must be a non-empty list"))
            body = []
        return Categorical(path=path, kind=kind, choices=tuple(body), when=when), [
            f".choice[{i}]" for i in range(len(body))
        ]
    if kind in ("uniform", "loguniform"):
        ok = isinstance(body, list) and len(body) == 2 and all(_is_number(x) for x in body)
        if not ok:
            problems.append(Problem(f"{path}.{kind}", f"must be [low, high] numbers, got {body!r}"))
            return Fixed(path=path, kind="value", value=None, when=when), []
        low, high = float(body[0]), float(body[1])
        if not low < high:
            problems.append(
                Problem(f"{path}.{kind}", f"low < high must hold, got low={low}, high={high}")
            )
        if kind == "loguniform" and low <= 0:
            problems.append(Problem(f"{path}.{kind}[0]", f"must be > 0 for loguniform, got {low}"))
        dim = Uniform(path=path, kind=kind, low=low, high=high, log=kind == "loguniform", when=when)
        return dim, [f".{kind}[0]", f".{kind}[1]"]
    if kind == "int":
        step = raw.get("step", 1)
        ok = (
            isinstance(body, list)
            and len(body) == 2
            and all(isinstance(x, int) and not isinstance(x, bool) for x in body)
        )
        if not ok:
            problems.append(Problem(f"{path}.int", f"must be [low, high] integers, got {body!r}"))
            return Fixed(path=path, kind="value", value=None, when=when), []
        if not isinstance(step, int) or isinstance(step, bool) or step <= 0:
            problems.append(Problem(f"{path}.step", f"must be an integer > 0, got {step!r}"))
            step = 1
        if body[0] > body[1]:
            problems.append(
                Problem(f"{path}.int", f"low <= high must hold, got low={body[0]}, high={body[1]}")
            )
        dim = IntRange(path=path, kind=kind, low=body[0], high=body[1], step=step, when=when)
        return dim, [".int[0]", ".int[1]"]
    # range
    ok = isinstance(body, list) and len(body) == 3 and all(_is_number(x) for x in body)
    if not ok:
        problems.append(
            Problem(f"{path}.range", f"must be [start, stop, step] numbers, got {body!r}")
        )
        return Fixed(path=path, kind="value", value=None, when=when), []
    if body[2] <= 0:
        problems.append(Problem(f"{path}.range[2]", f"step must be > 0, got {body[2]}"))
        return Fixed(path=path, kind="value", value=None, when=when), []
    if (body[1] - body[0]) / body[2] > MAX_LISTED_VALUES:
        problems.append(
            Problem(
                f"{path}.range",
                f"lists more than {MAX_LISTED_VALUES:,} values; "
                "use {int: [low, high]} or a continuous dimension",
            )
        )
        return Fixed(path=path, kind="value", value=None, when=when), []
    choices = tuple(_range_values(*body))
    if not choices:
        problems.append(Problem(f"{path}.range", f"start < stop must hold, got {body!r}"))
    return Categorical(path=path, kind=kind, choices=choices, when=when), [
        f".range (value {v})" for v in choices
    ]


def dedupe(values: Sequence[Any]) -> list[Any]:
    """Drop repeated values, keeping the first of each (1 and 1.0 are the same value)."""
    seen: set[str] = set()
    out = []
    for value in values:
        key = repr(value) if not _is_number(value) else repr(float(value))
        if key not in seen:
            seen.add(key)
            out.append(value)
    return out
