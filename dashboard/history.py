"""Best objective so far against trials finished and against epochs trained.

Optuna's optimisation history, in two steps: `best_history` computes the rows from the
dashboard's trial rows (`data.trial_row`), `history_figures` draws them. The x axes count
work, not wall-clock time: the number of trials finished (complete, failed or pruned),
and the epochs those trials trained (a pruned trial counts only the epochs it trained).
The second is where early stopping shows its payoff: the same best value after fewer
epochs. Both lines run on to the last finished trial, flat after the last improvement.

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

from core.states import FINISH_STATES
from dashboard.data import COMPLETE, PRUNED, better
from dashboard.figures import STATE_COLOURS, base_layout, empty_note

_FINISHED = frozenset(s.value for s in FINISH_STATES)
_GREY = "#7b8794"


def best_history(rows: Iterable[Mapping[str, Any]], direction: str) -> dict[str, Any]:
    """The best-so-far steps of a sweep, in finish order (time, then index).

    ``steps``: one row per improvement, ``{trials, epochs, best, index}`` (the trials
    finished and epochs trained when trial ``index`` set ``best``, both counting it);
    ``trials``, ``epochs``: the totals over every finished trial (where both lines end);
    ``planned_epochs``: what those trials would have trained without pruning; ``pruned``:
    how many of them were pruned; ``best``: the last step's value (None without one).
    A trial whose epochs are unknown (logged before they were kept) counts as 0 epochs.
    """
    finished = _FINISHED
    done = [r for r in rows if r["state"] in finished and r["finished_at"] is not None]
    done.sort(key=itemgetter("finished_at", "index"))
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
            steps.append({"trials": trials, "epochs": epochs, "best": value,
                          "index": row["index"]})
    return {"steps": steps, "trials": trials, "epochs": epochs, "planned_epochs": planned,
            "pruned": pruned, "best": best}


def _figure(history: Mapping[str, Any], axis: str, metric: str, title: str,
            x_title: str) -> dict[str, Any]:
    steps = history["steps"]
    end = history[axis]
    xs = [s[axis] for s in steps]
    ys = [s["best"] for s in steps]
    if steps and end > xs[-1]:
        xs, ys = [*xs, end], [*ys, ys[-1]]  # flat to the last finished trial
    line = {
        "type": "scatter", "mode": "lines", "x": xs, "y": ys, "hoverinfo": "skip",
        "line": {"shape": "hv", "color": STATE_COLOURS["complete"], "width": 2},
        "name": "best so far", "meta": {"end": end},
    }
    marks = {
        "type": "scatter", "mode": "markers", "name": "improvement",
        "x": [s[axis] for s in steps], "y": [s["best"] for s in steps],
        "customdata": [s["index"] for s in steps],
        "marker": {"size": 7, "color": STATE_COLOURS["complete"]},
        "hovertemplate": f"best %{{y:.4g}} by trial #%{{customdata}}<br>{x_title} "
                         "%{x:,}<extra></extra>",
    }
    layout = base_layout(title, x_title, metric, showlegend=False,
                         xaxis={"rangemode": "tozero", "tickformat": ",d"})
    if not steps:
        empty_note(layout, "no complete trials yet")
    return {"data": [line, marks], "layout": layout}


def _subtitle(layout: dict[str, Any], text: str) -> None:
    layout["title"]["subtitle"] = {"text": text, "font": {"size": 12, "color": _GREY}}
    layout["margin"] = {**layout["margin"], "t": 64}


def history_figures(history: Mapping[str, Any], metric: str) -> dict[str, dict[str, Any]]:
    """``{"trials": figure, "epochs": figure}``: the best `metric` so far against trials
    finished and against epochs trained, from `best_history`."""
    trials = _figure(history, "trials", metric, f"Best {metric} vs trials finished",
                     "trials finished")
    pruned = history["pruned"]
    _subtitle(trials["layout"], f"{history['trials']:,} finished, {pruned:,} of them pruned")
    epochs = _figure(history, "epochs", metric, f"Best {metric} vs epochs trained",
                     "epochs trained")
    planned = history["planned_epochs"]
    share = f" ({100 * history['epochs'] / planned:.0f} %)" if planned else ""
    _subtitle(epochs["layout"], f"{history['epochs']:,} epochs trained of {planned:,} "
              f"planned{share}; pruned trials count what they trained")
    totals = {k: history[k] for k in ("trials", "epochs", "planned_epochs", "pruned")}
    for figure in (trials, epochs):
        figure["layout"]["meta"] = {**totals, "planned": planned}
    return {"trials": trials, "epochs": epochs}
