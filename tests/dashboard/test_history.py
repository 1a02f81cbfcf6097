"""Rows of the pruned state and of the best-so-far charts (`dashboard.history`), and how
they are drawn: plain dictionaries in, plain dictionaries out, no store."""

from __future__ import annotations

from typing import Any

import pytest

from dashboard import figures
from dashboard.data import epochs_trained, pruned_trials, trial_row
from dashboard.history import best_history, history_figures


def row(index: int, state: str, objective: float | None, at: int, epochs: int | None,
        planned: int | None = 10, pruned_epoch: int | None = None) -> dict[str, Any]:
    return {"index": index, "id": f"t{index}", "state": state, "objective": objective,
            "finished_at": at, "epochs": epochs, "planned_epochs": planned,
            "pruned_epoch": pruned_epoch, "params": {}}


ROWS = [
    row(0, "complete", 0.5, 1000, 10),
    row(3, "pruned", None, 2000, 2, pruned_epoch=2),
    row(1, "complete", 0.7, 3000, 10),
    row(2, "failed", None, 4000, 4),
    row(4, "complete", 0.6, 5000, 10),  # no improvement: the line must still reach it
    row(5, "pruned", None, 6000, 3, pruned_epoch=3),
    row(6, "running", None, None, None),
    row(7, "queued", None, None, None),
]


def test_best_history_counts_every_finish_and_only_what_pruned_trials_trained() -> None:
    history = best_history(ROWS, "maximize")
    assert history["steps"] == [
        {"trials": 1, "epochs": 10, "seconds": 0.0, "best": 0.5, "index": 0},
        {"trials": 3, "epochs": 22, "seconds": 2.0, "best": 0.7, "index": 1},
    ]  # no start times in these rows: seconds count from the first finish
    assert history["trials"] == 6 and history["pruned"] == 2
    assert history["epochs"] == 10 + 2 + 10 + 4 + 10 + 3
    assert history["planned_epochs"] == 60 and history["best"] == 0.7


def test_best_history_follows_finish_order_and_direction() -> None:
    shuffled = list(reversed(ROWS))
    assert best_history(shuffled, "maximize") == best_history(ROWS, "maximize")
    low = best_history(ROWS, "minimize")
    assert [s["index"] for s in low["steps"]] == [0]
    assert best_history([], "maximize") == {"steps": [], "trials": 0, "epochs": 0,
                                            "seconds": 0.0, "planned_epochs": 0, "pruned": 0,
                                            "best": None}


def test_the_lines_run_on_to_the_last_finished_trial() -> None:
    figs = history_figures(best_history(ROWS, "maximize"), "val_accuracy")
    trials_line, trials_marks = figs["trials"]["data"]
    assert trials_line["x"] == [1, 3, 6] and trials_line["y"] == [0.5, 0.7, 0.7]
    assert trials_line["line"]["shape"] == "hv"
    assert trials_marks["x"] == [1, 3] and trials_marks["customdata"] == [0, 1]
    epochs_line = figs["epochs"]["data"][0]
    assert epochs_line["x"] == [10, 22, 39] and epochs_line["y"][-1] == 0.7
    subtitle = figs["epochs"]["layout"]["title"]["subtitle"]["text"]
    assert "39 epochs trained of 60 planned (65 %)" in subtitle
    assert figs["epochs"]["layout"]["meta"]["planned"] == 60
    assert "2 of them pruned" in figs["trials"]["layout"]["title"]["subtitle"]["text"]
    assert figs["trials"]["layout"]["xaxis"]["title"]["text"] == "trials finished"


def test_best_so_far_against_time_counts_from_the_first_start() -> None:
    """The time choice: seconds (or minutes, hours) since the first trial started, never
    dates, and the line carried to the last finish."""
    started = [{**r, "started_at": 400} for r in ROWS]
    figs = history_figures(best_history(started, "maximize"), "val_accuracy")
    line, marks = figs["time"]["data"]
    assert line["x"] == [0.6, 2.6, 5.6] and line["y"] == [0.5, 0.7, 0.7]
    assert marks["x"] == [0.6, 2.6] and "date" not in str(figs["time"]["layout"]["xaxis"])
    assert figs["time"]["layout"]["xaxis"]["title"]["text"] == (
        "time since the first trial started (s)")
    assert figs["time"]["layout"]["meta"]["unit"] == "s"
    # A two-hour sweep reads in minutes: its last finish at 120 min.
    long = [{**r, "finished_at": r["finished_at"] and r["finished_at"] * 1200 + 400,
             "started_at": 400} for r in ROWS]
    slow = history_figures(best_history(long, "maximize"), "val_accuracy")["time"]
    assert slow["layout"]["meta"]["unit"] == "min" and slow["data"][0]["x"][-1] == 120


def test_empty_history_says_why() -> None:
    figs = history_figures(best_history([], "maximize"), "val_accuracy")
    for fig in figs.values():
        assert fig["data"][0]["x"] == []
        assert fig["layout"]["annotations"][0]["text"] == "no complete trials yet"


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ({"state": "pruned", "pruned_epoch": 3, "progress": {"epoch": 4}}, 3),
        ({"state": "pruned", "progress": {"epoch": 4}}, 4),
        ({"state": "complete", "progress": {"epoch": 7}}, 7),
        ({"state": "complete"}, 10),
        ({"state": "failed"}, 0),
        ({"state": "failed", "progress": {"epoch": 2}}, 2),
        ({"state": "running", "progress": {"epoch": 2}}, None),
        ({"state": "queued"}, None),
        ({"state": "pruned", "pruned_epoch": -1, "progress": {"epoch": True}}, None),
    ],
)
def test_epochs_trained(doc: dict[str, Any], expected: int | None) -> None:
    assert epochs_trained(doc, 10) == expected


def test_a_pruned_trial_row_keeps_its_stop_epoch() -> None:
    doc = {"_id": "s-1", "index": 1, "state": "pruned", "pruned_epoch": 2,
           "progress": {"epoch": 2}, "config": {"training": {"epochs": 9}}}
    out = trial_row(doc)
    assert (out["pruned_epoch"], out["epochs"], out["planned_epochs"]) == (2, 2, 9)
    running = trial_row({**doc, "state": "running", "pruned_epoch": None})
    assert running["epochs"] is None and running["pruned_epoch"] is None
    assert [r["index"] for r in pruned_trials(ROWS, 1)] == [5]


def test_pruned_curves_are_dashed_grey_and_end_in_a_cross() -> None:
    pruned = figures.curve_trace({"index": 5, "state": "pruned", "pruned_epoch": 3,
                                  "objective": None}, [1, 2, 3], [0.2, 0.3, 0.35],
                                 "val_accuracy")
    assert pruned["line"]["dash"] == "dash" and pruned["meta"]["group"] == "pruned"
    assert pruned["marker"]["size"] == [0, 0, 11] and pruned["marker"]["symbol"] == "x-thin"
    assert "pruned at epoch 3" in pruned["hovertemplate"] and "@3" in pruned["name"]
    top = figures.curve_trace({"index": 1, "state": "complete", "objective": 0.9},
                              [1, 2], [0.5, 0.9], "val_accuracy")
    assert "dash" not in top["line"] and top["meta"]["group"] == "top"


def test_a_pruned_trial_page_marks_the_stop_epoch() -> None:
    series = {"epochs": [1, 2], "values": {"val_loss": [1.0, 0.8], "val_accuracy": [0.3, 0.4],
                                           "epoch_seconds": [0.1, 0.1]},
              "losses": ["val_loss"], "metrics": ["val_accuracy"]}
    marked = figures.epoch_figures(series, 10, stopped=2)
    for fig in marked.values():
        assert fig["layout"]["shapes"][0]["x0"] == 2
        assert any("pruned at epoch 2" in a["text"] for a in fig["layout"]["annotations"])
    assert "shapes" not in figures.epoch_figures(series, 10)["loss"]["layout"]
