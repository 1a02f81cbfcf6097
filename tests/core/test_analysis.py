"""The sweep analysis on synthetic results whose answer is known: a plateau, none, a linear
cost, a power law, a slow worker, a front. Pure logic: no store, no Optuna."""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from core.analysis import analyse
from core.analysis.costs import fit, worker_factors
from core.analysis.front import pareto
from core.analysis.rows import complete_trials, config_keys, parameters
from core.analysis.scale import scale_of

WIDTHS = [16, 32, 64, 128, 256, 512, 1024]
DEPTHS = [1, 2, 3, 4, 5]


def sweep_doc(metric: str = "val_accuracy", direction: str = "maximize",
              **space: Any) -> dict[str, Any]:  # fmt: skip
    spec = {"name": "synthetic", "dataset": {"name": "digits"},
            "model": {"hidden_units": WIDTHS, "hidden_layers": DEPTHS},
            "training": {"seed": [0, 1, 2]},
            "objective": {"metric": metric, "direction": direction}}  # fmt: skip
    for path, values in space.items():
        section, key = path.split(".")
        spec.setdefault(section, {})[key] = values
    return {"_id": "a1b2c3d4e5f6", "name": "synthetic", "spec": spec, "trial_count": 0,
            "objective": {"metric": metric, "direction": direction},
            "counts": {"complete": 0, "queued": 0, "running": 0}}  # fmt: skip


Outcome = Callable[[int, int, int, random.Random], float]


def trials(
    objective: Outcome,
    seconds: Outcome | None = None,
    workers: Callable[[int], str] | None = None,
    seeds: int = 3,
) -> list[dict[str, Any]]:
    """One complete trial per depth x width x seed."""
    rng = random.Random(7)
    docs = []
    for layers in DEPTHS:
        for units in WIDTHS:
            for seed in range(seeds):
                index = len(docs)
                time = seconds(layers, units, seed, rng) if seconds else 1.0
                docs.append({
                    "_id": f"a1b2c3d4e5f6-{index:016x}", "index": index, "state": "complete",
                    "params": {"model": {"hidden_units": units, "hidden_layers": layers},
                               "training": {"seed": seed}},
                    "objective": objective(layers, units, seed, rng), "train_seconds": time,
                    "param_count": 64 * units + (layers - 1) * units * units + 10 * units,
                    "worker": {"name": workers(index) if workers else "celery@w1"},
                    "progress": {"epoch": 10},
                    "config": {"model": {"hidden_units": units, "hidden_layers": layers},
                               "training": {"epochs": 10}},
                })  # fmt: skip
    return docs


def saturating(layers: int, units: int, seed: int, rng: random.Random) -> float:
    return 0.97 - 0.3 * math.exp(-units / 40) + rng.gauss(0, 0.002)


def returns_of(result: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for r in result["returns"] if r["name"] == name)


def test_a_known_plateau_is_found_and_stated() -> None:
    # 0.3 exp(-u/40): +1.2 pp from 128 to 1024, +0.05 pp from 256: plateau at 256.
    result = analyse(sweep_doc(), trials(saturating))
    units = returns_of(result, "hidden_units")
    assert units["status"] == "plateau" and units["at"] == 256
    assert units["text"].startswith("val_accuracy plateaus at hidden_units ≥ 256: +")
    assert "under the 0.5 pp threshold" in units["text"]
    assert [p["value"] for p in units["curve"]] == WIDTHS
    assert all(p["n"] == 15 for p in units["curve"])
    assert 0.0012 < result["noise"]["std"] < 0.0028  # the seeds' gauss(0, 0.002), 35 configs
    assert result["findings"][0] == units["text"]  # a plateau is the first finding
    # depth does nothing here: no gain past the first value
    assert returns_of(result, "hidden_layers")["status"] == "flat"
    json.dumps(result, allow_nan=False)


def test_no_plateau_where_there_is_none() -> None:
    def rising(layers: int, units: int, seed: int, rng: random.Random) -> float:
        return 0.5 + 0.00045 * units + rng.gauss(0, 0.002)

    units = returns_of(analyse(sweep_doc(), trials(rising)), "hidden_units")
    assert units["status"] == "improving" and units["at"] is None
    assert "no plateau within the values tried" in units["text"]
    assert "from 512 to 1024" in units["text"]


def test_seed_noise_above_the_threshold_sets_it() -> None:
    def noisy(layers: int, units: int, seed: int, rng: random.Random) -> float:
        return 0.9 - 0.3 * math.exp(-units / 40) + rng.gauss(0, 0.02)

    result = analyse(sweep_doc(), trials(noisy))
    units = returns_of(result, "hidden_units")
    assert units["threshold"] == pytest.approx(result["noise"]["std"])
    assert units["status"] == "plateau" and units["at"] <= 256
    assert re.search(r"within seed noise \(±[12]\.\d pp\)", units["text"]), units["text"]


def test_seeds_that_collapse_do_not_pass_for_noise() -> None:
    # As deep sigmoid nets do on the digits: one seed of some configurations stays at chance.
    def collapsing(layers: int, units: int, seed: int, rng: random.Random) -> float:
        if layers >= 3 and seed == 0 and units % 3 == 1:
            return 0.1
        return saturating(layers, units, seed, rng)

    result = analyse(sweep_doc(), trials(collapsing))
    assert 0.001 < result["noise"]["std"] < 0.004  # the seeds' gauss(0, 0.002), not the collapses
    units = returns_of(result, "hidden_units")
    assert units["status"] == "plateau" and units["at"] == 256, units["text"]


def test_a_minimised_loss_plateaus_too() -> None:
    def loss(layers: int, units: int, seed: int, rng: random.Random) -> float:
        return 0.1 + 2.0 * math.exp(-units / 40) + rng.gauss(0, 0.0005)

    result = analyse(sweep_doc("val_loss", "minimize"), trials(loss))
    units = returns_of(result, "hidden_units")
    assert not result["scale"]["fraction"]
    assert units["status"] == "plateau" and units["at"] in (256, 512)
    assert "val_loss plateaus at hidden_units" in units["text"] and ": -" in units["text"]


def test_a_known_linear_cost_is_found_with_its_slope() -> None:
    def seconds(layers: int, units: int, seed: int, rng: random.Random) -> float:
        return 0.3 + 0.41 * layers + rng.gauss(0, 0.02)

    result = analyse(sweep_doc(), trials(saturating, seconds))
    law = next(x for x in result["costs"]["laws"]
               if (x["target"], x["against"]) == ("train_seconds", "hidden_layers"))  # fmt: skip
    assert law["chosen"] == "linear" and law["on_means"]
    assert law["linear"]["slope"] == pytest.approx(0.41, abs=0.01)
    assert law["r2"] > 0.99
    assert re.fullmatch(
        r"train time grows linearly with hidden_layers: 0\.41\d? s per layer, "
        r"R² 1\.00",
        law["text"],
    ), law["text"]
    assert law["text"] in result["findings"]
    per_epoch = next(
        x
        for x in result["costs"]["laws"]
        if (x["target"], x["against"]) == ("seconds_per_epoch", "hidden_layers")
    )
    assert per_epoch["linear"]["slope"] == pytest.approx(0.041, abs=0.001)


def test_parameter_count_against_width_is_a_power_law() -> None:
    result = analyse(sweep_doc(), trials(saturating))
    law = next(x for x in result["costs"]["laws"]
               if (x["target"], x["against"]) == ("param_count", "hidden_units"))  # fmt: skip
    assert law["chosen"] == "power" and 1.5 < law["power"]["exponent"] < 2.0
    assert "parameter count grows as hidden_units^" in law["text"]
    exact = fit(np.array([1.0, 2, 4, 8]), 3 * np.array([1.0, 2, 4, 8]) ** 2)
    assert exact["chosen"] == "power"
    assert exact["power"]["exponent"] == pytest.approx(2.0)
    assert exact["power"]["coefficient"] == pytest.approx(3.0)


def test_a_slow_worker_is_normalised_by_its_median_ratio() -> None:
    def seconds(layers: int, units: int, seed: int, rng: random.Random) -> float:
        base = 0.3 + 0.41 * layers
        return base * (2.0 if seed == 2 else 1.0)  # seed 2 always runs on the slow worker

    docs = trials(saturating, seconds, workers=lambda i: "celery@slow" if i % 3 == 2
                  else "celery@fast")  # fmt: skip
    parsed = complete_trials(docs)
    keys = config_keys(parsed, parameters(parsed, sweep_doc()["spec"]))
    factors = worker_factors(parsed, keys)
    assert factors["reference"] == "celery@fast" and factors["applied"]
    slow = next(w for w in factors["workers"] if w["name"] == "celery@slow")
    assert slow["factor"] == pytest.approx(2.0) and slow["shared"] == 35
    result = analyse(sweep_doc(), docs)
    law = next(x for x in result["costs"]["laws"]
               if (x["target"], x["against"]) == ("train_seconds", "hidden_layers"))  # fmt: skip
    assert law["linear"]["slope"] == pytest.approx(0.41, abs=1e-6)
    assert any("celery@slow 2.00x" in text for text in result["findings"])


def test_trials_trained_fused_are_left_out_of_what_is_timed() -> None:
    def seconds(layers: int, units: int, seed: int, rng: random.Random) -> float:
        return 0.3 + 0.41 * layers

    docs = trials(saturating, seconds)
    for doc in docs:  # the narrow ones trained six at a time: their time is the group's
        if doc["params"]["model"]["hidden_units"] <= 64:
            doc.update(fused=6, train_seconds=9.0)
    result = analyse(sweep_doc(), docs)
    assert result["costs"]["fused"] == 45
    law = next(x for x in result["costs"]["laws"]
               if (x["target"], x["against"]) == ("train_seconds", "hidden_layers"))  # fmt: skip
    assert law["trials"] == 60 and law["linear"]["slope"] == pytest.approx(0.41)
    timed = result["front"]["train_seconds"]["trials"]
    assert all(t["params"]["model.hidden_units"] > 64 for t in timed)
    assert "45 trials trained fused in groups have no time of their own" in result["findings"][-1]


def test_the_front_and_the_smallest_network_near_the_best() -> None:
    cost = np.array([1.0, 2.0, 3.0, 4.0, 2.5, np.nan])
    good = np.array([0.5, 0.7, 0.69, 0.9, 0.8, 1.0])
    assert pareto(cost, good).tolist() == [0, 1, 4, 3]
    result = analyse(sweep_doc(), trials(saturating))
    front = result["front"]
    best = max(d["objective"] for d in trials(saturating))
    small = front["smallest"]
    assert best - small["objective"] <= 0.005 and small["behind"] <= 0.005
    near = [d for d in trials(saturating) if d["objective"] >= best - 0.005]
    assert small["param_count"] == min(d["param_count"] for d in near)
    assert front["text"][0].startswith("the smallest network within 0.5 pp of the best")
    costs = [t["cost"] for t in front["param_count"]["trials"]]
    values = [t["objective"] for t in front["param_count"]["trials"]]
    assert costs == sorted(costs) and values == sorted(values)


def test_a_multi_objective_sweep_states_the_front_of_its_objectives_not_guessed_costs() -> None:
    """#31: a sweep that searched val_accuracy against param_count, with a constraint, gets
    the front of those objectives over its feasible trials (the API's front), not the
    accuracy-cost fronts guessed for a single objective; the figure and the Markdown report
    show it."""
    from cli.report_files import markdown
    from core.analysis.figures import figures
    from core.analysis.pareto import front_rows
    from core.spec.objectives import Goals

    sweep = sweep_doc()
    sweep["objectives"] = [{"metric": "val_accuracy", "direction": "maximize"},
                           {"metric": "param_count", "direction": "minimize"}]  # fmt: skip
    sweep["constraints"] = [{"metric": "param_count", "op": "<=", "bound": 200000}]
    docs = trials(saturating)
    for d in docs:
        d["objectives"] = [d["objective"], d["param_count"]]
        d["feasible"] = d["param_count"] <= 200000
    result = analyse(sweep, docs)
    front = result["front"]
    assert "param_count" not in front and "train_seconds" not in front
    searched = front["searched"]
    expected = front_rows(docs, Goals.of(sweep))
    assert [t["index"] for t in searched["trials"]] == [t["index"] for t in expected["trials"]]
    assert searched["hypervolume"] == pytest.approx(expected["hypervolume"])
    assert searched["feasible"] == sum(d["feasible"] for d in docs) < len(docs)
    assert all(t["values"][1] <= 200000 for t in searched["trials"])
    assert len(searched["cloud"]) == searched["feasible"]
    text = front["text"][0]
    assert text.startswith(f"{searched['size']} of {searched['feasible']} complete feasible "
                           "trials are on the front of the objectives searched, val_accuracy "
                           "(max), param_count (min); hypervolume")  # fmt: skip
    assert front["text"][1].startswith("its ends: trial #")
    assert text in result["findings"]
    (figure,) = [f for f in figures(result) if f["group"] == "front"]
    assert figure["id"] == "front-searched"
    assert figure["figure"]["data"][1]["y"] == [t["values"][0] for t in searched["trials"]]
    report = markdown(result)
    assert "## Pareto front of the objectives searched" in report
    assert "| trial | val_accuracy | param_count | params |" in report
    top = searched["trials"][0]
    assert f"| #{top['index']} | {top['values'][0]:.4g} | {top['values'][1]:,.0f} |" in report


def test_a_sweep_without_complete_trials_says_so() -> None:
    docs = [{**d, "state": "failed", "objective": None} for d in trials(saturating)[:4]]
    result = analyse(sweep_doc(), docs)
    assert result["findings"] == ["no complete trial yet: nothing to analyse"]
    assert result["states"] == {"failed": 4} and result["returns"] == []


def test_the_default_threshold_follows_the_objective() -> None:
    accuracy = scale_of("val_accuracy", "maximize", np.array([0.5, 0.9]))
    assert accuracy.fraction and accuracy.min_gain == 0.005
    assert accuracy.gain(-0.0001) == "+0.0 pp" and accuracy.gain(0.0123) == "+1.2 pp"
    loss = scale_of("val_loss", "minimize", np.linspace(0.0, 2.0, 101))
    assert not loss.fraction and loss.min_gain == pytest.approx(0.005 * 1.8)
    assert loss.sign == -1.0
