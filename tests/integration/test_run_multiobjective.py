"""`sweepstack run` of a multi-objective TPE sweep with a constraint (#31), on real workers:
exactly `search.trials` trials, every objective and the constraint's verdict stored per
trial, and `sweepstack front` reading the front back."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from core.store.records import flatten_params
from tests.integration.stack import ROOT
from tests.integration.test_run import SWEEPSTACK, clean_env, read_trials, run_json
from tests.integration.test_run_search import mcleod_tpe

pytestmark = pytest.mark.integration


def test_a_multi_objective_tpe_run_stores_every_objective(tmp_path: Path) -> None:
    spec = mcleod_tpe(tmp_path, trials=10)
    doc = yaml.safe_load(spec.read_text())
    doc.pop("objective", None)
    doc["objectives"] = [{"metric": "val_accuracy", "direction": "maximize"},
                         {"metric": "param_count", "direction": "minimize"},
                         {"metric": "macs", "direction": "minimize"}]  # fmt: skip
    doc["constraints"] = ["param_count <= 20000"]
    spec.write_text(yaml.safe_dump(doc))
    data = tmp_path / "data"
    env = clean_env(tmp_path)
    summary = run_json(env, str(spec), "--data", str(data))
    assert sum(summary["counts"].values()) == 10 and summary["counts"]["complete"] == 10
    trials = read_trials(data, summary["sweep_id"])
    assert len(trials) == 10
    assert len({repr(sorted(flatten_params(t["params"]).items())) for t in trials.values()}) == 10
    for trial in trials.values():
        accuracy, params, macs = trial["objectives"]
        assert accuracy == trial["objective"] and params == trial["param_count"]
        assert macs == trial["macs"] and 0 < macs < params  # weights without the biases
        assert trial["feasible"] is (params <= 20000)
        assert trial["constraints"] == [params - 20000]
    shown = subprocess.run(
        [*SWEEPSTACK, "front", summary["sweep_id"], "--data", str(data), "--json"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    front = json.loads(shown.stdout)
    feasible = {t["_id"] for t in trials.values() if t["feasible"]}
    assert front["size"] >= 1 and {t["id"] for t in front["trials"]} <= feasible
