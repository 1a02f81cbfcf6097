"""The checks of a chaos run (`tests.integration.chaos`), read from the store alone.

For every sweep of the run: it ended (no trial queued or running) and holds exactly its
planned trials, each once; every trial ended exactly once (one terminal record in its
history, the last, of its final attempt, after ``lost`` ones only) and none failed (the
run's specs have no trial that fails); no (trial, attempt, epoch) row is stored twice;
the final attempt of each has every epoch row, 1..epochs when complete, 1..pruned_epoch
when pruned, and none of a later attempt; the sweep's counts equal a recount of its
trials.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pymongo.database import Database

TERMINAL = ("complete", "pruned", "failed", "cancelled")


@dataclass
class Check:
    """One check of a run: its name, whether it held, and what was seen."""

    name: str
    ok: bool
    detail: str


@dataclass
class Report:
    """What a run did and found: its events and checks, printable (`text`)."""

    seed: int
    events: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    def summary(self) -> str:
        """The checks, the notes and the verdict."""
        lines = ["checks:"]
        lines += [f"  [{'ok' if c.ok else 'FAIL'}] {c.name}: {c.detail}" for c in self.checks]
        lines += [f"  {n}" for n in self.notes]
        lines.append("chaos: PASSED" if self.ok else "chaos: FAILED")
        return "\n".join(lines)

    def text(self) -> str:
        """The whole report: the seed, every event, then `summary`."""
        lines = [f"chaos run, seed {self.seed}", "events:", *(f"  {e}" for e in self.events)]
        return "\n".join([*lines, self.summary()])


def check_sweeps(
    db: Database, sweeps: dict[str, tuple[str, int]], ended: bool, elapsed: float
) -> tuple[list[dict[str, Any]], list[Check], set[str]]:
    """Check `sweeps` (id -> (label, planned trials)) as the module docstring says: every
    trial document, the checks, and the ids of the trials a check found wrong."""
    docs = {sid: list(db["trials"].find({"sweep_id": sid})) for sid in sweeps}
    sweep_docs = {sid: db["sweeps"].find_one({"_id": sid}) or {} for sid in sweeps}
    every = [d for found in docs.values() for d in found]
    checks: list[Check] = []
    suspects: set[str] = set()

    unfinished = [
        f"{sid} ({label}): " + ", ".join(
            f"{s} {n}" for s, n in sorted(Counter(d["state"] for d in docs[sid]).items())
        )
        for sid, (label, _) in sweeps.items()
        if any(d["state"] not in TERMINAL for d in docs[sid])
    ]  # fmt: skip
    suspects |= {d["_id"] for d in every if d["state"] not in TERMINAL}
    checks.append(Check(
        "every sweep ended", ended and not unfinished,
        f"{len(sweeps) - len(unfinished)}/{len(sweeps)} sweeps, {len(every)} trials, in "
        f"{elapsed:.0f} s" + (f"; unfinished: {unfinished}" if unfinished else ""),
    ))  # fmt: skip

    wrong_size = [
        f"{sid} ({label}): {len(docs[sid])} trials, {len({d['_id'] for d in docs[sid]})} ids, "
        f"planned {total}, left planned {sweep_docs[sid].get('planned')}"
        for sid, (label, total) in sweeps.items()
        if len(docs[sid]) != total or len({d["_id"] for d in docs[sid]}) != total
        or sweep_docs[sid].get("planned") or sweep_docs[sid].get("trial_count") != total
    ]  # fmt: skip
    checks.append(Check(
        "each sweep has exactly its planned trials", not wrong_size,
        f"{sum(t for _, t in sweeps.values())} planned, {len(every)} created"
        + (f"; {wrong_size}" if wrong_size else ""),
    ))  # fmt: skip

    bad_end = {d["_id"]: why for d in every if (why := ended_once(d))}
    suspects |= set(bad_end)
    states = Counter(d["state"] for d in every)
    checks.append(Check(
        "each trial ended exactly once", not bad_end,
        ", ".join(f"{s} {n}" for s, n in sorted(states.items()))
        + (f"; {len(bad_end)} wrong: {list(bad_end.items())[:10]}" if bad_end else ""),
    ))  # fmt: skip

    failed = {d["_id"]: d.get("error") for d in every if d["state"] == "failed"}
    suspects |= set(failed)
    checks.append(Check(
        "no trial failed (none of these specs fails)", not failed,
        f"{len(failed)} failed" + (f": {list(failed.items())[:5]}" if failed else ""),
    ))  # fmt: skip

    found = db["metrics"].find(
        {"sweep_id": {"$in": list(sweeps)}}, {"trial_id": 1, "attempt": 1, "epoch": 1}
    )
    keys = [(r["trial_id"], r["attempt"], r["epoch"]) for r in found]
    twice = [k for k, n in Counter(keys).items() if n > 1]
    suspects |= {trial_id for trial_id, _, _ in twice}
    checks.append(Check(
        "no (trial, attempt, epoch) row twice", not twice,
        f"{len(keys)} rows" + (f"; twice: {twice[:10]}" if twice else ""),
    ))  # fmt: skip

    by_trial: dict[str, list[tuple[int, int]]] = {}
    for trial_id, attempt, epoch in keys:
        by_trial.setdefault(trial_id, []).append((attempt, epoch))
    bad_rows = {
        d["_id"]: f"{d['state']} at attempt {d.get('attempt')}: {why}"
        for d in every
        if (why := rows_wrong(d, by_trial.get(d["_id"], [])))
    }
    suspects |= set(bad_rows)
    checks.append(Check(
        "every epoch row of each final attempt, none after", not bad_rows,
        f"{len(every) - len(bad_rows)}/{len(every)} trials whole"
        + (f"; {list(bad_rows.items())[:10]}" if bad_rows else ""),
    ))  # fmt: skip

    drift = {
        f"{sid} ({label})": why
        for sid, (label, _) in sweeps.items()
        if (why := count_drift(sweep_docs[sid], docs[sid]))
    }
    checks.append(Check(
        "counts equal a recount", not drift,
        f"{len(sweeps) - len(drift)}/{len(sweeps)} sweeps" + (f"; {drift}" if drift else ""),
    ))  # fmt: skip
    return every, checks, suspects


def world_size(doc: dict[str, Any]) -> int:
    """A trial's data-parallel world size (1: not data-parallel)."""
    execution = (doc.get("config") or {}).get("execution") or {}
    return int((execution.get("parallel") or {}).get("world_size") or 1)


def chunked(doc: dict[str, Any]) -> bool:
    """Whether a trial trained in a chunk (a group message, alone: not fused)."""
    return int(doc.get("group_size") or 1) > 1 and int(doc.get("fused") or 1) == 1


def ended_once(doc: dict[str, Any]) -> str | None:
    """Why a trial did not end exactly once (None if it did): its state terminal, one
    terminal record in its history, the last, of its final attempt, after lost ones only."""
    history = doc.get("history") or []
    ends = [h for h in history if h.get("state") != "lost"]
    if doc["state"] not in TERMINAL:
        return f"state {doc['state']}"
    if len(ends) != 1:
        return f"{len(ends)} terminal records: {[h.get('state') for h in history]}"
    last = history[-1]
    if last.get("state") != doc["state"] or last.get("attempt") != doc.get("attempt"):
        return (f"last record {last.get('state')} of attempt {last.get('attempt')}, trial "
                f"{doc['state']} at attempt {doc.get('attempt')}")  # fmt: skip
    if len(history) != doc.get("attempt"):
        return f"{len(history)} records for {doc.get('attempt')} attempts"
    return None


def rows_wrong(doc: dict[str, Any], rows: list[tuple[int, int]]) -> str | None:
    """Why a trial's rows (attempt, epoch) are not whole (None if they are): its final
    attempt's epochs are 1..epochs (complete), 1..pruned_epoch (pruned), or a run from 1
    (failed); no row of a later attempt."""
    attempt = int(doc.get("attempt") or 0)
    final = sorted(e for a, e in rows if a == attempt)
    later = sorted({a for a, _ in rows if a > attempt})
    if later:
        return f"rows of attempts {later} after the final one"
    if doc["state"] == "complete":
        want = list(range(1, int(doc["config"]["training"]["epochs"]) + 1))
    elif doc["state"] == "pruned":
        want = list(range(1, int(doc.get("pruned_epoch") or 0) + 1))
        if not want:
            return f"pruned with pruned_epoch {doc.get('pruned_epoch')!r}"
    else:
        want = list(range(1, len(final) + 1))
    if final != want:
        return f"epochs {_runs(final)}, want {_runs(want)}"
    return None


def _runs(epochs: list[int]) -> str:
    """[1, 2, 3, 5] as '1-3, 5'."""
    out: list[str] = []
    for e in epochs:
        if out and out[-1].rsplit("-", 1)[-1] == str(e - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{e}"
        else:
            out.append(str(e))
    return ", ".join(out) or "none"


def count_drift(sweep: dict[str, Any], docs: list[dict[str, Any]]) -> str | None:
    """Where a sweep's counts differ from a recount of its trials (None where they agree)."""
    exact = Counter(d["state"] for d in docs)
    exact["queued"] += int(sweep.get("planned") or 0)
    counts = sweep.get("counts") or {}
    off = {s: (counts.get(s, 0), exact.get(s, 0)) for s in set(counts) | set(exact)
           if counts.get(s, 0) != exact.get(s, 0)}  # fmt: skip
    shown = [f"{s}: counted {c}, recounted {e}" for s, (c, e) in sorted(off.items())]
    return ", ".join(shown) or None
