"""A multi-objective, constrained search through the session's ask-and-tell (#31): the study's
directions, each sampler that takes several objectives, the constraints as Optuna reads
them, and a rebuild from stored records that asks no point twice."""

from __future__ import annotations

from typing import Any

import pytest

from core.spec.sweep import load_spec
from scheduler.expand import canonical
from scheduler.search_session import Record, SearchSession

SPEC: dict[str, Any] = {
    "name": "mo-search",
    "dataset": {"name": "digits"},
    "model": {"hidden_units": {"int": [4, 64]}, "hidden_layers": [1, 2, 3]},
    "training": {"epochs": 1},
    "objectives": [{"metric": "val_accuracy", "direction": "max"}, {"metric": "param_count"}],
    "constraints": ["param_count <= 3000"],
}


def _result(params: dict[str, Any]) -> tuple[float, float]:
    width = params["model.hidden_units"] * params["model.hidden_layers"]
    return 1 - 1 / (1 + width), 64.0 * width


@pytest.mark.parametrize("algorithm", ["tpe", "nsga2", "nsga3", "gp", "qmc", "random"])
def test_each_sampler_searches_several_objectives(algorithm: str) -> None:
    spec = load_spec({**SPEC, "search": {"algorithm": algorithm, "trials": 12}})
    session = SearchSession(spec)
    assert [d.name for d in session.study.directions] == ["MAXIMIZE", "MINIMIZE"]
    for _ in range(12):
        (asked,) = session.ask(1)
        accuracy, params = _result(asked.params)
        session.tell(asked.number, [accuracy, params], "complete", [params - 3000])
    complete = [t for t in session.study.trials if t.state.name == "COMPLETE"]
    assert len(complete) == 12 and all(len(t.values) == 2 for t in complete)
    assert all(t.constraints == {"param_count <= 3000": t.values[1] - 3000} for t in complete)
    assert session.ask(1) == []  # the budget is spent


def test_a_missing_value_fails_the_trial_and_unmeasured_constraints_are_infinite() -> None:
    spec = load_spec({**SPEC, "search": {"algorithm": "tpe", "trials": 3}})
    session = SearchSession(spec)
    one, two = session.ask(2)
    session.tell(one.number, [0.5, None], "complete", [None])
    session.tell(two.number, [0.5, 10.0], "complete", [None])
    trials = session.study.trials
    assert trials[one.number].state.name == "FAIL"
    assert trials[two.number].constraints == {"param_count <= 3000": float("inf")}


def test_a_rebuilt_search_asks_what_the_first_would_have_and_no_point_twice() -> None:
    spec = load_spec({**SPEC, "search": {"algorithm": "tpe", "trials": 20, "n_startup_trials": 4}})
    first = SearchSession(spec)
    records = []
    for _ in range(10):
        (asked,) = first.ask(1)
        accuracy, params = _result(asked.params)
        first.tell(asked.number, [accuracy, params], "complete", [params - 3000])
        records.append(Record(asked.number, asked.params, "complete", accuracy,
                              system_attrs=asked.system_attrs, values=[accuracy, params],
                              constraints=[params - 3000]))  # fmt: skip
    following = [a.key for a in first.ask(3)]
    again = SearchSession(spec)
    again.rebuild(records)
    keys = [a.key for a in again.ask(3)]
    assert keys == following
    stored = {canonical(r.params) for r in records}
    assert len(set(keys)) == 3 and not set(keys) & stored
    rebuilt = [t for t in again.study.trials if t.state.name == "COMPLETE"]
    assert [t.values for t in rebuilt] == [r.values for r in records]
    assert all(t.constraints for t in rebuilt)


def test_a_rebuilt_search_with_pruned_trials_asks_as_the_first_did() -> None:
    """Pruned trials come back without reports (the live study never had any: its pruner
    ranks the objectives itself); with them, TPE asked the single direction the study has
    not got and the rebuilt scheduler could ask nothing."""
    asha = {"algorithm": "asha", "min_resource": 1, "reduction_factor": 3}
    search = {"algorithm": "tpe", "trials": 20, "n_startup_trials": 4}
    spec = load_spec({**SPEC, "search": search, "training": {"epochs": 4}, "pruning": asha})
    first = SearchSession(spec)
    records = []
    for i in range(8):
        (asked,) = first.ask(1)
        accuracy, params = _result(asked.params)
        if i % 2:
            first.tell(asked.number, None, "pruned", [params - 3000])
            records.append(Record(asked.number, asked.params, "pruned", None,
                                  epochs={1: accuracy}, system_attrs=asked.system_attrs,
                                  constraints=[params - 3000]))  # fmt: skip
        else:
            first.tell(asked.number, [accuracy, params], "complete", [params - 3000])
            records.append(Record(asked.number, asked.params, "complete", accuracy,
                                  system_attrs=asked.system_attrs, values=[accuracy, params],
                                  constraints=[params - 3000]))  # fmt: skip
    following = [a.key for a in first.ask(2)]
    again = SearchSession(spec)
    again.rebuild(records)
    assert [a.key for a in again.ask(2)] == following
