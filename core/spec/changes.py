"""Changes to a running sweep's spec: more trials, more values, a narrower range.

A change is a small document, the same from the API, the CLI and the dashboard::

    {"trials": 60,                                   # raise search.trials (random, adaptive)
     "add": {"model.hidden_units": [256, 512]},     # values added to a grid list or a choice
     "narrow": {"training.lr": [0.001, 0.01]}}      # a uniform, loguniform or int range narrowed

`apply_change` writes it into the spec as the user submitted it (``sweep["spec"]``), checks
the result as a new submit would (`core.spec.sweep.load_spec`), and says what changed in
one line for the sweep's history. What follows is the scheduler's (`scheduler.feed`): the
sweep's feeder is rebuilt on the new spec from the stored trials, so every trial keeps its
id and result, no point is asked twice, and an adaptive search keeps all it learned.

Rules, and why:

- ``trials`` only grows, and only where it is the budget (random and adaptive searches): a
  grid's size is its values'. Fewer trials is a cancel.
- ``add`` takes values not there yet, to a grid list or a ``choice``; a continuous or
  integer range has no values to add (widen it in a new sweep).
- ``narrow`` keeps a range inside the one it replaces (``low <= new low < new high <=
  high``): trials already run outside it stay, and the search learns from them; a wider
  range would ask points the earlier trials never told it about.
- Nothing else of a spec changes: a new spec is a new sweep (its trial ids hash the name
  and params, so the results stay comparable).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from core.errors import Problem, SpecError
from core.spec.fields import get_in
from core.spec.problems import show_value
from core.spec.sweep import SweepSpec, load_spec

#: The keys of a change document.
CHANGE_KEYS = ("trials", "add", "narrow")
#: The range forms `narrow` takes, and the adaptive or random algorithms `trials` raises.
_NARROWABLE = ("uniform", "loguniform", "int")
_BUDGETED = ("random", "tpe", "cmaes", "gp", "qmc", "nsga2", "nsga3")


def _refuse(path: str, rule: str) -> SpecError:
    return SpecError([Problem(path, rule)])


def check_change(change: Any) -> dict[str, Any]:
    """The change document, its shape checked: a mapping of `CHANGE_KEYS`, at least one."""
    if not isinstance(change, Mapping):
        raise _refuse("", f"a change must be a mapping, got {show_value(change)}")
    unknown = sorted(set(change) - set(CHANGE_KEYS))
    if unknown:
        raise _refuse(unknown[0], f"is not a change; use {', '.join(CHANGE_KEYS)}")
    given = {k: v for k, v in change.items() if v not in (None, {}, [])}
    if not given:
        raise _refuse("", f"a change needs at least one of {', '.join(CHANGE_KEYS)}")
    trials = given.get("trials")
    if trials is not None and (isinstance(trials, bool) or not isinstance(trials, int)):
        raise _refuse("trials", f"must be an integer, got {show_value(trials)}")
    for key in ("add", "narrow"):
        if key in given and not isinstance(given[key], Mapping):
            raise _refuse(key, f"must map dimension paths to values, got {show_value(given[key])}")
    return dict(given)


def apply_change(document: Mapping[str, Any], change: Any) -> tuple[dict[str, Any], str]:
    """The spec `document` (as stored) with `change` made, and a line saying what changed
    (``search.trials 40 -> 60; model.hidden_units + [256]``). Raises `SpecError` naming
    the field and the rule for a change the rules above refuse, and for a result a submit
    would refuse; the stored spec is never touched."""
    change = check_change(change)
    old = load_spec(dict(document))
    raw = copy.deepcopy(dict(document))
    said: list[str] = []
    if "trials" in change:
        said.append(_raise_trials(raw, old, change["trials"]))
    dims = {d.path: d for d in old.dimensions}
    for path, values in (change.get("add") or {}).items():
        said.append(_add_values(raw, dims, str(path), values))
    for path, bounds in (change.get("narrow") or {}).items():
        said.append(_narrow(raw, dims, str(path), bounds))
    try:
        load_spec(raw)
    except SpecError as exc:
        raise SpecError(exc.problems) from None
    return raw, "; ".join(said)


def _raise_trials(raw: dict[str, Any], old: SweepSpec, trials: int) -> str:
    algorithm = old.search.algorithm
    if algorithm not in _BUDGETED:
        raise _refuse("trials", "a grid's size is its values': add values to a dimension instead")
    before = int(old.search.trials or 0)
    if trials <= before:
        raise _refuse(
            "trials", f"must be more than the sweep's search.trials ({before}), got {trials}"
        )
    most = old.limits.max_trials
    if trials > most:
        raise _refuse(
            "trials", f"must be <= the sweep's limits.max_trials ({most:,}), got {trials}"
        )
    raw.setdefault("search", {})["trials"] = trials
    return f"search.trials {before} -> {trials}"


def _leaf(raw: dict[str, Any], dims: Mapping[str, Any], path: str, at: str) -> Any:
    if path not in dims:
        known = ", ".join(sorted(dims)) or "none"
        raise _refuse(f"{at}.{path}", f"is not a dimension of the sweep (its dimensions: {known})")
    leaf = get_in(raw, path)
    if leaf is None:
        raise _refuse(f"{at}.{path}", "is not written at this path in the sweep's spec")
    return leaf


def _add_values(raw: dict[str, Any], dims: Mapping[str, Any], path: str, values: Any) -> str:
    leaf = _leaf(raw, dims, path, "add")
    if not isinstance(values, list) or not values:
        rule = f"must be a non-empty list of values, got {show_value(values)}"
        raise _refuse(f"add.{path}", rule)
    if isinstance(leaf, list):
        listed = leaf
    elif isinstance(leaf, Mapping) and isinstance(leaf.get("choice"), list):
        listed = leaf["choice"]
    else:
        kind = dims[path].kind
        raise _refuse(
            f"add.{path}", f"is a {kind} dimension: values are added to a grid list or a choice"
        )
    for value in values:
        if value in listed:
            raise _refuse(f"add.{path}", f"{show_value(value)} is already one of its values")
    listed.extend(values)
    return f"{path} + {show_value(values)}"


def _narrow(raw: dict[str, Any], dims: Mapping[str, Any], path: str, bounds: Any) -> str:
    leaf = _leaf(raw, dims, path, "narrow")
    form = next((k for k in _NARROWABLE if isinstance(leaf, Mapping) and k in leaf), None)
    if form is None:
        raise _refuse(
            f"narrow.{path}",
            f"is a {dims[path].kind} dimension: narrow takes {', '.join(_NARROWABLE)} ranges",
        )
    numbers = isinstance(bounds, list) and len(bounds) == 2
    numbers = numbers and all(
        isinstance(b, int | float) and not isinstance(b, bool) for b in bounds
    )
    if not numbers:
        raise _refuse(f"narrow.{path}", f"must be [low, high], got {show_value(bounds)}")
    low, high = leaf[form]
    new_low, new_high = bounds
    if form == "int" and not all(isinstance(b, int) for b in bounds):
        raise _refuse(f"narrow.{path}", f"an int range takes integers, got {show_value(bounds)}")
    step = leaf.get("step", 1) if form == "int" else None
    if step and (new_low - low) % step:
        raise _refuse(
            f"narrow.{path}",
            f"must start on its step of {step} from {low}, got {new_low}",
        )  # the trials so far keep their values, on that step
    if not (low <= new_low < new_high <= high):
        raise _refuse(
            f"narrow.{path}",
            f"must lie inside [{low}, {high}] with low < high, got [{new_low}, {new_high}]",
        )
    leaf[form] = [new_low, new_high]
    return f"{path} [{low}, {high}] -> [{new_low}, {new_high}]"
