"""Cost laws: training time, parameter count and time per epoch against network shape.

**Worker speed.** Trials that ran on different machines are not timed alike, so times are
first put on one machine's scale: the *reference* is the worker that finished the most
trials; for every other worker, each configuration it shares with the reference (same
parameters but the seeds) gives the ratio of the median times of the two, and the
worker's factor is the median of those ratios (at least `MIN_SHARED` configurations;
otherwise it is left as measured, and said so). A trial's normalised time is its time
divided by its worker's factor: what it would have taken on the reference. Median ratios
on shared configurations are robust to the odd slow trial and need no model of the cost.

**Fits.** Each cost is fitted against depth (``model.hidden_layers``), width
(``model.hidden_units``) and parameter count, wherever the predictor takes 3 values or
more, on the mean cost at each value (over every other parameter and seed) when it takes
at most `MAX_MEANS` values, else on the trials themselves. Two forms, both by numpy
least squares: linear, ``y = a + b x``, and a power law, ``y = c x^k`` (fitted on the
logarithms). R² is measured on ``y`` for both, so they compare; the power law is chosen
only when its R² is better by more than `POWER_MARGIN` (a line is easier to read), and a
best R² under `MIN_R2` is no law at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from core.analysis.rows import Trials

#: A worker's factor needs this many configurations shared with the reference.
MIN_SHARED = 3
#: Fit on the mean per value up to this many distinct values, else on the points.
MAX_MEANS = 50
#: The power law must beat the line's R² by this much to be chosen.
POWER_MARGIN = 0.01
#: Below this R² no law is stated.
MIN_R2 = 0.5

#: Costs: key -> (what it is called in words, its unit).
TARGETS = {
    "train_seconds": ("train time", "s"),
    "seconds_per_epoch": ("time per epoch", "s"),
    "param_count": ("parameter count", "parameters"),
}
#: Predictors: key -> (the name the findings use, the unit of one step).
PREDICTORS = {
    "hidden_layers": ("hidden_layers", "layer"),
    "hidden_units": ("hidden_units", "unit"),
    "param_count": ("param_count", "1,000 parameters"),
}


def worker_factors(trials: Trials, keys: np.ndarray) -> dict[str, Any]:
    """Each worker's speed factor against the reference worker (see the module doc)."""
    named = [w or "unknown" for w in trials.worker]
    timed = np.isfinite(trials.seconds) & (trials.seconds > 0)
    names = sorted({n for n, ok in zip(named, timed, strict=True) if ok})
    out: dict[str, Any] = {"reference": None, "applied": False, "workers": []}
    if not names:
        return out
    by_worker = {n: np.array([w == n for w in named]) & timed for n in names}
    reference = max(names, key=lambda n: (int(by_worker[n].sum()), n))
    out["reference"] = reference

    def medians(mask: np.ndarray) -> dict[int, float]:
        return group_medians(keys[mask], trials.seconds[mask])

    ref = medians(by_worker[reference])
    for name in names:
        entry: dict[str, Any] = {
            "name": name,
            "trials": int(by_worker[name].sum()),
            "shared": 0,
            "factor": 1.0,
            "normalised": True,
        }
        if name != reference:
            own = medians(by_worker[name])
            ratios = [own[k] / ref[k] for k in own.keys() & ref.keys() if ref[k] > 0]
            entry["shared"] = len(ratios)
            if len(ratios) >= MIN_SHARED:
                entry["factor"] = float(np.median(ratios))
                out["applied"] = True
            else:
                entry["normalised"] = False
        else:
            entry["shared"] = len(ref)
        out["workers"].append(entry)
    return out


def group_medians(keys: np.ndarray, values: np.ndarray) -> dict[int, float]:
    """The median of `values` per key, vectorised (a sweep has thousands of keys)."""
    if keys.size == 0:
        return {}
    order = np.lexsort((values, keys))
    k, v = keys[order], values[order]
    starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    ends = np.r_[starts[1:], k.size]
    middle = (v[(starts + ends - 1) // 2] + v[(starts + ends) // 2]) / 2
    return dict(zip(k[starts].tolist(), middle.tolist(), strict=True))


def normalised_seconds(trials: Trials, factors: dict[str, Any]) -> np.ndarray:
    """Each trial's training seconds on the reference worker's scale."""
    by_name = {w["name"]: w["factor"] for w in factors["workers"]}
    divisor = np.array([by_name.get(w or "unknown", 1.0) for w in trials.worker], dtype=float)
    return trials.seconds / divisor if len(trials) else trials.seconds


def _r2(y: np.ndarray, fitted: np.ndarray) -> float:
    total = float(((y - y.mean()) ** 2).sum())
    if total == 0.0:
        return 1.0 if float(((y - fitted) ** 2).sum()) == 0.0 else 0.0
    return 1.0 - float(((y - fitted) ** 2).sum()) / total


def fit(x: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    """Linear and power-law least-squares fits of `y` on `x`, their R², the chosen form."""
    design = np.column_stack([np.ones_like(x), x])
    (a, b), *_ = np.linalg.lstsq(design, y, rcond=None)
    out: dict[str, Any] = {
        "linear": {"intercept": float(a), "slope": float(b), "r2": _r2(y, a + b * x)},
        "power": None,
    }
    if bool((x > 0).all() and (y > 0).all()):
        logs = np.column_stack([np.ones_like(x), np.log(x)])
        (log_c, k), *_ = np.linalg.lstsq(logs, np.log(y), rcond=None)
        c = float(np.exp(log_c))
        out["power"] = {"coefficient": c, "exponent": float(k), "r2": _r2(y, c * x**k)}
    power = out["power"]
    chosen = "linear"
    if power is not None and power["r2"] > out["linear"]["r2"] + POWER_MARGIN:
        chosen = "power"
    out["chosen"] = chosen
    out["r2"] = out[chosen]["r2"]
    return out


def _points(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """(x, y, n) to fit: the mean y per distinct x when there are few, else the points."""
    distinct, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    if distinct.size <= MAX_MEANS:
        means = np.bincount(inverse, weights=y) / counts
        return distinct, means, counts, True
    return x, y, np.ones_like(x, dtype=np.int64), False


def _step(value: float, unit: str) -> str:
    return f"{value:.3g} {unit}"


def sentence(target: str, predictor: str, result: dict[str, Any]) -> str:
    """The law in words: "train time grows linearly with hidden_layers: 0.41 s per layer,
    R² 0.97"."""
    what, unit = TARGETS[target]
    name, step = PREDICTORS[predictor]
    r2 = result["r2"]
    if r2 < MIN_R2:
        return (f"no clear law for {what} against {name} (best fit {result['chosen']}, "
                f"R² {r2:.2f})")  # fmt: skip
    if result["chosen"] == "power":
        k = result["power"]["exponent"]
        return f"{what} grows as {name}^{k:.2f} (power law, R² {r2:.2f})"
    slope = result["linear"]["slope"]
    if predictor == "param_count":
        slope *= 1000
    verb = "grows" if slope >= 0 else "falls"
    per = _step(abs(slope), unit)
    return f"{what} {verb} linearly with {name}: {per} per {step}, R² {r2:.2f}"


def laws(trials: Trials, seconds: np.ndarray) -> list[dict[str, Any]]:
    """Every cost against every predictor that takes 3 values or more (not itself)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        per_epoch = np.where(trials.epochs > 0, seconds / trials.epochs, np.nan)
    costs = {"train_seconds": seconds, "seconds_per_epoch": per_epoch,
             "param_count": trials.param_count}  # fmt: skip
    predictors = {"hidden_layers": trials.depth, "hidden_units": trials.width,
                  "param_count": trials.param_count}  # fmt: skip
    out = []
    for target, y_all in costs.items():
        for predictor, x_all in predictors.items():
            if predictor == target:
                continue
            ok = np.isfinite(x_all) & np.isfinite(y_all)
            if np.unique(x_all[ok]).size < 3:
                continue
            x, y, n, means = _points(x_all[ok], y_all[ok])
            result = fit(x, y)
            out.append({
                "target": target, "against": predictor, **result, "on_means": means,
                "trials": int(ok.sum()), "text": sentence(target, predictor, result),
                "points": _sampled(x, y, n),
            })  # fmt: skip
    return out


def _sampled(x: np.ndarray, y: np.ndarray, n: np.ndarray, cap: int = 400) -> list[list[float]]:
    """At most `cap` of the fitted points ([x, y, n]), evenly spread, for the figures."""
    take = np.arange(x.size) if x.size <= cap else np.linspace(0, x.size - 1, cap).astype(int)
    return [[float(x[i]), float(y[i]), int(n[i])] for i in take]


def headline(found: Sequence[dict[str, Any]]) -> list[str]:
    """The laws worth stating first: train time against depth and width, when clear."""
    wanted = [("train_seconds", "hidden_layers"), ("train_seconds", "hidden_units"),
              ("param_count", "hidden_units")]  # fmt: skip
    by_pair = {(law["target"], law["against"]): law for law in found}
    return [by_pair[p]["text"] for p in wanted if p in by_pair and by_pair[p]["r2"] >= MIN_R2]
