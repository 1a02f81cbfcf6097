"""A sweep's trials as CSV or JSON Lines, one row per trial, produced while it streams; or
one row per epoch (`epoch_rows`, ``sweepstack export --epochs``).

Each row has the trial's id, index, state, attempt, seed and objective, its parameters
(one column per parameter path of the spec, empty where a conditional one is off), its
final metrics (the last epoch's ``val_accuracy``, ``val_loss``, ``val_rmse``,
``train_loss``), the epochs run, the epoch a pruned trial stopped at, training seconds,
parameter count, device and error.
JSON Lines carries the same, with ``params`` and ``final`` as objects. Trials are read a
page at a time in index order, so memory stays flat however large the sweep. Parquet (the
CLI's ``--format parquet``) has the CSV's columns, each with its own type.

In core so that every entry point writes the same rows: the API's ``/export``, the
dashboard's downloads and ``sweepstack export``.

Given `indexes` (a caller's selection, such as the dashboard's filtered table), only the
trials at those indexes are written, read a window of `PAGE` indexes at a time
(`core.store.roles.Reads.trials_at`).

Per epoch: one row per epoch of each trial's final attempt, with the trial's id, index,
state, attempt and parameters, and that epoch's metrics (all it reported; in CSV and
Parquet one column each, named from the first `PAGE` rows). Trials are read a page at a
time with their rows (`core.store.roles.Reads.epoch_rows`).
"""

from __future__ import annotations

import bisect
import csv
import io
import itertools
import json
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from core.errors import SpecError, SweepstackError
from core.spec.sweep import METRICS, load_spec
from core.spec.values import csv_safe
from core.store.records import flatten_params
from core.store.roles import Reads

log = logging.getLogger(__name__)
PAGE = 1000
HEAD = ("id", "index", "state", "attempt", "seed", "objective")
TAIL = ("epochs", "pruned_epoch", "train_seconds", "param_count", "device", "error")
#: The trial fields a row is made of (`row`), for reads of a selection.
FIELDS = (
    "index",
    "state",
    "attempt",
    "seed",
    "objective",
    "params",
    "result.final",
    "result.epochs",
    "pruned_epoch",
    "train_seconds",
    "param_count",
    "device",
    "error",
)


def plain(value: Any) -> Any:
    """`value` with only JSON's types: times as RFC 3339 text, NaN and infinities as None."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, datetime):
        moment = value.astimezone(UTC) if value.tzinfo else value
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    return str(value)


def param_columns(sweep: dict[str, Any]) -> list[str]:
    """The parameter paths of the sweep's spec that vary, in the spec's order."""
    try:
        return [dim.path for dim in load_spec(sweep.get("spec") or {}).dimensions]
    except SpecError:  # a spec stored under older rules: the parameters come from the rows
        return []


def _pages(
    reads: Reads, sweep_id: str, indexes: Sequence[int] | None = None
) -> Iterator[dict[str, Any]]:
    if indexes is not None:  # a window of PAGE indexes at a time: a short range, or a few
        chosen = sorted(set(indexes))
        start = 0
        while start < len(chosen):
            stop = bisect.bisect_left(chosen, chosen[start] + PAGE, lo=start)
            yield from reads.trials_at(sweep_id, chosen[start:stop], FIELDS)
            start = stop
        return
    cursor = None
    while True:
        docs, cursor = reads.trials(sweep_id, limit=PAGE, cursor=cursor)
        yield from docs
        if cursor is None:
            return


def row(doc: dict[str, Any]) -> dict[str, Any]:
    """One trial as an export row (JSON Lines form)."""
    result = doc.get("result") or {}
    return plain(
        {
            "id": doc["_id"],
            "index": doc.get("index"),
            "state": doc.get("state"),
            "attempt": doc.get("attempt"),
            "seed": doc.get("seed"),
            "objective": doc.get("objective"),
            "params": flatten_params(doc.get("params")),
            "final": result.get("final") or {},
            "epochs": result.get("epochs"),
            "pruned_epoch": doc.get("pruned_epoch"),
            "train_seconds": doc.get("train_seconds"),
            "param_count": doc.get("param_count"),
            "device": doc.get("device"),
            "error": doc.get("error"),
        }
    )


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value)
    return csv_safe(value)


def jsonl(reads: Reads, sweep_id: str, indexes: Sequence[int] | None = None) -> Iterator[str]:
    """The export as JSON Lines (of the trials at `indexes` only, when given)."""
    try:
        for doc in _pages(reads, sweep_id, indexes):
            yield json.dumps(row(doc), allow_nan=False) + "\n"
    except SweepstackError as exc:  # the status is sent: all that is left is to stop
        log.error("export of sweep %s stopped: %s", sweep_id, exc)


def _csv_stream(
    table: Callable[[], tuple[list[str], Iterator[list[Any]]]], what: str
) -> Iterator[str]:
    """CSV text of the header and rows `table` gives (it reads as it is iterated), in
    chunks of 200 rows; a store error ends it early, logged with `what` (the status line of
    a streamed response has gone already)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    try:
        header, rows = table()
        writer.writerow(header)
        for n, cells in enumerate(rows):
            writer.writerow([_cell(c) for c in cells])
            if n % 200 == 0:
                yield buffer.getvalue()
                buffer.seek(0)
                buffer.truncate()
    except SweepstackError as exc:
        log.error("%s stopped: %s", what, exc)
    yield buffer.getvalue()


def csv_text(
    reads: Reads, sweep: dict[str, Any], indexes: Sequence[int] | None = None
) -> Iterator[str]:
    """The export as CSV, the header first (of the trials at `indexes` only, when given)."""

    def table() -> tuple[list[str], Iterator[list[Any]]]:
        docs = _pages(reads, sweep["_id"], indexes)
        first = next(docs, None)
        columns = _columns(sweep, first)
        chained = itertools.chain([first] if first is not None else [], docs)
        return [*HEAD, *columns, *METRICS, *TAIL], (_cells(d, columns) for d in chained)

    return _csv_stream(table, f"export of sweep {sweep['_id']}")


def _columns(sweep: dict[str, Any], first: dict[str, Any] | None) -> list[str]:
    """The parameter columns: the spec's paths, then any other the first trial has."""
    columns = param_columns(sweep)
    for path in flatten_params((first or {}).get("params")):
        if path not in columns:
            columns.append(path)
    return columns


def _cells(doc: dict[str, Any], columns: list[str]) -> list[Any]:
    """One trial's values under the header ``HEAD, columns, METRICS, TAIL``."""
    data = row(doc)
    cells = [data[name] for name in HEAD]
    cells += [data["params"].get(path) for path in columns]
    cells += [data["final"].get(metric) for metric in METRICS]
    cells += [data[name] for name in TAIL]
    return cells


def _arrow_column(values: list[Any]) -> Any:
    """A pyarrow array of one column: its own type where the values share one, else text
    (a list-valued parameter as JSON, as in the CSV)."""
    import pyarrow as pa

    if any(isinstance(v, dict | list) for v in values):
        return pa.array([None if v is None else json.dumps(v) for v in values], pa.string())
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # e.g. a choice of numbers and words
        return pa.array([None if v is None else str(v) for v in values], pa.string())


def write_parquet(reads: Reads, sweep: dict[str, Any], path: str) -> int:
    """The export as a Parquet file at `path` (the CSV's columns, typed); the rows written.

    The columns are built in memory (a 50,000-trial sweep is a few MB), so that each gets
    one type; store errors are raised, not logged: nothing has been sent yet.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    docs = _pages(reads, sweep["_id"])
    first = next(docs, None)
    columns = _columns(sweep, first)
    names = [*HEAD, *columns, *METRICS, *TAIL]
    values: list[list[Any]] = [[] for _ in names]
    count = 0
    for doc in itertools.chain([first] if first is not None else [], docs):
        for column, value in zip(values, _cells(doc, columns), strict=True):
            column.append(value)
        count += 1
    table = pa.table({name: _arrow_column(vals) for name, vals in zip(names, values, strict=True)})
    pq.write_table(table, path)
    return count


# -- one row per epoch ------------------------------------------------------------------

#: The leading columns of a per-epoch row: the trial, the attempt its rows are of, the epoch.
EPOCH_HEAD = ("id", "index", "state", "attempt", "epoch")


def epoch_pages(reads: Reads, sweep_id: str) -> Iterator[list[dict[str, Any]]]:
    """Each page of trials (whole records), in index order, each with ``rows``: its final
    attempt's epoch rows, by epoch (one read of the metrics per page). The per-epoch rows
    here and the trackers' runs (`core.store.trackers`) are read through it."""
    cursor = None
    while True:
        docs, cursor = reads.trials(sweep_id, limit=PAGE, cursor=cursor)
        attempts = {d["_id"]: int(d.get("attempt") or 0) for d in docs}
        curves = reads.epoch_rows(attempts) if attempts else {}
        for doc in docs:
            doc["rows"] = curves.get(doc["_id"], {})
        yield docs
        if cursor is None:
            return


def epoch_rows(reads: Reads, sweep_id: str) -> Iterator[dict[str, Any]]:
    """The sweep's per-epoch rows (JSON Lines form): one per epoch of each trial's final
    attempt, with the trial's id, index, state, attempt and parameters, and that epoch's
    metrics (every one the trial reported: a Caffe net's evaluation, a training function's
    own)."""
    for docs in epoch_pages(reads, sweep_id):
        for doc in docs:
            params = flatten_params(doc.get("params"))
            for epoch in sorted(doc["rows"]):
                metrics = {k: v for k, v in doc["rows"][epoch].items() if k != "epoch"}
                yield plain({"id": doc["_id"], "index": doc.get("index"),
                             "state": doc.get("state"), "attempt": doc.get("attempt"),
                             "epoch": epoch, "params": params, "metrics": metrics})  # fmt: skip


def epochs_jsonl(reads: Reads, sweep_id: str) -> Iterator[str]:
    """The per-epoch export as JSON Lines."""
    try:
        for data in epoch_rows(reads, sweep_id):
            yield json.dumps(data, allow_nan=False) + "\n"
    except SweepstackError as exc:
        log.error("per-epoch export of sweep %s stopped: %s", sweep_id, exc)


def _epoch_columns(
    sweep: dict[str, Any], rows: list[dict[str, Any]]
) -> tuple[list[str], list[str]]:
    """The parameter columns and the metric columns (the usual metrics first, then the
    others the first rows have, sorted) of a per-epoch table."""
    columns = _columns(sweep, {"params": rows[0]["params"]} if rows else None)
    seen = {k for data in rows for k in data["metrics"]}
    metrics = [m for m in METRICS if m in seen] + sorted(seen - set(METRICS))
    return columns, metrics


def _epoch_cells(data: dict[str, Any], columns: list[str], metrics: list[str]) -> list[Any]:
    cells = [data[name] for name in EPOCH_HEAD]
    cells += [data["params"].get(path) for path in columns]
    return cells + [data["metrics"].get(metric) for metric in metrics]


def epochs_csv(reads: Reads, sweep: dict[str, Any]) -> Iterator[str]:
    """The per-epoch export as CSV: the header (its metric columns from the first page's
    rows), then one row per epoch."""

    def table() -> tuple[list[str], Iterator[list[Any]]]:
        rows = epoch_rows(reads, sweep["_id"])
        first = list(itertools.islice(rows, PAGE))
        columns, metrics = _epoch_columns(sweep, first)
        cells = (_epoch_cells(d, columns, metrics) for d in itertools.chain(first, rows))
        return [*EPOCH_HEAD, *columns, *metrics], cells

    return _csv_stream(table, f"per-epoch export of sweep {sweep['_id']}")


def write_epochs_parquet(reads: Reads, sweep: dict[str, Any], path: str) -> int:
    """The per-epoch export as a Parquet file at `path` (the CSV's columns, typed); the rows
    written. Built in memory, as `write_parquet`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = list(epoch_rows(reads, sweep["_id"]))
    columns, metrics = _epoch_columns(sweep, rows)
    names = [*EPOCH_HEAD, *columns, *metrics]
    values: list[list[Any]] = [[] for _ in names]
    for data in rows:
        for column, value in zip(values, _epoch_cells(data, columns, metrics), strict=True):
            column.append(value)
    table = pa.table({name: _arrow_column(vals) for name, vals in zip(names, values, strict=True)})
    pq.write_table(table, path)
    return len(rows)
