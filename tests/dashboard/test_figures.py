"""Rows → figures: what each Plotly figure holds, and that it is valid JSON for plotly.js.

(How they look is checked in a real browser, `test_browser`, and its screenshots.)
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from dashboard import figures, param_axes, parcoords
from dashboard.timing import timing_figures, timing_rows

MAXIMIZE = "maximize"


def row(index: int, objective: float, **param: Any) -> dict[str, Any]:
    return {"id": f"s-{index}", "index": index, "state": "complete", "objective": objective,
            "finished_at": 1_000 * index, "params": param, "layers": param.get("layers"),
            "units": None, "train_seconds": 1.0}


def as_json(figure: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(figure, allow_nan=False))


@pytest.mark.parametrize(("value", "dim", "expected"), [
    (16, {"kind": "log", "low": 16, "high": 1024}, 0.0),
    (128, {"kind": "log", "low": 16, "high": 1024}, 0.5),
    (2000, {"kind": "linear", "low": 0, "high": 1000}, 1.0),
    (5, {"kind": "linear", "low": 5, "high": 5}, 0.5),
    ("tanh", {"kind": "category", "categories": ["relu", "sigmoid", "tanh"]}, 1.0),
    (False, {"kind": "category", "categories": ["false", "true"]}, 0.0),
    ("elu", {"kind": "category", "categories": ["relu", "tanh"]}, None),
    ("x", {"kind": "linear", "low": 0, "high": 1}, None),
])
def test_normalise_places_values_on_a_parallel_axis(value: Any, dim: dict[str, Any],
                                                     expected: float | None) -> None:
    assert parcoords.normalise(value, dim) == pytest.approx(expected)


def test_axis_kinds() -> None:
    assert param_axes.axis_kind([16, 1024, 64, None])["kind"] == "log"
    assert param_axes.axis_kind([1, 2, 3])["values"] == [1, 2, 3]
    assert param_axes.axis_kind([True, False, 1]) == {"kind": "category",
                                                  "categories": ["1", "false", "true"]}
    assert param_axes.axis_kind([[64, 32], [64, 32], [16]])["categories"] == ["[16]", "[64,32]"]
    assert param_axes.axis_kind(["b", "a"]) == {"kind": "category", "categories": ["a", "b"]}


def test_parallel_figure_draws_one_polyline_per_kept_trial() -> None:
    rows = [row(i, 0.5 + i / 20, **{"model.hidden_layers": 1 + i % 3,
                                     "model.activation": ["relu", "tanh"][i % 2],
                                     "training.seed": i}) for i in range(10)]
    prep = param_axes.prepare(rows, MAXIMIZE)
    figure = as_json(parcoords.parallel_figure(param_axes.parallel_rows(prep, cap=6), "acc",
                                             MAXIMIZE))
    meta = figure["layout"]["meta"]
    bands = figure["data"][: meta["bands"]["count"]]
    assert [d["label"] for d in meta["dims"]] == ["hidden_layers", "activation", "acc"]
    assert sum(len(t["x"]) for t in bands) == 6 * 3  # a vertex per axis, no gaps
    assert [k[0] for k in meta["kept"]] == [9, 8, 7, 6, 5, 4]
    assert meta["total"] == 10 and meta["cap"] == 6
    best = next(t for t in bands if 9 in t["customdata"])
    assert best is bands[-1]  # the best band is drawn last, on top
    vertices = sorted((x, y) for x, y, i in zip(best["x"], best["y"], best["customdata"],
                                                strict=True) if i == 9)
    assert vertices == [(0, 0.0), (1, 1.0), (2, 1.0)]  # 1 layer, tanh, the best objective
    for trace in bands:  # one unbroken path, there and back
        assert None not in trace["x"]
        starts = trace["x"][::3]
        assert starts == [0, 2] * (len(starts) // 2) + [0] * (len(starts) % 2)
    ticks = next(t for t in figure["data"] if t["name"] == "ticks")
    assert {"relu", "tanh", "1", "2", "3"} <= set(ticks["text"])


def test_a_trial_placed_for_the_page_runs_where_the_figure_draws_it() -> None:
    """The page extends the figures with the server's placements (`parcoords.placements`):
    on the figure's axes they are its lines' vertices, and the scatter's x values."""
    rows = [row(i, 0.5 + i / 20, **{"model.hidden_layers": 1 + i % 3,
                                     "model.activation": ["relu", "tanh"][i % 2]})
            for i in range(10)]
    prep = param_axes.prepare(rows, MAXIMIZE)
    figure = parcoords.parallel_figure(param_axes.parallel_rows(prep), "acc", MAXIMIZE)
    placed = parcoords.placements(prep, param_axes.parallel_dims(prep), [*rows, {
        **row(10, 0.7), "state": "failed", "objective": None}])
    assert placed["axes"] == figure["layout"]["meta"]["axes"]
    assert [p["index"] for p in placed["rows"]] == list(range(10))  # complete ones only
    width = len(figure["layout"]["meta"]["dims"])
    for p in placed["rows"]:
        trace = next(t for t in figure["data"] if p["index"] in (t.get("customdata") or []))
        at = trace["customdata"].index(p["index"])
        drawn = dict(zip(trace["x"][at:at + width], trace["y"][at:at + width], strict=True))
        assert [drawn[x] for x in range(width)] == p["ys"]
    for param in ("model.activation", "model.hidden_layers", param_axes.INDEX):
        points = param_axes.scatter_points(prep, param)
        assert [p["x"][param] for p in placed["rows"]] == points["x"]
    moved = param_axes.prepare([*rows, row(11, 0.99, **{"model.hidden_layers": 5})], MAXIMIZE)
    assert parcoords.axes_digest(param_axes.parallel_dims(moved)) != placed["axes"]


def test_scatter_figure_axes_follow_the_parameter() -> None:
    rows = [row(i, 0.1 * i, **{"model.hidden_units": 16 * 2 ** i}) for i in range(6)]
    prep = param_axes.prepare(rows, MAXIMIZE)
    figure = as_json(figures.scatter_figure(param_axes.scatter_points(prep, "model.hidden_units"),
                                            "acc"))
    trace = figure["data"][0]
    assert trace["type"] == "scattergl" and trace["customdata"] == list(range(6))
    assert figure["layout"]["xaxis"]["type"] == "log"
    assert figure["layout"]["xaxis"]["ticktext"] == ["16", "32", "64", "128", "256", "512"]
    assert "6 complete trials" in figure["layout"]["title"]["text"]


def test_width_figure_draws_a_line_per_depth() -> None:
    cells = [{"layers": layers, "units": units, "mean": 0.8, "low": 0.7, "high": 0.9, "n": 3,
              "trials": 6, "setting": {"model.activation": "relu"}}
             for layers in (1, 2) for units in (32, 64)]
    width = as_json(figures.width_figure(cells, "acc"))
    assert [t["name"] for t in width["data"]] == ["1 layer", "2 layers"]
    assert width["data"][0]["error_y"]["array"] == pytest.approx([0.1, 0.1])
    assert width["data"][0]["customdata"][0] == [32, 3, "activation=relu"]
    assert width["data"][0]["line"]["color"] != width["data"][1]["line"]["color"]


def test_empty_figures_say_so() -> None:
    timing = timing_figures(timing_rows([]))
    for figure in (figures.width_figure([], "acc"), timing["depth"], timing["params"],
                   figures.curves_figure([], "acc", 10)):
        texts = [a["text"] for a in as_json(figure)["layout"].get("annotations", [])]
        assert texts and "yet" in texts[0]
    counted = timing_figures(timing_rows([row(0, 0.5, layers=1)]))["params"]
    assert counted["layout"]["annotations"][0]["text"] == "no parameter counts recorded"
    shapeless = timing_figures(timing_rows([{**row(0, 0.5), "layers": None}]))["depth"]
    assert shapeless["layout"]["annotations"][0]["text"].startswith("no trial has a depth")


def test_epoch_figures_span_the_planned_epochs() -> None:
    series = {"epochs": [1, 2], "values": {"train_loss": [1.0, 0.5], "val_accuracy": [0.2, 0.4],
                                           "epoch_seconds": [0.1, 0.1]},
              "losses": ["train_loss"], "metrics": ["val_accuracy"]}
    out = as_json(figures.epoch_figures(series, 20))
    assert set(out) == {"loss", "metrics", "seconds"}
    assert out["loss"]["layout"]["xaxis"]["range"] == [0.5, 20.5]
    assert out["metrics"]["data"][0]["y"] == [0.2, 0.4]
    assert out["seconds"]["data"][0]["type"] == "bar"


def test_a_parallel_trial_splits_its_time_per_epoch() -> None:
    series = {"epochs": [1, 2],
              "values": {"val_loss": [1.0, 0.5], "epoch_seconds": [1.0, 0.5],
                         "compute_seconds": [0.6, 0.3], "comm_seconds": [0.3, 0.1],
                         "comm_bytes": [1e6, 1e6]},
              "losses": ["val_loss"], "metrics": []}
    seconds = as_json(figures.epoch_figures(series, 2))["seconds"]
    assert [t["name"] for t in seconds["data"]] == ["compute", "communication",
                                                    "evaluation and other"]
    assert seconds["layout"]["barmode"] == "stack"
    rest = seconds["data"][2]["y"]
    assert rest == pytest.approx([0.1, 0.1])
