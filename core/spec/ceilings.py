"""What a server's ceilings are measured on, without expanding a sweep.

`core.spec.limits` holds a spec to the server's settings, and each kind adds its own
ceilings (`core.spec.kind.TrialKind.limit_problems`); both measure the spec here. A field
is measured at the largest value it can take anywhere in the sweep (`candidates`, `top`:
each field on its own, the default included where a dimension is conditional), an upper
bound that costs the same for 10 trials or 100,000. `over` is the problem that names a
figure past its ceiling, in the same words for every ceiling.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from core.errors import Problem
from core.spec.config import REGRESSION_DATASETS
from core.spec.fields import leaf_defaults
from core.spec.space import Fixed, IntRange, Uniform
from core.spec.spec import SweepSpec

#: (rows, features, classes) of the bundled sets (scikit-learn's loaders).
BUILTIN_SHAPES = {
    "digits": (1797, 64, 10),
    "iris": (150, 4, 3),
    "wine": (178, 13, 3),
    "breast_cancer": (569, 30, 2),
}
SYNTHETIC = ("synthetic_classification", "synthetic_regression")


#: A conditional dimension's field left unset, among its candidates (`dimension_candidates`).
UNSET: Any = object()


def dimension_candidates(dim: Any) -> list[Any]:
    """The values a dimension's field takes at its extremes: a range's bounds, every listed
    value, and `UNSET` where a condition may leave the field out (the Caffe and training
    function ceilings try each, `core.spec.caffe.ceilings`, `core.spec.trainable_costs`)."""
    if isinstance(dim, Uniform | IntRange):
        values: list[Any] = [dim.low, dim.high]
    else:
        values = list(dim.values())
    return [*values, UNSET] if dim.when else values


def candidates(spec: SweepSpec, path: str) -> list[Any]:
    """Every value `path` can take in the sweep: a dimension's values (a range's bounds),
    and the default as well where the dimension is conditional; else the fixed value or
    the default."""
    dim = spec.space.get(path)
    default = leaf_defaults().get(path)
    if dim is None:
        return [default]
    if isinstance(dim, Uniform | IntRange):
        values: list[Any] = [dim.low, dim.high]
    elif isinstance(dim, Fixed):
        values = [dim.value]
    else:
        values = dim.values()
    return [*values, default] if dim.when else values


def numbers(values: Iterable[Any]) -> list[float]:
    """The values that are numbers (not booleans)."""
    return [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]


def top(spec: SweepSpec, path: str) -> int:
    """The largest number `path` can take in the sweep (0 when it takes none)."""
    return int(max(numbers(candidates(spec, path)), default=0))


def data_shape(spec: SweepSpec) -> tuple[int | None, int, int]:
    """The most rows, features and outputs any trial's data has (rows None: a file)."""
    names = [n for n in candidates(spec, "dataset.name") if n is not None]
    has_file = any(p is not None for p in candidates(spec, "dataset.path"))
    rows: list[int] = []
    features: list[int] = []
    outputs: list[int] = [1]
    for name in names:
        if name in BUILTIN_SHAPES:
            n, f, c = BUILTIN_SHAPES[name]
            rows.append(n)
            features.append(f)
            outputs.append(c)
        elif name in SYNTHETIC:
            rows.append(top(spec, "dataset.samples"))
            features.append(top(spec, "dataset.features"))
            if name not in REGRESSION_DATASETS:
                outputs.append(top(spec, "dataset.classes"))
    top_rows = None if has_file or not rows else max(rows)
    return top_rows, max(features, default=1), max(outputs)


def over(field: str, what: str, got: int, limit: int, setting: str, how: str = "") -> Problem:
    """The problem of `what` at `field` being `got`, past this server's `limit` (`setting`)."""
    rule = f"{what} must be <= {limit:,} on this server ({setting}), got {got:,}"
    return Problem(field, f"{rule} ({how})" if how else rule)
