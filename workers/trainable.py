"""Run a user's training function as a trial: ``trainable: NAME`` (`core.spec.trainable`).

A package declares its functions as entry points of the ``sweepstack.trainables`` group::

    [project.entry-points."sweepstack.trainables"]
    digits_cnn = "sweepstack_examples.digits_cnn:train"

and each is called as ``train(params, ctx)``: `params` the trial's resolved ``params``
section (nested as the spec writes it), `ctx` a `TrialContext` with what else it needs
(``report``, ``should_stop``, ``device``, ``seed``, ``epochs``, ``data_dir``, ``trial_id``,
``dataset()``, and ``save_checkpoint(state)``, ``load_checkpoint()``,
``save_artifact(name, path)`` for what it trains: `workers.checkpointing`). It may return
a mapping of final metrics, which joins the last reported row.

The runner (`workers.runner`) gives it the same guarantees as a built-in trial: the claim,
the heartbeats, epoch rows written as `workers.claims` says, the time limit (Celery's soft
limit raises in the function, which ends ``failed``), one finish per attempt, a killed
process taken over by the next attempt. Pruning and cancelling are cooperative, as in
Optuna (``trial.should_prune()``) and Ray Tune: ``should_stop()`` turns true, and a function
that then returns ends ``pruned`` (or ``cancelled``) with the rows it reported. Whatever it
raises ends it ``failed`` with ``ExceptionType: message`` (the traceback in the worker's log
only); running out of memory, CUDA's or the host's, is said so as for a built-in trial.

Before the call the worker seeds Python's `random`, NumPy's global generator and torch with
the trial's seed, so a function that draws from them is reproducible. The entry point is
loaded once per process; the record keeps the function's name, its entry point and its
package's name and version, beside the worker's own versions.
"""

from __future__ import annotations

import functools
import logging
import math
import random
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.errors import InvalidQuery, TrainingError
from core.spec.config import DatasetConfig, ExecutionConfig
from core.spec.trainable import KEY_PATTERN, TrainableConfig, installed_trainables
from workers.training.datasets import Dataset, load_dataset
from workers.training.device import describe, seed_torch, select_device
from workers.training.epochs import Checkpointing, failures_as_results
from workers.training.result import TrainResult, best_values

log = logging.getLogger(__name__)

_METRIC = re.compile(KEY_PATTERN)
#: The most metrics one report may carry (an epoch row is one document).
MAX_METRICS = 64


@dataclass(frozen=True)
class Loaded:
    """A training function and what the record says of it."""

    function: Callable[..., Any]
    record: dict[str, str]


@functools.cache
def load_trainable(name: str) -> Loaded:
    """The installed function `name`, imported once per process, or `TrainingError`."""
    found = installed_trainables()
    entry = found.get(name)
    if entry is None:
        have = ", ".join(sorted(found)) or "none"
        raise TrainingError(
            f"trainable {name!r} is not installed on this worker (installed: {have})"
        )
    try:
        function = entry.load()
    except Exception as exc:
        log.error("cannot import trainable %s (%s)", name, entry.value, exc_info=exc)
        raise TrainingError(
            f"trainable {name!r}: cannot import {entry.value}: {type(exc).__name__}: {exc}"
        ) from None
    if not callable(function):
        raise TrainingError(f"trainable {name!r}: {entry.value} is not callable")
    record = {"name": name, "entry_point": entry.value}
    if entry.dist is not None:
        record.update(package=entry.dist.name, version=entry.dist.version)
    return Loaded(function, record)


def _number(epoch: int, name: str, value: Any) -> float:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int | float | np.number):
        raise TrainingError(
            f"report(epoch={epoch}): {name} must be a number, got {type(value).__name__}"
        )
    number = float(value)
    if not math.isfinite(number):
        raise TrainingError(f"report(epoch={epoch}): {name} is {number} (not finite)")
    return number


@dataclass
class TrialContext:
    """What a training function gets beside its params: where it runs, its seed, and the
    two calls that tie it to the platform (`report` and `should_stop`)."""

    trial_id: str
    attempt: int
    seed: int
    epochs: int
    device: str
    data_dir: Path | None
    config: dict[str, Any]
    _on_epoch: Callable[[int, dict[str, Any]], None] = field(repr=False)
    _should_stop: Callable[[], bool] = field(repr=False)
    _dataset: DatasetConfig | None = field(default=None, repr=False)
    rows: list[dict[str, float]] = field(default_factory=list, repr=False)
    stopped: bool = field(default=False, repr=False)
    loaded: Dataset | None = field(default=None, repr=False)
    _checkpoints: Checkpointing | None = field(default=None, repr=False)
    _loaded_checkpoint: bool = field(default=False, repr=False)
    _since: float = field(default_factory=time.perf_counter, repr=False)

    def report(self, epoch: int, **metrics: float) -> None:
        """Record the metrics after `epoch` (counted from 1, each higher than the last):
        they are stored, shown on the dashboard and judged by the pruner."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 1:
            raise TrainingError(f"report(epoch={epoch!r}): epoch must be an integer >= 1")
        last = int(self.rows[-1]["epoch"]) if self.rows else 0
        if epoch <= last:
            raise TrainingError(f"report(epoch={epoch}): epochs must rise, the last was {last}")
        if not metrics or len(metrics) > MAX_METRICS:
            raise TrainingError(f"report(epoch={epoch}): give 1 to {MAX_METRICS} metrics")
        row: dict[str, float] = {"epoch": epoch}
        for name, value in metrics.items():
            if not _METRIC.match(name) or name == "epoch":
                raise TrainingError(f"report(epoch={epoch}): {name!r} is not a metric name")
            row[name] = _number(epoch, name, value)
        # The seconds trained so far, for a Pareto-rank pruner judging a `train_seconds`
        # objective at a rung (unless the function reports its own).
        row.setdefault("train_seconds", time.perf_counter() - self._since)
        self.rows.append(row)
        self._on_epoch(epoch, dict(row))

    def should_stop(self) -> bool:
        """Whether to stop now: pruned, cancelled, or another attempt took the trial over.
        Return soon after it turns true; what was reported so far is kept."""
        if self._should_stop():
            self.stopped = True
        return self.stopped

    def save_checkpoint(self, state: Any) -> None:
        """Save `state` as the trial's checkpoint, after the last epoch reported: a tree of
        dicts, lists and tuples of tensors, numbers and strings (``model.state_dict()``,
        ``optimizer.state_dict()``, ...), stored as safetensors and JSON, never pickled. Only
        the last one is kept; a later attempt of the trial gets it from `load_checkpoint`.
        """
        if self._checkpoints is None:
            log.info("ctx.save_checkpoint(): nothing keeps checkpoints here; not saved")
            return
        epoch = int(self.rows[-1]["epoch"]) if self.rows else 0
        try:
            self._checkpoints.save(epoch, state, {"metrics": list(self.rows)})
        except TypeError as exc:
            raise TrainingError(f"ctx.save_checkpoint(): {exc}") from None

    def load_checkpoint(self) -> Any | None:
        """The state the trial's last `save_checkpoint` saved (in an earlier attempt: its
        worker was killed or lost), or None. Call it before the first `report`: the epochs
        that checkpoint covers count as reported, so go on with the next one."""
        if self._checkpoints is None or self._loaded_checkpoint:
            return None
        self._loaded_checkpoint = True
        if self.rows:
            raise TrainingError("ctx.load_checkpoint(): call it before the first report")
        found = self._checkpoints.resumed()
        if found is None:
            return None
        state, meta = found
        self.rows = [dict(row) for row in meta.get("metrics", [])]
        self._checkpoints.resuming(meta)
        return state

    def save_artifact(self, name: str, path: str | Path) -> None:
        """Keep the file at `path` with the trial, as `name` (a model the function trained,
        a plot): downloadable with the trial, deleted with its sweep; held to the server's
        size ceilings."""
        if self._checkpoints is None:
            log.info("ctx.save_artifact(%r): nothing keeps artifacts here; not saved", name)
            return
        source = Path(path)
        if not source.is_file():
            raise TrainingError(f"ctx.save_artifact(): {name!r}: not a file")
        try:
            self._checkpoints.save_file(name, source.read_bytes())
        except InvalidQuery as exc:
            raise TrainingError(f"ctx.save_artifact(): {exc}") from None

    def dataset(self) -> Dataset:
        """The spec's ``dataset`` section loaded, split and standardised, as the built-in
        trainer sees it (``x_train``, ``y_train``, ``x_val``, ``y_val`` NumPy arrays)."""
        if self._dataset is None:
            raise TrainingError("ctx.dataset(): the spec has no dataset section")
        if self.loaded is None:
            self.loaded = load_dataset(self._dataset, self.data_dir)
        return self.loaded


def _seed_everything(seed: int, device: torch.device) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    seed_torch(seed, device)


def _final(ctx: TrialContext, returned: Any) -> dict[str, float]:
    row = dict(ctx.rows[-1]) if ctx.rows else {}
    if returned is None:
        return row
    if not isinstance(returned, Mapping):
        raise TrainingError(
            f"the function returned a {type(returned).__name__}; return None or a mapping "
            "of final metrics"
        )
    epoch = int(row.get("epoch", 0))
    for name, value in returned.items():
        if not isinstance(name, str) or not _METRIC.match(name) or name == "epoch":
            raise TrainingError(f"the function returned {name!r}, which is not a metric name")
        row[name] = _number(epoch, name, value)
    return row


def _best(rows: list[dict[str, float]], objective: Mapping[str, str]) -> dict[str, float]:
    """The best value of each built-in metric (`best_values`) and of the objective's."""
    best = best_values(rows)
    values = [row[objective["metric"]] for row in rows if objective["metric"] in row]
    if values:
        pick = max if objective["direction"] in ("maximize", "max") else min
        best[objective["metric"]] = pick(values)
    return best


def _check_objective(ctx: TrialContext, final: dict[str, float], metric: str) -> None:
    """A function that ran to its end must have reported the metric the sweep ranks by."""
    if ctx.stopped or any(metric in row for row in [*ctx.rows, final]):
        return
    names = sorted({name for row in [*ctx.rows, final] for name in row} - {"epoch"})
    raise TrainingError(
        f"the function never reported the objective's metric {metric!r} "
        f"(it reported: {', '.join(names) or 'nothing'})"
    )


def run_trainable(
    raw: dict[str, Any],
    *,
    trial_id: str,
    attempt: int,
    on_epoch: Callable[[int, dict[str, Any]], None],
    should_stop: Callable[[], bool],
    data_dir: Path | None,
    objective: Mapping[str, str],
    extra: dict[str, Any],
    checkpoints: Checkpointing | None = None,
) -> TrainResult:
    """Call the trial's training function and return what it gave as a `TrainResult`.

    A function that returns without being stopped must have reported `objective`'s metric.
    `extra` gets the function's record (``trainable``) and its package's version under
    ``versions``. Raises what the function raises; running out of memory is a
    `TrainingError` saying so.
    """
    started = time.perf_counter()
    config = TrainableConfig.model_validate(raw)
    loaded = load_trainable(config.trainable)
    extra["trainable"] = loaded.record
    if "package" in loaded.record:
        extra["versions"] = {
            **extra.get("versions", {}),
            loaded.record["package"]: loaded.record["version"],
        }
    device = select_device(ExecutionConfig(device=config.execution.device))
    seed = config.training.seed if config.training.seed is not None else 0
    ctx = TrialContext(
        trial_id=trial_id,
        attempt=attempt,
        seed=seed,
        epochs=config.training.epochs,
        device=str(device),
        data_dir=data_dir,
        config=config.model_dump(mode="json"),
        _on_epoch=on_epoch,
        _should_stop=should_stop,
        _dataset=config.dataset,
        _checkpoints=checkpoints,
    )
    _seed_everything(seed, device)
    ctx._since = time.perf_counter()
    setup = ctx._since - started
    returned = failures_as_results(lambda: loaded.function(config.params, ctx))
    final = _final(ctx, returned)
    _check_objective(ctx, final, objective["metric"])
    described = describe(device, torch.get_default_dtype())
    data = ctx.loaded
    return TrainResult(
        metrics=ctx.rows,
        final=final,
        best=_best([*ctx.rows, final] if final else ctx.rows, objective),
        param_count=0,
        train_seconds=time.perf_counter() - started - setup,
        setup_seconds=setup,
        seed=seed,
        device=described,
        dataset=data.summary() if data is not None else {},
        dataset_fingerprint=data.fingerprint if data is not None else "",
        stopped_early=ctx.stopped,
    )
