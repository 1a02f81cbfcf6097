"""Store records → rows: what each dashboard figure and table shows, computed, not drawn.

Every function here is plain Python over dictionaries, so it is tested on real store
contents without a browser; `dashboard.figures` draws what these return. A *trial row*
(`trial_row`) is the compact form of one trial that the dashboard keeps in memory for a
whole sweep (`dashboard.table`): its params flattened to ``section.key`` paths, times in
milliseconds since the epoch (what plotly.js takes on a date axis), and only the first
line of an error.

Depth and width come from the trial's resolved config (``model.hidden_layers`` and
``model.hidden_units``), so they are known even when a sweep does not vary them; a list
of widths counts as its mean width.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from core.spec.values import short_text, value_text
from core.states import FINISH_STATES, TrialState
from core.store import summaries
from core.store.records import finite_number

#: The trial fields the in-memory table reads (`core.store.roles.Reads.changed_rows`).
#: The trial fields the dashboard's table keeps: the finish log's (`core.store.summaries`), so a
#: finished sweep's rows come from the log; ``updated_at`` is the table's own watermark.
FIELDS = tuple(f for f in summaries.ROW_FIELDS if f != "updated_at")

COMPLETE = TrialState.COMPLETE.value
FAILED = TrialState.FAILED.value
PRUNED = TrialState.PRUNED.value
RUNNING = TrialState.RUNNING.value
QUEUED = TrialState.QUEUED.value
_FINISHED = frozenset(s.value for s in FINISH_STATES)

#: Parameters whose path ends with one of these are repeats, not settings.
SEED_KEYS = ("seed",)


def to_ms(moment: datetime | None) -> int | None:
    """Milliseconds since the epoch (UTC), or None."""
    if moment is None:
        return None
    return int(moment.timestamp() * 1000)


def first_line(text: Any, limit: int = 200) -> str | None:
    """The first non-empty line of an error, cut to `limit` characters."""
    if not isinstance(text, str) or not text.strip():
        return None
    line = next(part for part in text.strip().splitlines() if part.strip()).strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"


_SCALARS = (str, int, bool, type(None))


def _plain(value: Any) -> Any:
    """A parameter value as JSON keeps it: numbers, strings, booleans, None, lists."""
    kind = type(value)
    if kind in _SCALARS:  # the common case first: a sweep page converts every trial
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _flat_params(nested: Mapping[str, Any], prefix: str, out: dict[str, Any]) -> None:
    """`core.store.records.flatten_params` with `_plain` values, in one pass (it runs on every
    trial of a sweep when a page first opens; dicts are tested by type before Mapping)."""
    for key, value in nested.items():
        path = f"{prefix}{key}"
        kind = type(value)
        if kind in _SCALARS:
            out[path] = value
        elif kind is dict or isinstance(value, Mapping):
            _flat_params(value, path + ".", out)
        else:
            out[path] = _plain(value)


def _number(value: Any) -> float | int | None:
    """`finite_number`, with the common float tested first."""
    if type(value) is float:
        return value if math.isfinite(value) else None
    return finite_number(value)


def _numbers(values: Any) -> list[float | int | None] | None:
    """A trial's ``objectives``: each value `_number`, or None when it has none."""
    if not isinstance(values, list):
        return None
    return [_number(v) for v in values]


def _count(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def epochs_trained(doc: Mapping[str, Any], planned: int | None) -> int | None:
    """The epochs a finished trial trained: a pruned one's ``pruned_epoch`` (its last
    epoch), else the last epoch it reported, else (complete) the `planned` epochs. None
    while it is not finished (its row then changes only with its state, not every epoch),
    or when nothing says (a finish logged before these fields were kept)."""
    state = doc.get("state")
    if state not in _FINISHED:
        return None
    if state == PRUNED:
        pruned = _count(doc.get("pruned_epoch"))
        if pruned is not None:
            return pruned
    progress = doc.get("progress")
    reported = _count(progress.get("epoch")) if isinstance(progress, Mapping) else None
    if reported is not None:
        return reported
    return planned if state == COMPLETE else (0 if state == FAILED else None)


def pruned_stop(doc: Mapping[str, Any]) -> int | None:
    """The epoch a pruned trial stopped at (its ``pruned_epoch``), else None."""
    return _count(doc.get("pruned_epoch")) if doc.get("state") == PRUNED else None


def trial_row(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The compact row of one trial document (a `changed_rows` row or a whole trial)."""
    config = doc.get("config")
    training = config.get("training") if isinstance(config, Mapping) else None
    planned = _count(training.get("epochs")) if isinstance(training, Mapping) else None
    model = config.get("model") if isinstance(config, Mapping) else None
    if not isinstance(model, Mapping):
        model = {}
    units = model.get("hidden_units")
    if isinstance(units, list):
        units = sum(units) / len(units) if units else None
    layers = model.get("hidden_layers")
    worker = doc.get("worker")
    params: dict[str, Any] = {}
    nested = doc.get("params")
    if nested:
        _flat_params(nested, "", params)
    error = doc.get("error")
    return {
        "id": doc["_id"],
        "index": int(doc["index"]),
        "state": doc.get("state"),
        "params": params,
        "objective": _number(doc.get("objective")),
        # Every objective's value and the constraints' verdict (None: not measured, or no
        # constraint), for the sweep page's Pareto front (`dashboard.front`).
        "objectives": _numbers(doc.get("objectives")),
        "feasible": feasible if isinstance(feasible := doc.get("feasible"), bool) else None,
        "train_seconds": _number(doc.get("train_seconds")),
        "param_count": _count(doc.get("param_count")),
        "finished_at": to_ms(doc.get("finished_at")),
        "started_at": to_ms(doc.get("started_at")),
        "layers": layers if isinstance(layers, int) else None,
        "units": _number(units),
        "seed": doc.get("seed"),
        "attempt": doc.get("attempt"),
        "worker": worker.get("name") if isinstance(worker, Mapping) else None,
        "device": doc.get("device"),
        "error": None if error is None else first_line(error),
        "pruned_epoch": _count(doc.get("pruned_epoch")),
        "epochs": epochs_trained(doc, planned),
        "planned_epochs": planned,
    }


def better(direction: str) -> bool:
    """Whether a larger objective is better."""
    return direction == "maximize"


def rank_key(direction: str) -> Callable[[Mapping[str, Any]], tuple[float, int]]:
    """A sort key putting the best objective first; equal objectives: the earlier trial."""
    if better(direction):
        return lambda row: (-row["objective"], row["index"])
    return lambda row: (row["objective"], row["index"])


def complete_rows(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The complete trials that have a finite objective."""
    return [r for r in rows if r["state"] == COMPLETE and r["objective"] is not None]


# -- the sweep's summary ---------------------------------------------------------------


def activity(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """What the throughput is measured on: ``finished``, how many trials finished
    (complete, failed, pruned); ``first_start``, when the first trial started (ms; its
    first finish if none says); ``last_finish``, when the last one finished (ms)."""
    finished = 0
    first: int | None = None
    last: int | None = None
    earliest_finish: int | None = None
    for row in rows:
        started = row.get("started_at")
        if started is not None and (first is None or started < first):
            first = started
        at = row["finished_at"]
        if row["state"] not in _FINISHED or at is None:
            continue
        finished += 1
        if last is None or at > last:
            last = at
        if earliest_finish is None or at < earliest_finish:
            earliest_finish = at
    return {"finished": finished, "first_start": first if first is not None else earliest_finish,
            "last_finish": last}


def summary(counts: Mapping[str, int], active: Mapping[str, Any], now_ms: int) -> dict[str, Any]:
    """Counts by state, progress, throughput (trials/min over the sweep's active time) and ETA.

    `active` is `activity`. The active time runs from the first trial's start to the last
    finish once nothing is left, or to now while trials are queued or running: a finished
    sweep's throughput stays what it was (a window of the last minutes would fall to zero
    after the end, and read low long before). The ETA is what is left (queued + running)
    at that rate: 0 when nothing is left, None when nothing finished yet.
    """
    total = sum(counts.values())
    left = counts.get(QUEUED, 0) + counts.get(RUNNING, 0)
    start, last = active["first_start"], active["last_finish"]
    seconds: float | None = None
    per_minute = 0.0
    if start is not None:
        end = now_ms if left or last is None else last
        seconds = max(end - start, 1000) / 1000
        per_minute = active["finished"] * 60 / seconds
    eta: float | None = None
    if not left:
        eta = 0.0
    elif per_minute > 0:
        eta = left / per_minute * 60
    return {
        "counts": dict(counts),
        "total": total,
        "done": total - left,
        "left": left,
        "per_minute": round(per_minute, 3),
        "active_seconds": None if seconds is None else round(seconds, 1),
        "eta_seconds": None if eta is None else round(eta, 1),
    }


# -- figures of the sweep --------------------------------------------------------------


def _hashable(value: Any) -> Any:
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value


def objective_by_width(
    rows: Iterable[Mapping[str, Any]], direction: str, paths: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """The seed paper's first figure: objective against hidden units, per depth.

    For each (depth, width), the trials are grouped by their other settings (every
    parameter but depth, width and seeds; `paths` lists the sweep's parameters); the group
    with the best mean objective is shown: its ``mean``, and ``low``/``high`` the spread
    over its seeds (min and max). ``setting`` names that group's other parameters; ``n``
    counts its trials and ``trials`` every trial at that depth and width. Rows are sorted
    by depth, then width.
    """
    done = complete_rows(rows)
    if paths is None:
        paths = list(dict.fromkeys(p for r in done for p in r["params"]))
    others = [
        p
        for p in paths
        if p not in ("model.hidden_layers", "model.hidden_units") and not p.endswith(SEED_KEYS)
    ]
    cells: dict[tuple[int, float], dict[tuple, list[float]]] = {}
    for row in done:
        if row["layers"] is None or row["units"] is None:
            continue
        params = row["params"]
        key = tuple(_hashable(params.get(p)) for p in others)
        groups = cells.setdefault((row["layers"], row["units"]), {})
        groups.setdefault(key, []).append(row["objective"])
    pick = max if better(direction) else min
    out = []
    for (layers, units), groups in sorted(cells.items()):
        means = {key: sum(v) / len(v) for key, v in groups.items()}
        key = pick(sorted(means, key=repr), key=lambda k: means[k])
        values = groups[key]
        out.append(
            {
                "layers": layers,
                "units": units,
                "mean": means[key],
                "low": min(values),
                "high": max(values),
                "n": len(values),
                "trials": sum(len(v) for v in groups.values()),
                "setting": {
                    path: value_text(value) for path, value in zip(others, key, strict=True)
                },
            }
        )
    return out




def failed_trials(rows: Iterable[Mapping[str, Any]], n: int = 50) -> list[Mapping[str, Any]]:
    """The `n` most recently finished failed trials, newest first."""
    failed = [r for r in rows if r["state"] == FAILED]
    return heapq.nlargest(n, failed, key=lambda r: (r["finished_at"] or 0, r["index"]))


def pruned_trials(rows: Iterable[Mapping[str, Any]], n: int = 50) -> list[Mapping[str, Any]]:
    """The `n` most recently finished pruned trials, newest first."""
    pruned = [r for r in rows if r["state"] == PRUNED]
    return heapq.nlargest(n, pruned, key=lambda r: (r["finished_at"] or 0, r["index"]))


def public_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """What a page gets of a trial row: all of it (a copy, so the table stays private), and
    ``text``, each parameter's value as its tables show it (`core.spec.values.short_text`;
    a null value has none, and shows as a dash as a missing one does)."""
    params = row["params"]
    text = {path: short_text(value) for path, value in params.items() if value is not None}
    return {**row, "params": dict(params), "text": text}
