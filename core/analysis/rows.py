"""A sweep's complete trials as columns, and what each parameter is (numeric, a seed...).

The analysis reads the store only through `Reads.sweep_rows` (the finish log, ~0.5 s for
50,000 finished trials) projected to `FIELDS`, and keeps the complete trials with a finite
objective: the only ones that say what a setting achieves. Failed and pruned trials are
counted, not analysed.

Depth and width come from the resolved config (``model.hidden_layers``,
``model.hidden_units``; a list of widths is its mean width and its length the depth), so
they are known whether or not the sweep varies them. The epochs a trial trained are its
last reported epoch (``progress.epoch``), else the epochs planned. A trial trained fused
with others (``fused`` > 1, `workers.group_runner`) has no time of its own: its
``train_seconds`` is its group's, so its ``seconds`` is unknown (NaN) here, and everything
timed leaves it out (``fused`` counts them). A parameter is a *seed*
when its path ends in ``seed`` (as the dashboard decides): seeds are repeats, not
settings, so they define which trials are the same configuration.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.errors import SpecError
from core.spec.space import Categorical, Dimension, IntRange, Uniform
from core.spec.sweep import load_spec
from core.states import TrialState
from core.store.records import flatten_params

#: The trial fields the analysis reads; every one is in the finish log
#: (`core.store.summaries.ROW_FIELDS`), so a finished sweep is read from the log.
FIELDS = (
    "state",
    "params",
    "objective",
    "train_seconds",
    "param_count",
    "objectives",
    "feasible",
    "fused",
    "worker.name",
    "progress.epoch",
    "config.training.epochs",
    "config.model.hidden_layers",
    "config.model.hidden_units",
)
SEED_SUFFIX = "seed"
_COMPLETE = TrialState.COMPLETE.value


def is_seed(path: str) -> bool:
    """Whether a parameter is a repeat of the same setting (``training.seed``)."""
    return path.endswith(SEED_SUFFIX)


def short(path: str) -> str:
    """``model.hidden_units`` -> ``hidden_units``: how the findings name a parameter."""
    return path.split(".", 1)[1] if "." in path else path


@dataclass
class Trials:
    """The complete trials of a sweep, one entry per trial in each column (NaN: unknown)."""

    index: np.ndarray
    ids: list[str]
    params: list[dict[str, Any]]
    objective: np.ndarray
    seconds: np.ndarray
    param_count: np.ndarray
    epochs: np.ndarray
    depth: np.ndarray
    width: np.ndarray
    worker: list[str | None]
    counts: dict[str, int] = field(default_factory=dict)
    fused: int = 0

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def per_epoch(self) -> np.ndarray:
        """Training seconds per epoch trained."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.epochs > 0, self.seconds / self.epochs, np.nan)


def _number(value: Any) -> float:
    """A number of a row as a float; NaN for anything else (rows are JSON or BSON values:
    types are tested exactly, as this runs several times per trial)."""
    kind = type(value)
    if kind is float:
        return value
    if kind is int:
        return float(value)
    return math.nan


def _finite(values: list[float]) -> np.ndarray:
    array = np.array(values, dtype=float)
    array[~np.isfinite(array)] = np.nan
    return array


def _shape(config: Any) -> tuple[float, float]:
    """(depth, mean width) from a resolved config."""
    model = config.get("model") if type(config) is dict else None
    if type(model) is not dict:
        return math.nan, math.nan
    units = model.get("hidden_units")
    depth = _number(model.get("hidden_layers"))
    if type(units) is list:
        widths = [_number(u) for u in units]
        if widths and all(math.isfinite(w) for w in widths):
            return float(len(widths)), sum(widths) / len(widths)
        return depth, math.nan
    return depth, _number(units)


def _epochs(doc: Mapping[str, Any]) -> float:
    progress = doc.get("progress")
    if type(progress) is dict:
        epoch = _number(progress.get("epoch"))
        if epoch > 0:
            return epoch
    config = doc.get("config")
    training = config.get("training") if type(config) is dict else None
    return _number(training.get("epochs")) if type(training) is dict else math.nan


def _flat(nested: Any, prefix: str, out: dict[str, Any]) -> dict[str, Any]:
    """`core.store.records.flatten_params` for the dicts rows hold, in one pass (it runs on every
    trial of a sweep)."""
    if type(nested) is not dict:
        return flatten_params(nested, prefix.rstrip(".")) if nested else out
    for key, value in nested.items():
        if type(value) is dict:
            _flat(value, f"{prefix}{key}.", out)
        else:
            out[f"{prefix}{key}"] = value
    return out


def complete_trials(docs: Iterable[Mapping[str, Any]]) -> Trials:
    """The complete trials with a finite objective of `docs` (rows of `FIELDS`), by index;
    ``counts`` holds how many of `docs` are in each state."""
    counts: dict[str, int] = {}
    kept: list[Mapping[str, Any]] = []
    for doc in docs:
        state = str(doc.get("state"))
        counts[state] = counts.get(state, 0) + 1
        if state == _COMPLETE and math.isfinite(_number(doc.get("objective"))):
            kept.append(doc)
    kept.sort(key=lambda d: d["index"])
    shapes = [_shape(d.get("config")) for d in kept]
    workers = [d.get("worker") for d in kept]
    alone = [not _number(d.get("fused")) > 1 for d in kept]
    seconds = [_number(d.get("train_seconds")) if ok else math.nan
               for d, ok in zip(kept, alone, strict=True)]  # fmt: skip
    return Trials(
        index=np.array([int(d["index"]) for d in kept], dtype=np.int64),
        ids=[str(d["_id"]) for d in kept],
        params=[_flat(d.get("params"), "", {}) for d in kept],
        objective=np.array([float(d["objective"]) for d in kept], dtype=float),
        seconds=_finite(seconds),
        param_count=_finite([_number(d.get("param_count")) for d in kept]),
        epochs=_finite([_epochs(d) for d in kept]),
        depth=_finite([s[0] for s in shapes]),
        width=_finite([s[1] for s in shapes]),
        worker=[w.get("name") if type(w) is dict else None for w in workers],
        counts=counts,
        fused=alone.count(False),
    )


# -- parameters -------------------------------------------------------------------------


@dataclass(frozen=True)
class Parameter:
    """One parameter that varies: ``numeric`` (ordered numbers) or ``categorical``; `log`
    when its values span two orders of magnitude or more (plotted and binned on a log
    scale); `seed` for a repeat."""

    path: str
    kind: str
    log: bool = False
    seed: bool = False
    dimension: Dimension | None = None


def hashable(value: Any) -> Any:
    """A parameter value as a set member or dict key: scalars as they are (a bool tagged,
    as True == 1), anything else (a list of widths) by its JSON text."""
    kind = type(value)
    if kind is str or kind is int or kind is float or value is None:
        return value
    if kind is bool:
        return ("bool", value)
    return ("json", json.dumps(value, sort_keys=True))


def _numbers(values: Iterable[Any]) -> bool:
    values = list(values)
    return bool(values) and all(type(v) in (int, float) and math.isfinite(v) for v in values)


def _spans_decades(values: Sequence[float]) -> bool:
    low, high = min(values), max(values)
    return low > 0 and high / low >= 100


def dimensions(spec_document: Mapping[str, Any]) -> dict[str, Dimension]:
    """The varying dimensions of a stored spec by path; none if it no longer loads (a
    spec stored under older rules: the parameters then come from the trials)."""
    try:
        return {d.path: d for d in load_spec(dict(spec_document or {})).dimensions}
    except SpecError:
        return {}


def parameters(trials: Trials, spec_document: Mapping[str, Any]) -> list[Parameter]:
    """The parameters of the sweep that take more than one value among `trials`, in the
    spec's order (then any the spec does not name), each with its kind."""
    dims = dimensions(spec_document)
    seen: dict[str, dict[Any, Any]] = {path: {} for path in dims}
    for params in trials.params:
        for path, value in params.items():
            distinct = seen.get(path)
            if distinct is None:
                distinct = seen[path] = {}
            key = hashable(value)
            if key not in distinct:
                distinct[key] = value
    out = []
    for path, distinct in seen.items():
        if len(distinct) < 2:
            continue
        values = list(distinct.values())
        dim = dims.get(path)
        numeric = _numbers(values)
        if isinstance(dim, Categorical) and not _numbers(dim.choices):
            numeric = False
        log = numeric and _spans_decades(values)
        if isinstance(dim, Uniform):
            log = dim.log
        elif isinstance(dim, IntRange):
            log = dim.low > 0 and dim.high / dim.low >= 100
        out.append(Parameter(path, "numeric" if numeric else "categorical", log, is_seed(path),
                             dim))  # fmt: skip
    return out


def config_keys(trials: Trials, params: Sequence[Parameter]) -> np.ndarray:
    """A number per trial, equal for trials of the same configuration (every parameter
    but the seeds equal): the repeats that measure seed-to-seed noise."""
    paths = [p.path for p in params if not p.seed]
    ids: dict[tuple[Any, ...], int] = {}
    keys = np.empty(len(trials), dtype=np.int64)
    for i, flat in enumerate(trials.params):
        key = tuple([hashable(flat.get(path)) for path in paths])
        keys[i] = ids.setdefault(key, len(ids))
    return keys
