"""A stored sweep's search and pruning settings as readers show them
(`core.spec.search_settings`)."""

from __future__ import annotations

from core.spec.search_settings import describe, pruning_settings, search_settings


def test_an_old_sweep_is_a_grid_without_pruning() -> None:
    old = {"spec": {"name": "x"}, "objective": {"metric": "val_loss"}}
    assert search_settings(old) == {"algorithm": "grid", "trials": None, "parallelism": None,
                                    "seed": 0, "options": {}}
    assert pruning_settings(old) == {"algorithm": "none", "metric": "val_loss", "options": {}}
    assert describe(search_settings(old), pruning_settings(old), 360) == (
        "Grid · 360 trials · no pruning")
    assert search_settings({})["algorithm"] == "grid"
    assert pruning_settings({"spec": {"pruning": "asha"}})["algorithm"] == "none"


def test_options_are_the_keys_beside_the_settings() -> None:
    sweep = {
        "objective": {"metric": "val_accuracy"},
        "spec": {
            "search": {"algorithm": "tpe", "trials": 40, "parallelism": 4, "seed": 3,
                       "multivariate": True, "n_startup_trials": 5, "group": None},
            "pruning": {"algorithm": "asha", "min_resource": 2, "options": {"reduction_factor": 3}},
        },
    }
    search, pruning = search_settings(sweep), pruning_settings(sweep)
    assert search == {"algorithm": "tpe", "trials": 40, "parallelism": 4, "seed": 3,
                      "options": {"multivariate": True, "n_startup_trials": 5}}
    assert pruning == {"algorithm": "asha", "metric": "val_accuracy",
                       "options": {"min_resource": 2, "reduction_factor": 3}}
    assert describe(search, pruning, 40) == "TPE · 40 trials · parallelism 4 · pruner ASHA"
    assert describe({**search, "algorithm": "cmaes", "trials": 1, "parallelism": None},
                    {**pruning, "algorithm": "patient"}, 1) == "CMA-ES · 1 trial · pruner patient"
