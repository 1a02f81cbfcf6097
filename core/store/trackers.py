"""A sweep as the experiment trackers users run see it (MLflow, TensorBoard): one run for the
sweep, one run per trial, in the trackers' own terms and no tracker's types.

A `SweepRun` carries what the sweep was asked (its objective, search and pruning) and how
it ended (its trial counts), as parameters, and its best trial. A `TrialRun` carries a
trial's parameters (flattened to the spec's dotted paths, as the CSV export's columns; a
conditional parameter that was off is left out), its final attempt's curve (one step per
epoch: every number it reported that epoch, as the per-epoch export), its final metrics
(``result.final``, then ``objective``, ``train_seconds`` and ``param_count``) and its tags
(`TAG`-prefixed: trial id, sweep id, index, state, attempt, seed, dataset fingerprint,
device, dtype, error, and one ``versions.<package>`` per entry of the worker's `versions`).

The writers (`cli.export_mlflow`, `cli.export_tensorboard`) only translate these into a
tracker's calls, so both exports say the same about a sweep. Trials are read a page at a
time with their curves (`core.store.export.epoch_pages`), so memory stays flat.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.errors import SpecError
from core.spec.sweep import load_spec
from core.spec.values import value_text
from core.store.export import epoch_pages
from core.store.records import flatten_params
from core.store.roles import Reads

#: The prefix of the tags Sweepstack writes on a tracker's runs.
TAG = "sweepstack."
#: `TrialRun.role` / the ``sweepstack.role`` tag: which runs are a sweep's and which a trial's.
SWEEP_ROLE, TRIAL_ROLE = "sweep", "trial"
#: Numbers of a trial record that are kept as final metrics beside ``result.final``.
RECORD_METRICS = ("objective", "train_seconds", "param_count")
#: A reported key that is the row's place in the curve, not a metric.
STEP_KEY = "epoch"


def as_number(value: Any) -> float | None:
    """A metric value as a float (NaN and infinities kept: the trackers keep them); None for
    what is not a number (a boolean or a text a training function reported)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def numbers(metrics: Mapping[str, Any] | None) -> dict[str, float]:
    """The numeric metrics of a reported row, without its `STEP_KEY`."""
    out = {}
    for key, value in (metrics or {}).items():
        number = as_number(value)
        if key != STEP_KEY and number is not None:
            out[str(key)] = number
    return out


def millis(moment: Any) -> int | None:
    """A stored time as milliseconds since the epoch (None for none)."""
    return int(moment.timestamp() * 1000) if isinstance(moment, datetime) else None


def param_text(value: Any) -> str:
    """A parameter value as a tracker's text parameter: the platform's one spelling."""
    return value_text(value)


@dataclass(frozen=True)
class SweepRun:
    """The sweep's own run: `params` what it asked and how many trials ended how (objective,
    search, pruning, counts by state), `tags` who it is, `metrics` the best trial's
    objective (none without a complete trial)."""

    sweep_id: str
    name: str
    description: str
    objective: dict[str, str]
    params: dict[str, str]
    tags: dict[str, str]
    metrics: dict[str, float]
    start_ms: int | None
    end_ms: int | None
    finished: bool


@dataclass(frozen=True)
class TrialRun:
    """One trial as a run: its parameters (native values), its curve by step (epoch), its
    final metrics and its tags (text)."""

    trial_id: str
    index: int
    state: str
    params: dict[str, Any]
    curve: list[tuple[int, dict[str, float]]]
    final: dict[str, float]
    tags: dict[str, str]
    start_ms: int | None
    end_ms: int | None
    error: str | None = None

    @property
    def metric_names(self) -> list[str]:
        """Every metric of the run, in the order the curve, then the final metrics, name them."""
        names: list[str] = []
        for _, metrics in self.curve:
            names += [k for k in metrics if k not in names]
        return names + [k for k in self.final if k not in names]

    @property
    def last_step(self) -> int:
        """The step the final metrics belong to: the last epoch of the curve (0 without one)."""
        return self.curve[-1][0] if self.curve else 0

    @property
    def final_only(self) -> dict[str, float]:
        """The final metrics the curve does not already end with (the record's numbers, and
        any a trial reported only at its end): each is written once, at `last_step`."""
        last = self.curve[-1][1] if self.curve else {}
        return {k: v for k, v in self.final.items()
                if k not in last or not _same(last[k], v)}  # fmt: skip


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _spec_sections(sweep: Mapping[str, Any]) -> dict[str, Any]:
    """The sweep's search and pruning settings as dotted paths, defaults filled in (the raw
    document's sections for a spec stored under older rules)."""
    document = sweep.get("spec") or {}
    try:
        spec = load_spec(document)
    except SpecError:
        sections = {k: document.get(k) or {} for k in ("search", "pruning")}
        return flatten_params(sections)
    return flatten_params({"search": spec.search.model_dump(exclude_none=True),
                           "pruning": spec.pruning.model_dump(exclude_none=True)})  # fmt: skip


def sweep_run(sweep: Mapping[str, Any], best: Mapping[str, Any] | None) -> SweepRun:
    """The sweep's run, from its document (as `Reads.get_sweep` gives it) and its best trial
    (None without a complete one)."""
    objective = dict(sweep.get("objective") or {})
    counts = {str(k): int(v) for k, v in (sweep.get("counts") or {}).items()}
    params = {f"objective.{k}": str(v) for k, v in objective.items()}
    params |= {k: param_text(v) for k, v in _spec_sections(sweep).items() if v is not None}
    params["trials"] = str(sum(counts.values()))
    params |= {f"counts.{state}": str(n) for state, n in sorted(counts.items())}
    tags = {f"{TAG}sweep_id": str(sweep["_id"]), f"{TAG}role": SWEEP_ROLE}
    metrics: dict[str, float] = {}
    if best is not None:
        tags[f"{TAG}best_trial"] = str(best["_id"])
        value = as_number(best.get("objective"))
        if value is not None:
            metrics["objective"] = value
    active = counts.get("queued", 0) + counts.get("running", 0)
    return SweepRun(
        sweep_id=str(sweep["_id"]),
        name=str(sweep.get("name") or sweep["_id"]),
        description=str(sweep.get("description") or ""),
        objective=objective,
        params=params,
        tags=tags,
        metrics=metrics,
        start_ms=millis(sweep.get("created_at")),
        end_ms=millis(sweep.get("updated_at")),
        finished=active == 0,
    )


def trial_run(doc: Mapping[str, Any], rows: Mapping[int, Mapping[str, Any]]) -> TrialRun:
    """One trial as a run: `doc` its record, `rows` its final attempt's metrics by epoch
    (`Reads.epoch_rows`)."""
    params = {k: v for k, v in flatten_params(doc.get("params")).items() if v is not None}
    # The record's own figures are its final metrics, not curves: an epoch row's
    # ``train_seconds`` (the seconds trained so far, for a Pareto-rank pruner) would put a
    # second value at the last step beside the trial's.
    curve = [(int(epoch), {k: v for k, v in numbers(rows[epoch]).items()
                           if k not in RECORD_METRICS}) for epoch in sorted(rows)]  # fmt: skip
    result = doc.get("result") or {}
    final = numbers(result.get("final"))
    for name in RECORD_METRICS:
        value = as_number(doc.get(name))
        if value is not None:
            final[name] = value
    tags = {
        f"{TAG}trial_id": str(doc["_id"]),
        f"{TAG}sweep_id": str(doc.get("sweep_id", "")),
        f"{TAG}role": TRIAL_ROLE,
        f"{TAG}index": str(doc.get("index")),
        f"{TAG}state": str(doc.get("state")),
        f"{TAG}attempt": str(doc.get("attempt")),
    }
    for name in ("seed", "dataset_fingerprint", "device", "dtype", "error"):
        if doc.get(name) is not None:
            tags[f"{TAG}{name}"] = str(doc[name])
    for package, version in sorted((doc.get("versions") or {}).items()):
        tags[f"{TAG}versions.{package}"] = str(version)
    return TrialRun(
        trial_id=str(doc["_id"]),
        index=int(doc.get("index") or 0),
        state=str(doc.get("state")),
        params=params,
        curve=curve,
        final=final,
        tags=tags,
        start_ms=millis(doc.get("started_at")) or millis(doc.get("queued_at")),
        end_ms=millis(doc.get("finished_at")),
        error=doc.get("error"),
    )


def trial_runs(reads: Reads, sweep_id: str) -> Iterator[TrialRun]:
    """Every trial of the sweep as a run, in index order, read a page at a time with the
    curves of its final attempts."""
    for docs in epoch_pages(reads, sweep_id):
        for doc in docs:
            yield trial_run(doc, doc["rows"])
