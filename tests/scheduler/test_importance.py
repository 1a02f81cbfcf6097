"""Parameter importance by Optuna's fANOVA and PED-ANOVA on synthetic results: a parameter
that does not affect the objective comes out lowest. Pure logic: an in-memory study."""

from __future__ import annotations

import random
from typing import Any

import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from core.analysis.rows import dimensions
from scheduler import importance
from scheduler.importance import Known, known, param_importances, study_of

SPEC: dict[str, Any] = {
    "name": "importance",
    "dataset": {"name": "digits"},
    "model": {"hidden_units": [16, 32, 64, 128, 256, 512], "activation": ["relu", "tanh"]},
    "training": {"lr": {"loguniform": [0.0001, 0.1]}, "seed": [0, 1, 2, 3, 4]},
    "search": {"algorithm": "random", "trials": 300},
    "objective": {"metric": "val_accuracy", "direction": "maximize"},
}


def results(n: int, seed: int = 0) -> tuple[list[dict[str, Any]], list[float]]:
    """Width matters most, then activation and the learning rate; the seed is a dummy: it
    never enters the objective (only the noise does)."""
    rng = random.Random(seed)
    params, values = [], []
    for _ in range(n):
        flat = {
            "model.hidden_units": rng.choice(SPEC["model"]["hidden_units"]),
            "model.activation": rng.choice(["relu", "tanh"]),
            "training.lr": 10 ** rng.uniform(-4, -1),
            "training.seed": rng.randrange(5),
        }
        value = 0.95 - 0.25 * 16 / flat["model.hidden_units"]
        value -= 0.03 * (flat["training.lr"] < 0.001)
        value -= 0.05 * (flat["model.activation"] == "tanh")
        params.append(flat)
        values.append(value + rng.gauss(0, 0.002))
    return params, values


def test_a_parameter_that_does_nothing_comes_out_lowest() -> None:
    # 500 trials: the top 10% PED-ANOVA compares are then 50 (12 data seeds out of 12 rank
    # the dummy lowest; with 300 trials one in ten ranks the binary activation lower).
    params, values = results(500)
    found = param_importances(SPEC, params, values, "maximize")
    assert found["available"] and found["trials"] == 500 and not found["sampled"]
    for name in ("fanova", "ped_anova"):
        shares = found[name]
        assert set(shares) == set(params[0])
        assert sum(shares.values()) == pytest.approx(1.0)
        ranked = sorted(shares, key=shares.get)
        assert ranked[0] == "training.seed", (name, shares)
    # fANOVA (variance explained) puts width first; PED-ANOVA weighs what the best share
    assert max(found["fanova"], key=found["fanova"].get) == "model.hidden_units"


def test_each_evaluator_gets_the_distributions_it_can_use() -> None:
    dims = dimensions(SPEC)
    widths, lr, activation = (dims[p] for p in ("model.hidden_units", "training.lr",
                                                "model.activation"))  # fmt: skip
    # PED-ANOVA: the spec's own, as the samplers ask them
    assert known(widths, [16, 512, 64], "ped_anova") == Known(
        CategoricalDistribution((16, 32, 64, 128, 256, 512))
    )
    assert known(lr, [0.001, 0.01], "ped_anova") == Known(FloatDistribution(1e-4, 0.1, log=True))
    # fANOVA: numbers ordered over the values taken (log past two decades), one column each
    assert known(widths, [16, 512, 64], "fanova") == Known(IntDistribution(16, 512))
    assert known(None, [1, 100, 7], "fanova") == Known(IntDistribution(1, 100, log=True))
    assert known(activation, ["tanh", "relu"], "fanova") == Known(
        CategoricalDistribution(("relu", "tanh"))
    )
    many = [f"c{i}" for i in range(13)]
    assert known(None, many, "fanova") == Known(
        IntDistribution(0, 12), codes={c: i for i, c in enumerate(sorted(many))}
    )
    assert known(activation, ["relu", "relu"], "fanova") is None
    # not in the spec: a list value (per-layer widths) is a category by its JSON text
    layers = known(None, [[64, 32], [128]], "ped_anova")
    assert layers == Known(CategoricalDistribution(("[128]", "[64, 32]")), json_labels=True)
    study = study_of({}, [{"m.w": [64, 32]}, {"m.w": [128]}], [0.5, 0.6], "maximize")
    assert [t.params for t in study.trials] == [{"m.w": "[64, 32]"}, {"m.w": "[128]"}]
    # a value outside the spec's distribution leaves its trial out
    study = study_of(SPEC, [{"model.hidden_units": 16}, {"model.hidden_units": 48},
                            {"model.hidden_units": 32}], [0.5, 0.6, 0.7], "maximize")  # fmt: skip
    assert [t.value for t in study.trials] == [0.5, 0.7]


def test_a_large_sweep_is_sampled_the_same_way_every_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(importance, "MAX_TRIALS", 100)
    params, values = results(200, seed=1)
    first = param_importances(SPEC, params, values, "maximize")
    assert first["trials"] == 100 and first["sampled"]
    assert param_importances(SPEC, params, values, "maximize") == first
