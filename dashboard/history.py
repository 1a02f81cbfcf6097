"""Best objective so far against trials finished, against time, and against epochs trained.

Optuna's optimisation history, in two steps: `best_history` computes the rows from the
dashboard's trial rows (`data.trial_row`), `history_figures` draws them. The first x axis
counts work, not wall-clock time: the number of trials finished (complete, failed or
pruned); a page may show the same line against the time since the sweep's first trial
started instead (in seconds, minutes or hours as the span asks, never as dates: a
two-minute sweep drawn against UTC times reads as a few seconds of sub-second ticks). The
third counts the epochs those trials trained (a pruned trial counts only the epochs it
trained): that is where early stopping shows its payoff, the same best value after fewer
epochs. Every line runs on to the last finished trial, flat after the last improvement.

What it costs at 50,000 trials: nothing is read from the store for it. The rows come from
the sweep's in-memory table (`dashboard.table`: read once from the finish log, then only
what changed), and `best_history` is one sort and one pass over the finished rows in
memory (50,000 rows: ~200 ms on the 2-core test machine at a load average of 8),
memoised with the table's snapshot: at most once per `payloads.PREPARED_SECONDS` on a
busy sweep, however many pages poll. What it sends is one point per improvement and the
end point, not one per trial: a few kilobytes for a whole sweep.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from operator import itemgetter
from typing import Any

from core.analysis.layout import base_layout
from core.states import FINISH_STATES
from dashboard.data import COMPLETE, PRUNED, better
from dashboard.figures import STATE_COLOURS, empty_note

_FINISHED = frozenset(s.value for s in FINISH_STATES)
_GREY = "#7b8794"


def best_history(rows: Iterable[Mapping[str, Any]], direction: str) -> dict[str, Any]:
    """The best-so-far steps of a sweep, in finish order (time, then index).

    ``steps``: one row per improvement, ``{trials, epochs, seconds, best, index}`` (the
    trials finished and epochs trained when trial ``index`` set ``best``, both counting it,
    and the seconds from the first start, `first_start`, to its finish); ``trials``,
    ``epochs``, ``seconds``: the same at the last finished trial (where the lines end);
    ``planned_epochs``: what those trials would have trained without pruning; ``pruned``:
    how many of them were pruned; ``best``: the last step's value (None without one).
    A trial whose epochs are unknown (logged before they were kept) counts as 0 epochs.
    """
    finished = _FINISHED
    rows = list(rows)
    done = [r for r in rows if r["state"] in finished and r["finished_at"] is not None]
    done.sort(key=itemgetter("finished_at", "index"))
    start = first_start(rows)
    larger = better(direction)
    steps: list[dict[str, Any]] = []
    best: float | None = None
    trials = epochs = planned = pruned = 0
    for row in done:
        trials += 1
        trained = row["epochs"] or 0
        epochs += trained
        want = row["planned_epochs"] or 0
        planned += want if want > trained else trained
        state = row["state"]
        if state != COMPLETE:
            pruned += state == PRUNED
            continue
        value = row["objective"]
        if value is None:
            continue
        if best is None or (value > best if larger else value < best):
            best = value
            steps.append({"trials": trials, "epochs": epochs,
                          "seconds": _since(start, row["finished_at"]), "best": value,
                          "index": row["index"]})
    seconds = _since(start, done[-1]["finished_at"]) if done else 0.0
    return {"steps": steps, "trials": trials, "epochs": epochs, "seconds": seconds,
            "planned_epochs": planned, "pruned": pruned, "best": best}


def first_start(rows: Iterable[Mapping[str, Any]]) -> int | None:
    """When the sweep's first trial started (ms), or its first finish if none says when
    it started (a finish logged without it); None before either."""
    starts = [r["started_at"] for r in rows if r.get("started_at") is not None]
    if starts:
        return min(starts)
    finishes = [r["finished_at"] for r in rows if r.get("finished_at") is not None]
    return min(finishes) if finishes else None


def _since(start: int | None, moment: int) -> float:
    return 0.0 if start is None else round(max(0, moment - start) / 1000, 3)


#: (longest span in seconds, unit, seconds per unit) of the time axis.
_UNITS = ((120, "s", 1), (3 * 3600, "min", 60), (float("inf"), "h", 3600))


def time_unit(seconds: float) -> tuple[str, int]:
    """The unit a time axis spanning `seconds` reads best in: s, min or h."""
    return next((unit, size) for limit, unit, size in _UNITS if seconds <= limit)


def _figure(history: Mapping[str, Any], axis: str, metric: str, title: str,
            x_title: str, scale: float = 1) -> dict[str, Any]:
    steps = history["steps"]
    end = _scaled(history[axis], scale)
    xs = [_scaled(s[axis], scale) for s in steps]
    ys = [s["best"] for s in steps]
    number = ",d" if axis != "seconds" else ",.3g"
    if steps and end > xs[-1]:
        xs, ys = [*xs, end], [*ys, ys[-1]]  # flat to the last finished trial
    line = {
        "type": "scatter", "mode": "lines", "x": xs, "y": ys, "hoverinfo": "skip",
        "line": {"shape": "hv", "color": STATE_COLOURS["complete"], "width": 2},
        "name": "best so far", "meta": {"end": end},
    }
    marks = {
        "type": "scatter", "mode": "markers", "name": "improvement",
        "x": xs[: len(steps)], "y": ys[: len(steps)],
        "customdata": [s["index"] for s in steps],
        "marker": {"size": 7, "color": STATE_COLOURS["complete"]},
        "hovertemplate": f"best %{{y:.4g}} by trial #%{{customdata}}<br>{x_title} "
                         f"%{{x:{number}}}<extra></extra>",
    }
    ticks = {"tickformat": ",d"} if axis != "seconds" else {}
    # Its own uirevision: a zoom on one x axis is not carried to another drawn in its place.
    layout = base_layout(title, x_title, metric, showlegend=False,
                         xaxis={"rangemode": "tozero", **ticks}, uirevision=axis)
    if not steps:
        empty_note(layout, "no complete trials yet")
    return {"data": [line, marks], "layout": layout}


def _scaled(value: float, scale: float) -> float:
    return value if scale == 1 else round(value / scale, 4)


def _subtitle(layout: dict[str, Any], text: str) -> None:
    layout["title"]["subtitle"] = {"text": text, "font": {"size": 12, "color": _GREY}}
    layout["margin"] = {**layout["margin"], "t": 64}


def history_figures(
    history: Mapping[str, Any], metric: str, step: str = "epoch"
) -> dict[str, dict[str, Any]]:
    """``{"trials", "time", "epochs"}``: figures of the best `metric` so far against trials
    finished, against the time since the first start, and against epochs trained, from
    `best_history` (`step`: what a reported row is, ``epoch`` or a Caffe net's
    ``evaluation``: `core.spec.kind.TrialKind.step`)."""
    trials = _figure(history, "trials", metric, f"Best {metric} vs trials finished",
                     "trials finished")
    pruned = history["pruned"]
    counted = f"{history['trials']:,} finished, {pruned:,} of them pruned"
    _subtitle(trials["layout"], counted)
    unit, size = time_unit(history["seconds"])
    time = _figure(history, "seconds", metric, f"Best {metric} vs time",
                   f"time since the first trial started ({unit})", size)
    _subtitle(time["layout"], f"{counted}, in {history['seconds'] / size:,.3g} {unit}")
    epochs = _figure(history, "epochs", metric, f"Best {metric} vs {step}s trained",
                     f"{step}s trained")
    planned = history["planned_epochs"]
    share = f" ({100 * history['epochs'] / planned:.0f} %)" if planned else ""
    _subtitle(epochs["layout"], f"{history['epochs']:,} {step}s trained of {planned:,} "
              f"planned{share}; pruned trials count what they trained")
    totals = {k: history[k] for k in ("trials", "epochs", "planned_epochs", "pruned")}
    for figure in (trials, time, epochs):
        figure["layout"]["meta"] = {**totals, "planned": planned}
    time["layout"]["meta"].update(seconds=history["seconds"], unit=unit)
    return {"trials": trials, "time": time, "epochs": epochs}
