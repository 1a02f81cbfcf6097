"""The dashboard's rows, computed from real store contents (trials run through the lifecycle).

The scenario (`scenario`): 16 trials of `SPEC`; 0-10 complete with known objectives,
11-13 failed, 14 running, 15 queued; trial i took i + 1 s on the fake clock.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from core.analysis.failures import failure_reasons
from core.spec.sweep import load_spec
from core.states import TrialState
from core.store.store import Store
from dashboard import data, figures, param_axes
from dashboard.detail import epoch_series, timings, trial_detail
from dashboard.timing import timing_rows
from dashboard.workers import ONLINE_SECONDS, inspect_workers, recent_activity, worker_rows
from tests.core import FakeClock, make_sweep, trial_ids
from tests.dashboard.conftest import Sweep

OBJECTIVES = {0: 0.80, 1: 0.82, 2: 0.85, 3: 0.75, 4: 0.90, 5: 0.88, 6: 0.91, 7: 0.93,
              8: 0.70, 9: 0.72, 10: 0.60}
ERRORS = {11: "NaN loss at epoch 2\nTraceback: ...", 12: "out of memory",
          13: "NaN loss at epoch 2\nTraceback: (another)"}


@pytest.fixture
def scenario(sweep: Sweep) -> Sweep:
    for index in range(14):
        if index in OBJECTIVES:
            sweep.finish(index, objective=OBJECTIVES[index], seconds=index + 1,
                         epochs=3 if index == 7 else 0)
        else:
            sweep.finish(index, TrialState.FAILED, seconds=index + 1, error=ERRORS[index])
    assert sweep.store.lifecycle.claim(sweep.ids[14], {"host": "h", "pid": 8, "name": "celery@w2"},
                             stale_after=60)
    return sweep


def rows_of(store: Store, sweep_id: str) -> list[dict[str, Any]]:
    docs, _ = store.reads.changed_rows(sweep_id, None, data.FIELDS)
    return [data.trial_row(doc) for doc in docs]


def test_trial_rows_flatten_what_the_figures_need(scenario: Sweep) -> None:
    rows = {r["index"]: r for r in rows_of(scenario.store, scenario.sweep_id)}
    point = scenario.points[7]
    seven = rows[7]
    assert seven["id"] == scenario.ids[7] and seven["state"] == "complete"
    assert seven["params"] == point.params
    assert seven["layers"] == point.config["model"]["hidden_layers"]
    assert seven["units"] == point.config["model"]["hidden_units"]
    assert seven["objective"] == 0.93 and seven["train_seconds"] == 8
    assert seven["worker"] == "celery@w1" and seven["device"] == "cpu"
    assert isinstance(seven["finished_at"], int) and seven["error"] is None
    assert rows[11]["error"] == "NaN loss at epoch 2" and rows[11]["objective"] is None
    assert rows[14]["state"] == "running" and rows[14]["worker"] == "celery@w2"
    assert rows[15]["state"] == "queued" and rows[15]["finished_at"] is None


def test_summary_counts_throughput_and_eta(scenario: Sweep) -> None:
    rows = rows_of(scenario.store, scenario.sweep_id)
    counts = scenario.store.reads.counts(scenario.sweep_id)
    now = data.to_ms(scenario.clock.now)
    assert now is not None
    active = data.activity(rows)
    assert active["finished"] == 14 and active["last_finish"] == now
    out = data.summary(counts, active, now)
    assert out["counts"]["complete"] == 11 and out["counts"]["failed"] == 3
    assert (out["total"], out["done"], out["left"]) == (16, 14, 2)
    # 14 finishes in the 105 s since the first trial started (1 + 2 + ... + 14 s).
    assert out["active_seconds"] == 105 and out["per_minute"] == pytest.approx(8.0)
    assert out["eta_seconds"] == pytest.approx(2 / 8.0 * 60, abs=0.1)
    # While trials are left, the active time runs on to now.
    later = data.summary(counts, active, now + 105_000)
    assert later["active_seconds"] == 210 and later["per_minute"] == pytest.approx(4.0)
    done = {**counts, "queued": 0, "running": 0}
    assert data.summary(done, active, now)["eta_seconds"] == 0
    nothing = data.summary(counts, data.activity([]), now)
    assert nothing["per_minute"] == 0 and nothing["eta_seconds"] is None


def test_objective_by_width_picks_the_best_setting_and_its_spread_over_seeds(
    scenario: Sweep,
) -> None:
    rows = rows_of(scenario.store, scenario.sweep_id)
    cells = data.objective_by_width(rows, "maximize")
    by = {(c["layers"], c["units"]): c for c in cells}
    assert list(by) == [(1, 32), (1, 64), (2, 32)]
    assert by[(1, 32)]["setting"] == {"model.activation": "relu"}
    assert by[(1, 32)]["mean"] == pytest.approx(0.81)
    assert (by[(1, 32)]["low"], by[(1, 32)]["high"], by[(1, 32)]["n"]) == (0.80, 0.82, 2)
    assert by[(1, 32)]["trials"] == 4
    assert by[(1, 64)]["setting"] == {"model.activation": "tanh"}
    assert by[(1, 64)]["mean"] == pytest.approx(0.92)
    assert by[(2, 32)]["mean"] == pytest.approx(0.71) and by[(2, 32)]["trials"] == 3
    worst = {(c["layers"], c["units"]): c for c in data.objective_by_width(rows, "minimize")}
    assert worst[(1, 32)]["setting"] == {"model.activation": "tanh"}


def test_timing_rows_hold_each_complete_trial_and_a_fit(scenario: Sweep) -> None:
    rows = rows_of(scenario.store, scenario.sweep_id)
    timing = timing_rows(rows)
    depth = timing["depth"]
    assert depth["index"] == sorted(OBJECTIVES)  # complete only: no failed, running, queued
    assert depth["y"] == [i + 1 for i in sorted(OBJECTIVES)]  # trial i took i + 1 s
    assert depth["x"] == [scenario.points[i].config["model"]["hidden_layers"]
                          for i in sorted(OBJECTIVES)]
    assert depth["fit"]["n"] == 11 and depth["fit"]["slope"] > 0
    assert timing["params"]["x"] == [] and timing["complete"] == 11  # no param_count here


def test_scatter_scatterby_number_category_and_index(scenario: Sweep) -> None:
    prep = param_axes.prepare(rows_of(scenario.store, scenario.sweep_id), "maximize")
    complete = sorted(OBJECTIVES)
    units = param_axes.scatter_points(prep, "model.hidden_units")
    assert units["index"] == complete and units["y"] == [OBJECTIVES[i] for i in complete]
    assert units["x"] == [scenario.points[i].params["model.hidden_units"] for i in complete]
    assert units["axis"] == {"kind": "linear", "low": 32, "high": 64, "values": [32, 64]}
    activation = param_axes.scatter_points(prep, "model.activation")
    assert activation["axis"] == {"kind": "category", "categories": ["relu", "tanh"]}
    assert set(activation["x"]) == {"relu", "tanh"}
    assert param_axes.scatter_points(prep, param_axes.INDEX)["x"] == complete


def test_parallel_rows_cap_the_best_or_the_most_recent(scenario: Sweep) -> None:
    prep = param_axes.prepare(rows_of(scenario.store, scenario.sweep_id), "maximize")
    best = param_axes.parallel_rows(prep, "best", cap=3)
    assert [r["index"] for r in best["kept"]] == [7, 6, 4]
    assert best["total"] == 11 and best["cap"] == 3
    paths = [d["path"] for d in best["dims"]]
    assert paths == ["model.hidden_layers", "model.hidden_units", "model.activation",
                     "objective"]  # seeds are repeats, not settings
    assert best["dims"][-1]["low"] == 0.60 and best["dims"][-1]["high"] == 0.93
    recent = param_axes.parallel_rows(prep, "recent", cap=3)
    assert [r["index"] for r in recent["kept"]] == [10, 9, 8]
    assert len(param_axes.parallel_rows(prep)["kept"]) == 11
    with pytest.raises(ValueError, match="mode"):
        param_axes.parallel_rows(prep, "oldest")


def test_top_failed_and_reasons(scenario: Sweep) -> None:
    rows = rows_of(scenario.store, scenario.sweep_id)
    assert [r["index"] for r in param_axes.prepare(rows, "maximize").ranked[:3]] == [7, 6, 4]
    assert [r["index"] for r in param_axes.prepare(rows, "minimize").ranked[:2]] == [10, 8]
    assert [r["index"] for r in data.failed_trials(rows)] == [13, 12, 11]
    assert failure_reasons(rows) == [
        {"reason": "NaN loss at epoch 2", "n": 2, "example": 11},
        {"reason": "out of memory", "n": 1, "example": 12},
    ]
    assert param_axes.param_paths(rows) == list(scenario.points[0].params)


def test_trial_detail_and_epoch_series(scenario: Sweep) -> None:
    doc = scenario.store.reads.get_trial(scenario.ids[7], with_metrics=True)
    sweep = scenario.store.reads.get_sweep(scenario.sweep_id)
    series = epoch_series(doc.pop("metrics"))
    assert series["epochs"] == [1, 2, 3] and series["last"] == [1, 3]
    assert series["losses"] == ["train_loss", "val_loss"]
    assert series["metrics"] == ["val_accuracy"]
    assert series["values"]["val_accuracy"] == pytest.approx([0.31, 0.62, 0.93], abs=1e-9)
    detail = trial_detail(doc, sweep, scenario.clock.now)
    assert detail["objective"] == 0.93 and detail["sweep_name"] == "dashboard-test"
    assert detail["worker"] == {"host": "h", "pid": 7, "name": "celery@w1"}
    assert detail["history"][0]["state"] == "complete"
    assert detail["history"][0]["notes"] == []
    assert detail["timings"]["run_seconds"] == 8 and detail["timings"]["wait_seconds"] > 0
    # An attempt's resume and notes (workers.checkpointing) are said beside it.
    resumed = {**doc, "resumed": [{"attempt": 1, "from_attempt": 0, "epoch": 5}],
               "notes": [{"attempt": 1, "text": "its last checkpoint could not be used"},
                         {"attempt": 2, "text": "another attempt's"}]}  # fmt: skip
    assert trial_detail(resumed, sweep, scenario.clock.now)["history"][0]["notes"] == [
        "resumed after epoch 5 from attempt 0's checkpoint",
        "its last checkpoint could not be used",
    ]
    running = scenario.store.reads.get_trial(scenario.ids[14], with_metrics=False)
    scenario.clock.advance(5)
    assert timings(running, scenario.clock.now)["run_seconds"] == 5
    assert epoch_series([])["last"] == [0, -1]


def test_worker_rows_from_the_store_and_from_inspect(scenario: Sweep) -> None:
    activity = recent_activity(scenario.store.reads, scenario.clock.now)
    now = data.to_ms(scenario.clock.now) or 0
    rows = {r["name"]: r for r in worker_rows(None, activity, now)}
    one, two = rows["celery@w1"], rows["celery@w2"]
    assert (one["finished"], one["per_minute"], one["device"]) == (14, 1.4, "cpu")
    assert one["current"] == [] and one["answered"] is None
    # Both were heard of just now (a finish, a claim): without a broker, the store says.
    assert one["online"] is True and one["last_seen"] == one["last_activity"] == now
    assert two["current"] == [scenario.ids[14]] and two["finished"] == 0
    later = worker_rows(None, activity, now + ONLINE_SECONDS * 1000 + 1)
    assert [r["online"] for r in later] == [False, False]  # a minute of silence: offline
    assert {r["last_seen"] for r in later} == {now}
    inspected = {"celery@w2": {"trials": [scenario.ids[14]], "pid": 8, "concurrency": 1},
                 "celery@w3": {"trials": [], "pid": 9, "concurrency": 2}}
    online = worker_rows(inspected, activity, now + 600_000)
    assert [(r["name"], r["online"], r["answered"]) for r in online] == [
        ("celery@w2", True, True), ("celery@w3", True, True), ("celery@w1", False, False)]
    # w2 answered now: seen now, though its trial last moved minutes ago.
    assert online[0]["last_seen"] == now + 600_000 and online[0]["last_activity"] == now
    assert inspect_workers(None) == {"workers": None, "error": None}
    later = recent_activity(scenario.store.reads, scenario.clock.now.replace(year=2031))
    assert later == []


#: Four trials that differ only in a sub-section's leaf, `execution.parallel.tau`.
TAU_SPEC: dict[str, Any] = {
    "name": "tau-sweep",
    "dataset": {"name": "digits"},
    "training": {"optimizer": "sgd", "lr": 0.1, "epochs": 3},
    "execution": {"parallel": {"world_size": 2, "strategy": "local_sgd", "tau": [1, 5, 20, 50]}},
    "objective": {"metric": "val_accuracy", "direction": "maximize"},
}


def test_a_sub_section_leaf_is_a_param_like_any_other(store: Store, clock: FakeClock) -> None:
    sweep_id, points = make_sweep(store, load_spec(TAU_SPEC))
    sweep = Sweep(store, clock, sweep_id, points, trial_ids(sweep_id, points))
    for index, objective in enumerate((0.7, 0.9, 0.8)):
        sweep.finish(index, objective=objective)
    stored = store.reads.get_trial(sweep.ids[1], with_metrics=False)
    assert stored["params"] == {"execution": {"parallel": {"tau": 5}}}  # nested, queryable
    assert stored["config"]["execution"]["parallel"] == {
        "world_size": 2,
        "strategy": "local_sgd",
        "tau": 5,
    }
    rows = sorted(rows_of(store, sweep_id), key=lambda r: r["index"])
    assert [r["params"] for r in rows] == [{"execution.parallel.tau": t} for t in (1, 5, 20, 50)]
    prep = param_axes.prepare(rows, "maximize")
    assert prep.params == ["execution.parallel.tau"]
    scatter = param_axes.scatter_points(prep, "execution.parallel.tau")
    assert (scatter["x"], scatter["y"]) == ([1, 5, 20], [0.7, 0.9, 0.8])
    assert scatter["axis"]["kind"] == "log"  # 1 to 50, queued trials included
    figure = figures.scatter_figure(scatter, "val_accuracy")
    assert figure["layout"]["meta"]["param"] == "execution.parallel.tau"
    assert figure["layout"]["title"]["text"].startswith("val_accuracy vs parallel.tau (3 ")
    dims = param_axes.parallel_rows(prep)["dims"]
    assert [(d["path"], d["label"]) for d in dims] == [
        ("execution.parallel.tau", "parallel.tau"),
        ("objective", "objective"),
    ]
    found, _ = store.reads.trials(sweep_id, params={"execution.parallel.tau": 20})
    assert [d["index"] for d in found] == [2]
    ordered, _ = store.reads.trials(sweep_id, sort="execution.parallel.tau", descending=True)
    assert [d["index"] for d in ordered] == [3, 2, 1, 0]
    best = store.reads.best(sweep_id, 1)
    assert best[0]["params"] == {"execution": {"parallel": {"tau": 5}}}


def test_epoch_series_keeps_parallel_timings_out_of_the_quality_metrics() -> None:
    rows = [
        {"attempt": 1, "epoch": e, "metrics": {"val_loss": 1.0 / e, "val_accuracy": 0.5,
                                               "compute_seconds": 0.2, "comm_seconds": 0.1,
                                               "comm_bytes": 4e6, "epoch_seconds": 0.4}}
        for e in (1, 2)
    ]
    series = epoch_series(rows)
    assert series["metrics"] == ["val_accuracy"] and series["losses"] == ["val_loss"]
    assert series["values"]["comm_bytes"] == [4e6, 4e6]


def test_a_caffe_trials_iteration_is_no_curve_and_its_layer_table_is_shown() -> None:
    rows = [
        {"attempt": 0, "epoch": e, "metrics": {"iteration": 100 * e, "train_loss": 1.0 / e,
                                               "val_loss": 1.0 / e, "val_accuracy": 0.9,
                                               "val_l2_error": 0.5, "lr": 0.01}}
        for e in (1, 2)
    ]  # fmt: skip
    series = epoch_series(rows)
    assert series["metrics"] == ["val_accuracy", "val_l2_error"]
    assert series["losses"] == ["train_loss", "val_loss"]
    assert series["values"]["iteration"] == [100, 200]
    table = [{"name": "ip1", "type": "InnerProduct", "bottoms": ["data"], "tops": ["ip1"],
              "output": [[64, 10]], "params": 650}]  # fmt: skip
    doc = {"_id": "s-1", "index": 0, "sweep_id": "s", "layer_table": table, "param_count": 650}
    detail = trial_detail(doc, {"name": "s"}, datetime.now(UTC))
    assert detail["layer_table"] == table and detail["param_count"] == 650
    assert trial_detail({**doc, "layer_table": None}, {}, datetime.now(UTC))["layer_table"] is None
