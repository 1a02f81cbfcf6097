"""`sweepstack run` of search and pruning sweeps: TPE fed in-process to its budget, a killed
TPE run resumed without asking a point twice, and Optuna's pruner stopping trials end to
end. The run helpers are test_run's."""

from __future__ import annotations

from pathlib import Path

import pymongo
import pytest
import yaml

from core.store.records import flatten_params
from tests.integration.stack import ROOT, wait_for
from tests.integration.test_run import (
    clean_env,
    processes_using,
    read_trials,
    run_json,
    run_then_kill,
)
from tests.services import SecantusProcess

pytestmark = pytest.mark.integration


def mcleod_tpe(tmp_path: Path, **search: int) -> Path:
    """configs/mcleod-tpe.yaml with one epoch on the CPU (and these search settings)."""
    doc = yaml.safe_load((ROOT / "configs" / "mcleod-tpe.yaml").read_text())
    assert doc["search"] == {"algorithm": "tpe", "trials": 24, "parallelism": 4, "seed": 0}
    doc["training"] = {**doc["training"], "epochs": 1}
    doc["execution"] = {**doc["execution"], "device": "cpu"}
    doc["search"].update(search)
    spec = tmp_path / "mcleod-tpe.yaml"
    spec.write_text(yaml.safe_dump(doc))
    return spec


def distinct_points(trials: dict[str, dict]) -> int:
    return len({repr(sorted(flatten_params(t["params"]).items())) for t in trials.values()})


def test_run_a_tpe_sweep_feeds_it_to_its_budget(tmp_path: Path) -> None:
    """configs/mcleod-tpe.yaml with one epoch: `run` feeds TPE in-process to 24 trials,
    never more than 4 units in flight (each asked after some results came back; a unit is
    one point, or the points asked to train fused with it: `scheduler.feed`)."""
    data = tmp_path / "data"
    spec = mcleod_tpe(tmp_path)
    summary = run_json(clean_env(tmp_path), str(spec), "--data", str(data))
    assert summary["counts"]["complete"] == 24 and sum(summary["counts"].values()) == 24
    trials = read_trials(data, summary["sweep_id"])
    assert len(trials) == 24 and all(t["state"] == "complete" for t in trials.values())
    # Distinct Optuna numbers (not 0-23: a point TPE draws twice is dropped, its number too).
    assert len({t["optuna"]["number"] for t in trials.values()}) == 24
    assert distinct_points(trials) == 24
    # At most 4 units in flight: the unit created k-th (k >= 4) waited for k - 3 to end.
    units: dict[int, list[dict]] = {}
    for trial in trials.values():
        units.setdefault(trial["optuna"]["unit"], []).append(trial)
    queued = sorted(min(t["queued_at"] for t in unit) for unit in units.values())
    ended = sorted(max(t["finished_at"] for t in unit) for unit in units.values())
    for k in range(4, len(queued)):
        assert ended[k - 4] <= queued[k], k
    assert processes_using(str(data)) == []


def test_a_killed_tpe_run_resumes_to_its_budget_without_asking_twice(tmp_path: Path) -> None:
    """kill -9 of `run` mid-sweep leaves planned trials and a lease nobody gives back;
    `run --resume` takes the lease once it expires, rebuilds the study and feeds the rest."""
    data = tmp_path / "data"
    spec = mcleod_tpe(tmp_path, parallelism=2)
    env = clean_env(tmp_path)
    sweep_id = run_then_kill(env, spec, data, 6)
    wait_for(lambda: processes_using(str(data)) == [], 30, "every child to exit")
    before = read_trials(data, sweep_id)
    assert 6 <= len(before) < 24
    done = {k: v for k, v in before.items() if v["state"] == "complete"}
    counts = run_json(env, "--resume", sweep_id, "--data", str(data))["counts"]
    after = read_trials(data, sweep_id)
    assert counts["complete"] == 24, counts
    assert len(after) == 24 and all(t["state"] == "complete" for t in after.values())
    assert distinct_points(after) == 24
    assert len({t["optuna"]["number"] for t in after.values()}) == 24
    for trial_id, doc in done.items():
        assert after[trial_id]["finished_at"] == doc["finished_at"]
        assert after[trial_id]["params"] == doc["params"]
    assert processes_using(str(data)) == []


def test_a_pruning_run_stops_the_hopeless_trials_within_an_epoch(tmp_path: Path) -> None:
    """The whole path, in `run`: Optuna's threshold pruner (val_accuracy below 0.5 after 2
    epochs), which judges a trial on its own reports alone, runs in the worker that trains
    it (`workers.pruning`) and stops the trial at the epoch it decided, as an Optuna script
    calling ``trial.should_prune()`` would: epoch 2; no prune request goes through the
    store. Trials with a learning rate too small to learn are pruned, the others complete
    every epoch."""
    data = tmp_path / "data"
    doc = {
        "name": "pruning-run",
        "dataset": {"name": "digits"},
        "model": {"hidden_layers": 1, "hidden_units": [16, 32], "activation": "relu"},
        "training": {
            "optimizer": "sgd",
            "lr": [0.1, 0.00001],
            "batch_size": 8,
            "epochs": 25,
            "seed": 0,
        },
        "execution": {"device": "cpu", "time_limit": 300},
        "objective": {"metric": "val_accuracy", "direction": "maximize"},
        "pruning": {"algorithm": "threshold", "lower": 0.5, "n_warmup_steps": 2},
    }
    spec = tmp_path / "pruning.yaml"
    spec.write_text(yaml.safe_dump(doc))
    summary = run_json(clean_env(tmp_path), str(spec), "--data", str(data))
    assert summary["counts"]["pruned"] == 2 and summary["counts"]["complete"] == 2, summary
    trials = read_trials(data, summary["sweep_id"])
    for trial in trials.values():
        lr = trial["params"]["training"]["lr"]
        if lr < 0.001:
            assert trial["state"] == "pruned", trial["_id"]
            assert trial["pruned_epoch"] == 2, trial["pruned_epoch"]
            assert "prune_requested" not in trial
        else:
            assert trial["state"] == "complete", trial["_id"]
            assert "prune_requested" not in trial
    server = SecantusProcess(data / "db")
    try:
        client = pymongo.MongoClient(server.url, serverSelectionTimeoutMS=10000)
        for trial in trials.values():
            rows = list(client["sweepstack"]["metrics"].find({"trial_id": trial["_id"]}))
            epochs = sorted(r["epoch"] for r in rows)
            assert epochs == sorted(set(epochs)), "an epoch row written twice"
            last = trial.get("pruned_epoch", 25)
            assert epochs[-1] == last, (trial["_id"], epochs[-1], last)
        client.close()
    finally:
        server.stop()
    assert processes_using(str(data)) == []
