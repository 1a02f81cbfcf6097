"""Diminishing returns: the objective over each numeric parameter, and where it levels off.

For each numeric (ordered) parameter that takes three values or more, the curve has one
point per value: ``n`` trials, their ``mean``, ``std``, ``min`` and ``max`` (over every
other parameter and seed), and ``best``: the best *configuration* at that value, a
configuration being the trials equal in every parameter but the seeds, valued at the mean
over its seeds (so one lucky seed does not make a point). More than `MAX_LEVELS` distinct
values (a continuous parameter of a random search) are binned into `BINS` quantile bins
(of the logarithm when the values span two decades), each at its median.

The **seed noise** is the typical standard deviation of the objective within
configurations that ran more than once (seeds, repeats); None without repeats. Typical, not
pooled: a configuration whose seeds split between trained and collapsed (a deep sigmoid net
stuck at chance for one seed of three) has a spread of tens of points, and a handful of
them would make every gain look like noise. So it is the median of the configurations'
variances, each divided by the median of its chi-square law (``s² ~ sigma² chi²(k)/k`` for
``k = n - 1`` degrees of freedom), which estimates sigma for seeds that vary normally and
ignores the configurations that broke.

The **plateau** is judged on ``best``, going up the values: it is at the first value past
which no later value gains ``threshold`` or more, where ``threshold`` is the larger of the
seed noise and ``min_gain`` (`core.analysis.scale`: 0.5 pp for an accuracy). Then:

- ``plateau``: some earlier value gained, and nothing past this one does: "val_accuracy
  plateaus at hidden_units ≥ 256: +0.1 pp from 256 to 1024, within seed noise (±0.4 pp)";
- ``improving``: even the last step gains: no plateau within the values tried;
- ``flat``: nothing past the smallest value gains: the parameter does not pay.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from core.analysis.rows import Parameter, Trials, short
from core.analysis.scale import Scale
from core.spec.values import short_text

#: More distinct values than this are binned.
MAX_LEVELS = 20
#: The number of quantile bins of a continuous parameter.
BINS = 10


def seed_noise(trials: Trials, keys: np.ndarray) -> dict[str, Any]:
    """The typical within-configuration standard deviation of the objective (``std``, None
    without repeats; see the module doc), and how many configurations and trials it rests on."""
    if len(trials) == 0:
        return {"std": None, "configs": 0, "trials": 0}
    n = np.bincount(keys)
    total = np.bincount(keys, weights=trials.objective)
    mean = np.divide(total, n, out=np.zeros_like(total), where=n > 0)
    squares = np.bincount(keys, weights=(trials.objective - mean[keys]) ** 2)
    repeated = n >= 2
    if not repeated.any():
        return {"std": None, "configs": 0, "trials": 0}
    from scipy.stats import chi2  # 0.8 s to import: only when a sweep is analysed

    dof = n[repeated] - 1
    variance = squares[repeated] / dof
    scaled = variance / (chi2.median(dof) / dof)  # each a median-unbiased estimate of sigma²
    std = float(np.sqrt(np.median(scaled)))
    return {"std": std, "configs": int(repeated.sum()), "trials": int(n[repeated].sum())}


def levels(values: Sequence[Any], param: Parameter) -> tuple[np.ndarray, list[float], bool]:
    """The level of each trial (-1: the parameter is off), each level's value, and
    whether the values were binned."""
    x = np.array([v if isinstance(v, int | float) else np.nan for v in values], dtype=float)
    on = np.isfinite(x)
    distinct = np.unique(x[on])
    if distinct.size <= MAX_LEVELS:
        level = np.full(x.shape, -1, dtype=np.int64)
        level[on] = np.searchsorted(distinct, x[on])
        return level, [_plain(v) for v in distinct], False
    scaled = np.log(x[on]) if param.log and distinct[0] > 0 else x[on]
    edges = np.unique(np.quantile(scaled, np.linspace(0, 1, BINS + 1))[1:-1])
    bins = np.searchsorted(edges, scaled, side="right")
    level = np.full(x.shape, -1, dtype=np.int64)
    used = np.unique(bins)
    level[on] = np.searchsorted(used, bins)
    medians = [float(np.median(x[on][bins == b])) for b in used]
    return level, medians, True


def _plain(value: float) -> float | int:
    return int(value) if float(value).is_integer() else float(value)


def curve(trials: Trials, keys: np.ndarray, level: np.ndarray, values: list[float],
          sign: float) -> list[dict[str, Any]]:  # fmt: skip
    """One point per level: value, n, mean, std, min, max and best (see the module doc)."""
    n_keys = int(keys.max()) + 1 if keys.size else 0
    counts = np.bincount(keys, minlength=n_keys)
    means = np.bincount(keys, weights=trials.objective, minlength=n_keys) / np.maximum(counts, 1)
    out = []
    for i, value in enumerate(values):
        mask = level == i
        y = trials.objective[mask]
        if y.size == 0:
            continue
        configs = np.unique(keys[mask])
        best = float(means[configs][np.argmax(sign * means[configs])])
        out.append({
            "value": value, "n": int(y.size), "mean": float(y.mean()),
            "std": float(y.std(ddof=1)) if y.size > 1 else 0.0,
            "min": float(y.min()), "max": float(y.max()), "best": best,
        })  # fmt: skip
    return out


def judge(points: list[dict[str, Any]], sign: float, threshold: float) -> dict[str, Any]:
    """Where the ``best`` curve levels off (see the module doc): status, the value it
    levels at, the gain after it (to the best later value) and the rise before it."""
    best = np.array([sign * p["best"] for p in points])
    at = len(points) - 1
    for k in range(len(points) - 1):
        if best[k + 1 :].max() - best[k] < threshold:
            at = k
            break
    last = len(points) - 1
    if at == last:
        return {"status": "improving", "at": None, "gain": float(best[last] - best[last - 1]),
                "from": points[last - 1]["value"], "to": points[last]["value"],
                "rise": float(best[last] - best[0])}  # fmt: skip
    later = at + 1 + int(np.argmax(best[at + 1 :]))
    status = "flat" if at == 0 else "plateau"
    return {"status": status, "at": points[at]["value"], "gain": float(best[later] - best[at]),
            "from": points[at]["value"], "to": points[later]["value"],
            "rise": float(best[at] - best[0])}  # fmt: skip


def _why(scale: Scale, noise: float | None) -> str:
    if noise is not None and noise >= scale.min_gain:
        return f"within seed noise (±{scale.size(noise)})"
    return f"under the {scale.size(scale.min_gain)} threshold"


def sentence(path: str, verdict: dict[str, Any], scale: Scale, noise: float | None,
             first: Any) -> str:  # fmt: skip
    """The finding in words."""
    name, metric = short(path), scale.metric
    # Gains are "larger is better"; the words show the objective's own change (a loss falls).
    gain = scale.gain(scale.sign * verdict["gain"])
    span = f"{gain} from {short_text(verdict['from'])} to {short_text(verdict['to'])}"
    if verdict["status"] == "improving":
        return (f"{metric} still improves at the largest {name}: {span}; no plateau within "
                "the values tried")  # fmt: skip
    why = _why(scale, noise)
    if verdict["status"] == "flat":
        return (f"{metric} does not improve with {name} past {short_text(first)}: the best larger "
                f"value ({short_text(verdict['to'])}) changes it by {gain}, {why}")  # fmt: skip
    return (
        f"{metric} plateaus at {name} ≥ {short_text(verdict['at'])}: {span}, "
        f"{why} (after {scale.gain(scale.sign * verdict['rise'])} from "
        f"{short_text(first)})"
    )


def diminishing_returns(
    trials: Trials, params: Sequence[Parameter], keys: np.ndarray, scale: Scale,
    noise: float | None,
) -> list[dict[str, Any]]:  # fmt: skip
    """The curve and verdict of every numeric, non-seed parameter with 3 levels or more."""
    threshold = max(noise or 0.0, scale.min_gain)
    out = []
    for param in params:
        if param.kind != "numeric" or param.seed:
            continue
        level, values, binned = levels([p.get(param.path) for p in trials.params], param)
        points = curve(trials, keys, level, values, scale.sign)
        if len(points) < 3:
            continue
        verdict = judge(points, scale.sign, threshold)
        out.append({
            "param": param.path, "name": short(param.path), "log": param.log,
            "binned": binned, "curve": points, "threshold": threshold, **verdict,
            "text": sentence(param.path, verdict, scale, noise, points[0]["value"]),
        })  # fmt: skip
    return out
