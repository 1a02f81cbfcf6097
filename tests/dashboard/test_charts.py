"""The charts that must not mislead (issue 18): parallel coordinates' colours and bands,
training time against depth and size with a fitted line, the throughput of a finished
sweep, best so far against trials finished. Plain rows in, plain figures out, no store
(the drawing is checked in a real browser, `test_browser`)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from plotly.colors import sample_colorscale, unlabel_rgb

from dashboard import data, param_axes, parcoords
from dashboard.history import best_history, history_figures
from dashboard.timing import POINTS_CAP, fit_line, timing_figures, timing_rows


def row(index: int, objective: float | None, state: str = "complete", *,
        seconds: float | None = 1.0, layers: int | None = 1, param_count: int | None = None,
        started: int | None = None, finished: int | None = None,
        **param: Any) -> dict[str, Any]:
    return {"id": f"s-{index}", "index": index, "state": state, "objective": objective,
            "started_at": started, "finished_at": 1_000 * (index + 1) if finished is None
            else finished, "params": param, "layers": layers, "units": None,
            "train_seconds": seconds, "param_count": param_count, "epochs": 3,
            "planned_epochs": 3}


def luminance(colour: str) -> float:
    """Relative lightness of an ``rgb(...)``/``rgba(...)`` colour, 0 (black) to 1 (white)."""
    r, g, b = unlabel_rgb(colour.replace("rgba", "rgb").rsplit(",", 1)[0] + ")"
                          if colour.startswith("rgba") else colour)
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


def parallel(rows: list[dict[str, Any]], direction: str = "maximize") -> dict[str, Any]:
    prep = param_axes.prepare(rows, direction)
    figure = parcoords.parallel_figure(param_axes.parallel_rows(prep), "acc", direction)
    return json.loads(json.dumps(figure, allow_nan=False))


def skewed_rows() -> list[dict[str, Any]]:
    """A sweep like the one of the finding: 12 trials collapsed to chance (0.10-0.31), 68
    between 0.868 and 0.978."""
    rng = random.Random(7)
    objectives = [rng.uniform(0.10, 0.31) for _ in range(12)]
    objectives += [rng.uniform(0.868, 0.978) for _ in range(68)]
    return [row(i, v, **{"model.hidden_layers": 1 + i % 4}) for i, v in enumerate(objectives)]


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_the_best_band_is_the_dark_end_of_viridis(direction: str) -> None:
    colours = parcoords.band_colours(8, direction == "maximize")
    darkest, lightest = sample_colorscale("Viridis", [0.0, parcoords.LIGHTEST])
    best, worst = (colours[-1], colours[0]) if direction == "maximize" else (colours[0],
                                                                              colours[-1])
    assert (best, worst) == (darkest, lightest)
    lightness = [luminance(c) for c in colours]
    assert lightness == sorted(lightness, reverse=direction == "maximize")
    assert luminance(best) < 0.15 < 0.6 < luminance(worst)  # distinct ends, both on white

    rows = skewed_rows()
    figure = parallel(rows, direction)
    meta = figure["layout"]["meta"]
    lines = figure["data"][: meta["bands"]["count"]]
    pick = max if direction == "maximize" else min
    top = pick(rows, key=lambda r: r["objective"])["index"]
    holding = next(t for t in lines if top in t["customdata"])
    assert holding is lines[-1]  # the best band drawn last, on top
    assert luminance(holding["line"]["color"]) < 0.15 and holding["line"]["width"] > 1
    assert luminance(lines[0]["line"]["color"]) > 0.6
    assert figure["layout"]["legend"]["traceorder"] == "reversed"  # best first in the legend


def test_bands_are_quantiles_so_no_band_swallows_the_good_trials() -> None:
    rows = skewed_rows()
    figure = parallel(rows)
    meta = figure["layout"]["meta"]
    bands, edges = meta["bands"], meta["bands"]["edges"]
    objectives = sorted(r["objective"] for r in rows)
    assert bands["count"] == parcoords.BANDS and len(edges) == parcoords.BANDS + 1
    assert edges[0] == objectives[0] and edges[-1] == objectives[-1]
    width = len(meta["dims"])
    sizes = [len(t["customdata"]) // width for t in figure["data"][: bands["count"]]]
    assert sum(sizes) == len(rows) and max(sizes) <= len(rows) / parcoords.BANDS + 1
    # Equal widths put the 68 good trials in one or two bands; quantiles give them seven.
    good = [b for b in range(bands["count"]) if edges[b] >= 0.868]
    assert len(good) >= 6 and edges[-1] - edges[-2] < 0.978 - 0.868
    assert [parcoords.band_of(v, edges) for v in (edges[0], edges[1], edges[-1], 2.0)] == [
        0, 1, bands["count"] - 1, bands["count"] - 1]
    # Tied objectives merge edges: four trials at 0.5 (of five) leave two bands.
    assert parcoords.band_edges([0.5, 0.5, 0.5, 0.5, 0.9]) == pytest.approx([0.5, 0.7, 0.9])
    assert parcoords.band_edges([0.7]) == [0.7, 0.7]


def test_tick_labels_sit_beside_their_axis_not_on_it() -> None:
    figure = parallel(skewed_rows())
    ticks = next(t for t in figure["data"] if t["name"] == "ticks")
    assert ticks["textposition"] == "middle left" and "text" in ticks["mode"]
    # The invisible marker is what plotly sets the text beside: the gap, in pixels.
    assert ticks["marker"] == {"size": parcoords.TICK_GAP, "opacity": 0}


def test_a_known_line_is_fitted_with_its_slope_and_r2() -> None:
    exact = fit_line([1, 2, 3, 4, 5], [3.5, 5.0, 6.5, 8.0, 9.5])  # 2 + 1.5 x
    assert exact is not None
    assert exact["slope"] == pytest.approx(1.5) and exact["intercept"] == pytest.approx(2.0)
    assert exact["r2"] == pytest.approx(1.0) and exact["n"] == 5
    noisy = fit_line([1, 1, 2, 2], [1.0, 3.0, 3.0, 5.0])  # means 2 and 4: slope 2
    assert noisy is not None  # residuals 1 each (4 in all) of a total 8 about the mean 3
    assert noisy["slope"] == pytest.approx(2.0) and noisy["r2"] == pytest.approx(0.5)
    assert fit_line([3, 3], [1.0, 2.0]) is None and fit_line([1], [1.0]) is None
    flat = fit_line([1, 2], [4.0, 4.0])
    assert flat is not None and flat["slope"] == pytest.approx(0) and flat["r2"] is None


def test_time_against_depth_and_size_shows_each_trial_and_the_fit() -> None:
    rows = [row(i, 0.9, seconds=2.0 + 1.5 * (1 + i % 4), layers=1 + i % 4,
                param_count=100_000 * (1 + i % 4)) for i in range(40)]
    # Failed and pruned trials' times are no training times: left out of points and fit.
    rows += [row(40, None, "failed", seconds=500.0, layers=1, param_count=100_000),
             row(41, 0.2, "pruned", seconds=0.1, layers=4, param_count=400_000),
             row(42, None, "running", seconds=None, layers=2)]
    timing = timing_rows(rows)
    assert timing["depth"]["index"] == list(range(40)) and timing["complete"] == 40
    figs = json.loads(json.dumps(timing_figures(timing), allow_nan=False))
    depth, size = figs["depth"], figs["params"]
    points, line = depth["data"]
    assert len(points["x"]) == 40 and points["mode"] == "markers"
    assert all(abs(x - (1 + i % 4)) < 0.2 for i, x in enumerate(points["x"]))  # spread a little
    assert [c[1] for c in points["customdata"]] == [1 + i % 4 for i in range(40)]
    assert depth["layout"]["meta"]["fit"]["slope"] == pytest.approx(1.5)
    assert line["name"] == "fit: +1.5 s per layer, R² 1.00"
    assert line["x"] == [1, 4] and line["y"] == pytest.approx([3.5, 8.0])
    assert "least squares: +1.5 s per layer, R² 1.00" in depth["layout"]["title"][
        "subtitle"]["text"]
    assert size["layout"]["meta"]["fit"]["slope"] == pytest.approx(1.5e-5)
    assert size["data"][1]["name"] == "fit: +0.015 s per thousand parameters, R² 1.00"
    big = timing_figures(timing_rows([row(i, 0.9, seconds=1.0 + i, param_count=1_000_000 * i)
                                      for i in range(1, 4)]))["params"]
    assert big["data"][1]["name"].startswith("fit: +1 s per million parameters")


def test_a_big_sweep_draws_a_sample_of_points_and_fits_them_all() -> None:
    rows = [row(i, 0.9, seconds=1.0 + (i % 5), layers=1 + i % 5) for i in range(3 * POINTS_CAP)]
    depth = timing_figures(timing_rows(rows))["depth"]
    assert len(depth["data"][0]["x"]) <= POINTS_CAP and depth["layout"]["meta"]["n"] == len(rows)
    assert f"{len(rows):,}, {depth['layout']['meta']['shown']:,} drawn" in depth["layout"][
        "title"]["subtitle"]["text"]
    assert depth["layout"]["meta"]["fit"]["slope"] == pytest.approx(1.0)


def test_a_finished_sweeps_throughput_stays_what_it_was() -> None:
    """46 trials from 0 to 2 minutes: 23 per minute, an hour or a day after as at the end."""
    start = 1_700_000_000_000
    rows = [row(i, 0.9, started=start + 2_000 * i, finished=start + 120_000 * (i + 1) // 46)
            for i in range(46)]
    active = data.activity(rows)
    counts = {"complete": 46, "queued": 0, "running": 0}
    end = start + 120_000
    readings = [data.summary(counts, active, end + later)
                for later in (0, 60_000, 3_600_000, 86_400_000)]
    assert {r["per_minute"] for r in readings} == {23.0}
    assert {r["active_seconds"] for r in readings} == {120.0}
    assert {r["eta_seconds"] for r in readings} == {0.0}
    # While trials are left, the active time runs to now.
    running = data.summary({**counts, "queued": 46}, active, end + 120_000)
    assert running["per_minute"] == pytest.approx(11.5) and running["eta_seconds"] == 240


def test_best_so_far_is_against_trials_finished_up_to_the_last_one() -> None:
    rows = [row(0, 0.5), row(1, 0.8), row(2, None, "failed"), row(3, 0.6),
            row(4, None, "pruned"), row(5, 0.7)]
    figs = history_figures(best_history(rows, "maximize"), "acc")
    line = figs["trials"]["data"][0]
    assert figs["trials"]["layout"]["xaxis"]["title"]["text"] == "trials finished"
    assert line["x"] == [1, 2, 6] and line["y"] == [0.5, 0.8, 0.8]  # on to the 6th finish
    assert "date" not in json.dumps(figs["trials"]["layout"]["xaxis"])
