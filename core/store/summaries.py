"""Summaries of a sweep kept up to date as its trials finish, so that whole-sweep reads
(the best trials, the dashboard's table) need not read every trial.

Why: SecantusDB reads ~60 µs per document, so anything that reads every trial of a
50,000-trial sweep takes seconds (the dashboard's first open: ~10 s; `Reads.best`: ~4 s).
A summary is written by whoever finishes trials (`on_finished`, called through
`core.store.state.StoreState.log_finished`), and is a *cache* of what the trials say: `build`
makes it from the trials, and a sweep that has none (made before summaries existed) gets one
on its first read that needs it (`Reads.best`, `Reads.sweep_rows`).

Collection ``summaries``, two kinds of document:

- ``{_id: sweep_id, sweep_id, kind: "top", top: [{objective, index, id}]}``: at
  most `TOP_K` complete trials with the best finite objective, best first (ties: lower
  index), kept by one ``$push`` with ``$each``/``$sort``/``$slice`` per finish, so
  concurrent finishes never lose each other. A complete trial never changes (retry only
  requeues failed trials), so the list only grows better. It may hold an entry twice
  (a finish racing a rebuild): readers drop repeats by index (`top_entries`).
- ``{_id: "<sweep_id>:view:<name>", sweep_id, version, data}``: a view computed from a
  whole sweep by a reader (the dashboard's first data of a finished sweep), stored with
  the version of the sweep it shows, so that the next process to start serves it without
  reading the sweep (`view_snapshot`); the reader decides what a version is.
- ``{_id: "<sweep_id>:log:<chunk>", sweep_id, rows: [bytes]}``: the finish log. Each
  finish appends one entry (JSON bytes: `ROW_FIELDS` of the trial as it finished, times
  in ms) to the chunk of its index (`CHUNK` indexes per document, so an append rewrites a
  small document and a whole sweep is a few hundred documents: 50,000 entries read in
  ~0.2 s, against ~7 s for the trials themselves). A trial finished twice (failed,
  retried, finished again) has two entries: the later ``updated_at`` wins. The log holds
  finishes only: `finished_rows` is merged with the live trials that are not finished
  (queued, running, cancelled; `Reads.sweep_rows`), newest ``updated_at`` first.

The summary write comes after the trial write, so a process killed between them leaves a
summary short of that finish (as with the sweep's counts and `recount`): the dashboard's
read (`Reads.sweep_rows`) checks that the log accounts for every trial, and when it does not,
clears the summaries and builds them again from the trials it read.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from pymongo import UpdateOne
from pymongo.database import Database

from core.states import FINISH_STATES, TrialState
from core.store.query import get_path
from core.store.records import finite_number

log = logging.getLogger(__name__)

COLLECTION = "summaries"
#: How many best complete trials the top summary keeps (`best(k)` past it reads every
#: complete trial; a longer list makes every finish slower: SecantusDB sorts it in Python).
TOP_K = 20
#: Trial indexes per finish-log document.
CHUNK = 128
#: The trial fields a finish-log entry keeps (dotted paths), besides ``_id`` and ``index``.
ROW_FIELDS = (
    "state",
    "params",
    "objective",
    "train_seconds",
    # For the dashboard's training time against model size and the analysis's cost laws and
    # front (`core.analysis`; absent from older entries): a fused trial's time is its group's.
    "param_count",
    # Every objective's value, the constraints' verdict and the multiply-adds, for the
    # Pareto front (`core.analysis.pareto`; absent from older entries).
    "objectives",
    "feasible",
    "macs",
    "fused",
    "finished_at",
    "started_at",
    "updated_at",
    "seed",
    "attempt",
    "worker.name",
    "device",
    "error",
    "config.model.hidden_layers",
    "config.model.hidden_units",
    # What a finished trial trained, for the dashboard's best-against-epochs chart: a pruned
    # trial's last epoch (set by its finish), the last epoch reported, the epochs planned.
    "pruned_epoch",
    "progress.epoch",
    "config.training.epochs",
)
_TIMES = ("finished_at", "started_at", "updated_at")
#: An error keeps this many characters in the log (pages show its first line).
_ERROR_CHARS = 1000
_COMPLETE = TrialState.COMPLETE.value
#: The states a finish-log entry can have (`TrialLifecycle.finish_many`).
LOGGED_STATES = frozenset(s.value for s in FINISH_STATES) | {TrialState.CANCELLED.value}

_directions: dict[str, str] = {}


def _direction(db: Database, sweep_id: str) -> str | None:
    """The sweep's objective direction (it never changes, so it is remembered)."""
    if sweep_id not in _directions:
        doc = db["sweeps"].find_one({"_id": sweep_id}, {"objective.direction": 1})
        if doc is None:
            return None
        if len(_directions) > 10_000:
            _directions.clear()
        _directions[sweep_id] = (doc.get("objective") or {}).get("direction", "maximize")
    return _directions[sweep_id]


def top_sort(direction: str) -> dict[str, int]:
    """The ``$sort`` of the top list: best objective first, then the lower index."""
    return {"objective": -1 if direction == "maximize" else 1, "index": 1}


def _log_id(sweep_id: str, index: int) -> str:
    return f"{sweep_id}:log:{int(index) // CHUNK:08d}"


def _ms(value: Any) -> Any:
    return int(value.timestamp() * 1000) if isinstance(value, datetime) else value


def _put(out: dict[str, Any], path: str, value: Any) -> None:
    *parents, key = path.split(".")
    node = out
    for part in parents:
        node = node.setdefault(part, {})
    node[key] = value


def _projected(doc: Mapping[str, Any], path: str, row: dict[str, Any]) -> bool:
    """Whether `path` is in `doc`; makes in `row` the sub-documents a projection of it
    keeps (MongoDB keeps ``config.training: {}`` for a missing ``config.training.epochs``)."""
    *parents, key = path.split(".")
    source: Any = doc
    target = row
    for part in parents:
        source = source.get(part) if isinstance(source, Mapping) else None
        if not isinstance(source, Mapping):
            return False
        target = target.setdefault(part, {})
    return key in source


def entry(doc: Mapping[str, Any]) -> bytes:
    """A finish-log entry of a trial document: `ROW_FIELDS`, times in ms since the epoch,
    as a projection of the trial on them reads (a missing field stays missing)."""
    row: dict[str, Any] = {"_id": doc["_id"], "index": int(doc["index"])}
    for path in ROW_FIELDS:
        if not _projected(doc, path, row):
            continue
        value = get_path(doc, path)
        if path in _TIMES:
            value = _ms(value)
        elif path == "error" and isinstance(value, str):
            value = value[:_ERROR_CHARS]
        _put(row, path, value)
    return json.dumps(row, separators=(",", ":"), default=str).encode()


def _dated(row: dict[str, Any]) -> dict[str, Any]:
    for path in _TIMES:
        if isinstance(row.get(path), int):
            row[path] = datetime.fromtimestamp(row[path] / 1000, UTC)
    return row


def _top_item(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    objective = finite_number(doc.get("objective"))
    if doc.get("state") != _COMPLETE or objective is None:
        return None
    return {"objective": objective, "index": int(doc["index"]), "id": doc["_id"]}


def _writes(
    sweep_id: str, direction: str | None, docs: Iterable[Mapping[str, Any]]
) -> list[UpdateOne]:
    """The log appends (one per chunk) and the top push for finished trial documents."""
    chunks: dict[str, list[bytes]] = {}
    top: list[dict[str, Any]] = []
    for doc in docs:
        if doc.get("state") not in LOGGED_STATES:
            continue
        chunks.setdefault(_log_id(sweep_id, doc["index"]), []).append(entry(doc))
        item = _top_item(doc)
        if item is not None:
            top.append(item)
    ops = [
        UpdateOne(
            {"_id": chunk_id},
            {"$push": {"rows": {"$each": rows}}, "$setOnInsert": {"sweep_id": sweep_id}},
            upsert=True,
        )
        for chunk_id, rows in chunks.items()
    ]
    if top and direction is not None:
        # No upsert: a sweep without a top document gets a whole one from `build`.
        ops.append(
            UpdateOne(
                {"_id": sweep_id},
                {"$push": {"top": {"$each": top, "$sort": top_sort(direction),
                                   "$slice": TOP_K}}},
            )
        )  # fmt: skip
    return ops


def on_finished(db: Database, sweep_id: str, trial_docs: Sequence[Mapping[str, Any]]) -> None:
    """Record trials that just finished (their documents as finished: state, objective,
    times...) in the sweep's summaries, in one round trip. Call it after the trial writes
    succeeded, once per finish; documents in other states are ignored."""
    if not trial_docs:
        return
    ops = _writes(sweep_id, _direction(db, sweep_id), trial_docs)
    if ops:
        db[COLLECTION].bulk_write(ops, ordered=False)


def on_created(db: Database, sweep_id: str, direction: str) -> None:
    """Give a new sweep (no trial finished yet) its empty top summary."""
    _directions[sweep_id] = direction
    db[COLLECTION].update_one(
        {"_id": sweep_id},
        {"$setOnInsert": {"sweep_id": sweep_id, "kind": "top", "top": []}},
        upsert=True,
    )


def top_document(db: Database, sweep_id: str) -> dict[str, Any] | None:
    """The sweep's top summary, or None if it has none yet (see `build`)."""
    return db[COLLECTION].find_one({"_id": sweep_id})


def top_entries(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The top list of a summary, best first, repeats dropped."""
    seen: set[int] = set()
    out = []
    for item in summary.get("top") or []:
        if item["index"] not in seen:
            seen.add(item["index"])
            out.append(item)
    return out


def finished_rows(db: Database, sweep_id: str) -> dict[int, dict[str, Any]]:
    """The latest finish-log entry of each logged trial, by index (see the module doc)."""
    rows: dict[int, dict[str, Any]] = {}
    query = {"_id": {"$gte": f"{sweep_id}:log:", "$lt": f"{sweep_id}:log;"}}
    for chunk in db[COLLECTION].find(query, {"rows": 1}):
        # One decode per chunk: a call per entry costs three times as much.
        for row in json.loads(b"[" + b",".join(chunk.get("rows") or []) + b"]"):
            old = rows.get(row["index"])
            if old is None or (row.get("updated_at") or 0) >= (old.get("updated_at") or 0):
                rows[row["index"]] = row
    return {index: _dated(row) for index, row in rows.items()}


def build(
    db: Database, sweep_id: str, direction: str, finished: Iterable[Mapping[str, Any]]
) -> None:
    """Write a sweep's summaries from its finished trial documents (`ROW_FIELDS` at least),
    read after the sweep's log was cleared or never written: appends every entry, then
    creates the top summary if there is none. Entries are idempotent (the latest wins), so
    a finish that lands meanwhile is at worst logged twice; the caller re-applies the
    finishes that happened while it read (`catch_up`)."""
    docs = list(finished)
    ops = _writes(sweep_id, None, docs)
    for start in range(0, len(ops), 200):
        db[COLLECTION].bulk_write(ops[start : start + 200], ordered=False)
    items = [item for item in map(_top_item, docs) if item is not None]
    sign = top_sort(direction)["objective"]
    items.sort(key=lambda item: (sign * item["objective"], item["index"]))
    _directions[sweep_id] = direction
    db[COLLECTION].update_one(
        {"_id": sweep_id},
        {"$setOnInsert": {"sweep_id": sweep_id, "kind": "top", "top": items[:TOP_K]}},
        upsert=True,
    )
    log.info("built the summaries of sweep %s from %d finished trials", sweep_id, len(docs))


def catch_up(db: Database, sweep_id: str, docs: Iterable[Mapping[str, Any]]) -> None:
    """Apply finishes that may have landed while `build` read (repeats are harmless)."""
    on_finished(db, sweep_id, list(docs))


def _view_id(sweep_id: str, name: str) -> str:
    return f"{sweep_id}:view:{name}"


def view_snapshot(db: Database, sweep_id: str, name: str) -> tuple[str, bytes] | None:
    """A stored view of a sweep (`keep_view_snapshot`): (its version, its bytes), or None."""
    doc = db[COLLECTION].find_one({"_id": _view_id(sweep_id, name)})
    if doc is None:
        return None
    return doc["version"], bytes(doc["data"])


def keep_view_snapshot(db: Database, sweep_id: str, name: str, version: str, data: bytes) -> None:
    """Store a view computed from a whole sweep (a page's first data), under a version
    that says which state of the sweep it shows; a newer one replaces it."""
    db[COLLECTION].update_one(
        {"_id": _view_id(sweep_id, name)},
        {"$set": {"sweep_id": sweep_id, "version": version, "data": data}},
        upsert=True,
    )


def clear(db: Database, sweep_id: str) -> None:
    """Remove a sweep's summaries (when it is deleted, or before they are built again)."""
    _directions.pop(sweep_id, None)
    db[COLLECTION].delete_many(
        {"_id": {"$gte": f"{sweep_id}", "$lt": f"{sweep_id};"}, "sweep_id": sweep_id}
    )
