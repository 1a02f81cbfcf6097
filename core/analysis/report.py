"""The whole analysis of one sweep, from its sweep document and trial rows: one JSON value.

`analyse` puts together the seed noise, the diminishing returns of every numeric
parameter (`core.analysis.returns`), the cost laws after worker-speed normalisation
(`core.analysis.costs`), the accuracy-cost fronts (`core.analysis.front`) and, when an
`Importance` function is given, the parameter importances; ``findings`` states the main
results in sentences, most telling first. The value holds only JSON types (no NaN), so the
API, the dashboard and the CLI serve it as it is.

Importance needs Optuna, which only ``scheduler`` may import (`tests/test_layers.py`), so
it comes in as a function (`scheduler.importance.param_importances`): the entry points
that may import the scheduler (CLI, API, and the web composition for the dashboard) pass
it; without it the section says it was not computed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from core.analysis.costs import headline, laws, normalised_seconds, worker_factors
from core.analysis.front import fronts, searched_front
from core.analysis.returns import diminishing_returns, seed_noise
from core.analysis.rows import Trials, complete_trials, config_keys, parameters, short
from core.analysis.scale import Scale, scale_of
from core.spec.objectives import Goals
from core.states import TrialState

#: Bumped whenever the analysis would answer differently for the same trials: stored
#: analyses of another version are computed again.
ANALYSIS_VERSION = "3"


class Importance(Protocol):
    """Parameter importances of complete trials: ``{"fanova": {path: share}, "ped_anova":
    {path: share}, "trials": n, ...}`` from the stored spec document, each trial's flat
    params and objective, and the objective's direction."""

    def __call__(
        self,
        spec_document: Mapping[str, Any],
        params: Sequence[Mapping[str, Any]],
        values: Sequence[float],
        direction: str,
    ) -> dict[str, Any]: ...


def jsonable(value: Any) -> Any:
    """`value` with only JSON's types: numpy scalars as Python's, NaN and infinities None."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _sweep_part(sweep: Mapping[str, Any], trials: Trials) -> dict[str, Any]:
    counts = dict(sweep.get("counts") or {})
    live = counts.get(TrialState.QUEUED.value, 0) + counts.get(TrialState.RUNNING.value, 0)
    objective = sweep.get("objective") or {}
    return {
        "id": sweep.get("_id"), "name": sweep.get("name"),
        "metric": objective.get("metric", "objective"),
        "direction": objective.get("direction", "maximize"),
        "trial_count": sweep.get("trial_count"), "counts": counts,
        "analysed": len(trials), "live": live > 0,
    }  # fmt: skip


def _importance(importance: Importance | None, sweep: Mapping[str, Any], trials: Trials,
                direction: str) -> dict[str, Any]:  # fmt: skip
    if importance is None:
        return {"available": False, "note": "not computed here (needs the scheduler's Optuna: "
                "ask the API or `sweepstack report`)"}  # fmt: skip
    if len(trials) < 2:
        return {"available": False, "note": "needs at least two complete trials"}
    values = trials.objective.tolist()
    return importance(sweep.get("spec") or {}, trials.params, values, direction)


def _importance_text(section: Mapping[str, Any]) -> list[str]:
    texts = []
    for key, name in (("fanova", "fANOVA"), ("ped_anova", "PED-ANOVA")):
        shares = section.get(key) or {}
        if len(shares) < 2:
            continue
        ranked = sorted(shares.items(), key=lambda kv: -kv[1])
        shown = ranked if len(ranked) <= 5 else [*ranked[:3], ranked[-1]]
        parts = ", ".join(f"{short(p)} {100 * s:.0f}%" for p, s in shown[:-1])
        least = f"{short(shown[-1][0])} {100 * shown[-1][1]:.0f}%"
        texts.append(f"{name} importance: {parts}{', …' if len(shown) < len(ranked) else ''}; "
                     f"least: {least}")  # fmt: skip
    return texts


#: Workers whose speed differs from the reference's by less than this are not mentioned.
SAME_SPEED = 0.05


def _workers_text(factors: Mapping[str, Any]) -> list[str]:
    others = [w for w in factors["workers"] if w["name"] != factors["reference"]]
    differ = [w for w in others if w["normalised"] and abs(w["factor"] - 1) >= SAME_SPEED]
    if not factors.get("applied") or not differ:
        return []
    parts = [f"{w['name']} {w['factor']:.2f}x" for w in differ]
    return [f"training times are on {factors['reference']}'s scale (median time ratio on "
            f"shared configurations: {', '.join(parts)})"]  # fmt: skip


def findings(out: Mapping[str, Any], scale: Scale) -> list[str]:
    """The results in sentences: plateaus first, then the laws, importance, the front."""
    returns = out["returns"]
    order = {"plateau": 0, "improving": 1, "flat": 2}
    texts = [r["text"] for r in sorted(returns, key=lambda r: order[r["status"]])]
    texts += headline(out["costs"]["laws"])
    texts += _importance_text(out["importance"])
    texts += out["front"]["text"][:2]
    texts += _workers_text(out["costs"]["workers"])
    if out["costs"]["fused"]:
        texts.append(f"{out['costs']['fused']:,} trials trained fused in groups have no time of "
                     "their own and are left out of the time laws and the time front")  # fmt: skip
    return texts


def analyse(
    sweep: Mapping[str, Any],
    docs: Iterable[Mapping[str, Any]],
    *,
    importance: Importance | None = None,
    min_gain: float | None = None,
) -> dict[str, Any]:
    """The analysis of a sweep (its document) from its trial rows (`rows.FIELDS`). A sweep
    that searched several objectives gets the front of those (`searched_front`), not the
    guessed accuracy-cost fronts."""
    docs = list(docs)
    goals = Goals.of(sweep)
    trials = complete_trials(docs)
    part = _sweep_part(sweep, trials)
    scale = scale_of(part["metric"], part["direction"], trials.objective, min_gain)
    params = parameters(trials, sweep.get("spec") or {})
    keys = config_keys(trials, params)
    noise = seed_noise(trials, keys)
    out: dict[str, Any] = {
        "sweep": part,
        "scale": {"fraction": scale.fraction, "min_gain": scale.min_gain,
                  "unit": "pp" if scale.fraction else scale.metric},
        "parameters": [{"path": p.path, "kind": p.kind, "log": p.log, "seed": p.seed}
                       for p in params],
        "noise": noise,
        "states": trials.counts,
    }  # fmt: skip
    if len(trials) == 0:
        out.update(returns=[], costs={"workers": worker_factors(trials, keys), "laws": [],
                                      "fused": 0},
                   importance={"available": False, "note": "no complete trial yet"},
                   front={"tolerance": scale.min_gain, "text": []},
                   findings=["no complete trial yet: nothing to analyse"])  # fmt: skip
        return jsonable(out)
    out["returns"] = diminishing_returns(trials, params, keys, scale, noise["std"])
    factors = worker_factors(trials, keys)
    seconds = normalised_seconds(trials, factors)
    out["costs"] = {"workers": factors, "laws": laws(trials, seconds), "fused": trials.fused}
    out["importance"] = _importance(importance, sweep, trials, part["direction"])
    shown = [p.path for p in params if not p.seed]
    if len(goals.objectives) > 1:
        out["front"] = searched_front(docs, goals, scale.min_gain, shown)
    else:
        out["front"] = fronts(trials, seconds, scale, scale.min_gain, shown)
    out["findings"] = findings(out, scale)
    return jsonable(out)
