"""What a training function declares its trials cost, held to the server's ceilings.

A training function's model is its own: Sweepstack cannot count it. The module its entry
point names may say, with a function beside ``train``::

    def cost(params: dict) -> dict:        # params: a trial's resolved params, as train gets them
        return {"parameters": ..., "activations": ...}   # either key may be left out

``parameters`` is what the model learns (held to ``SWEEPSTACK_MAX_MODEL_PARAMETERS``) and
``activations`` the elements one step holds at once, batch included (held to
``SWEEPSTACK_MAX_ACTIVATION_ELEMENTS``). `cost_problems` asks it where specs are accepted (the
API, the CLI), so the module is imported there: it must import its heavy dependencies
(torch ...) inside ``train``, not at its top, or the API's image, which installs the package
without them, cannot read the cost (it is then not checked there, and says so in its log).

It is asked at every combination of the candidates of the spec's ``params`` (a range's bounds,
a conditional parameter's values and its absence), up to `MAX_POINTS`; past that, at the
combination of each parameter's largest value and at each parameter's values around it,
which bounds a cost that grows with each number. A combination the function refuses
(it raises) is skipped: its trial fails on its worker, as it would have. A problem names
the parameter whose own default brings the figure down the most (the function is asked again
without it), and the values of the worst combination.
"""

from __future__ import annotations

import functools
import importlib
import itertools
import json
import logging
import math
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from core.errors import Problem
from core.spec.ceilings import UNSET, dimension_candidates, over
from core.spec.fields import set_in

if TYPE_CHECKING:
    from core.settings import Settings
    from core.spec.spec import SweepSpec

log = logging.getLogger(__name__)

#: The most combinations a declared cost is asked at, before it is asked around the largest.
MAX_POINTS = 4096
#: The figures a cost may declare, with the ceiling each is held to.
FIGURES = {
    "parameters": ("the model's parameters", "max_model_parameters",
                   "SWEEPSTACK_MAX_MODEL_PARAMETERS"),
    "activations": ("the elements a step holds at once (batch x every activation)",
                    "max_activation_elements", "SWEEPSTACK_MAX_ACTIVATION_ELEMENTS"),
}  # fmt: skip

Cost = Callable[[dict[str, Any]], Mapping[str, Any]]


@functools.cache
def declared_cost(module: str) -> Cost | None:
    """The ``cost`` function of the module an entry point names, or None: it has none, or it
    cannot be imported here (logged, with why)."""
    try:
        loaded = importlib.import_module(module)
    except Exception as exc:
        log.warning("cannot read the declared cost of %s: %s: %s", module, type(exc).__name__, exc)
        return None
    found = getattr(loaded, "cost", None)
    return found if callable(found) else None


def _size(value: Any) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if ok else -math.inf


def _points(dimensions: list[tuple[str, list[Any]]]) -> Iterator[dict[str, Any]]:
    """Every combination, or past `MAX_POINTS` the largest one and each parameter around it."""
    paths = [p for p, _ in dimensions]
    if math.prod(len(v) for _, v in dimensions) <= MAX_POINTS:
        for values in itertools.product(*(v for _, v in dimensions)):
            yield dict(zip(paths, values, strict=True))
        return
    top = {p: max(v, key=_size) for p, v in dimensions}
    yield top
    for path, values in dimensions:
        for value in values:
            yield {**top, path: value}


def _params(point: dict[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = {"params": {}}
    for path, value in point.items():
        if value is not UNSET:
            set_in(config, path, value)
    return config["params"]


def _ask(cost: Cost, point: dict[str, Any]) -> dict[str, float] | str | None:
    """The figures the cost declares at `point`; None where it raises (the trial's worker
    would fail it); a text saying what is wrong with an answer that is no figures."""
    try:
        answer = cost(_params(point))
    except Exception as exc:
        log.debug("the declared cost refused %s: %s", point, exc)
        return None
    if not isinstance(answer, Mapping) or not set(answer) <= set(FIGURES):
        return f"must return a mapping of {' and '.join(FIGURES)}, got {answer!r:.200}"
    out = {}
    for key, value in answer.items():
        if _size(value) < 0 or not math.isfinite(_size(value)):
            return f"must give {key} as a number >= 0, got {value!r:.100}"
        out[key] = float(value)
    return out


def _blame(cost: Cost, point: dict[str, Any], key: str, figure: float) -> str:
    """The parameter whose own default (left out of `point`) lowers `key` the most."""
    best, path = figure, "params"
    for name, value in point.items():
        if value is UNSET:
            continue
        answer = _ask(cost, {**point, name: UNSET})
        if isinstance(answer, dict) and answer.get(key, figure) < best:
            best, path = answer[key], name
    return path


def _show(point: dict[str, Any]) -> str:
    shown = {p: v for p, v in point.items() if v is not UNSET}
    return ", ".join(f"{p}={json.dumps(v)}" for p, v in shown.items()) or "its params"


def cost_problems(spec: SweepSpec, module: str, settings: Settings) -> list[Problem]:
    """The declared cost of the function in `module` (if any), at its worst combination of the
    spec's ``params``, against the server's ceilings (the module docstring)."""
    cost = declared_cost(module)
    if cost is None:
        return []
    dimensions = [
        (p, dimension_candidates(d)) for p, d in spec.space.items() if p.startswith("params.")
    ]
    dimensions = [(p, v) for p, v in dimensions if v]
    worst: dict[str, tuple[float, dict[str, Any]]] = {}
    for point in _points(dimensions):
        answer = _ask(cost, point)
        if isinstance(answer, str):
            return [Problem("trainable", f"the declared cost of {module} {answer}")]
        for key, value in (answer or {}).items():
            if key not in worst or value > worst[key][0]:
                worst[key] = (value, point)
    problems = []
    for key, (value, point) in worst.items():
        what, setting, name = FIGURES[key]
        limit = getattr(settings, setting)
        if value > limit:
            how = f"as {module} declares it, when {_show(point)}"
            path = _blame(cost, point, key, value)
            problems.append(over(path, what, math.ceil(value), limit, name, how))
    return problems
