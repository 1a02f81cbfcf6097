"""The training loop: one trial's config in, its per-epoch metrics and results out.

Plain PyTorch, no Celery and no store: the worker's task passes `on_epoch` to report each
epoch and `should_stop` to end a trial early (cancelled, pruned, out of time).

Epochs count from 1; the row of epoch k holds the metrics after k epochs of training:
`epoch`, `train_loss` (the mean loss over that epoch's batches, as the model changed),
`val_loss`, `val_accuracy` (classification) or `val_rmse` (regression, in the target's own
units), `lr` (the rate the epoch trained at) and `epoch_seconds` (training plus validation).

`epochs: 0` trains nothing: `metrics` is empty, `on_epoch` is not called, and `final` is one
evaluation of the untrained model (epoch 0, `train_loss` measured on the whole training set),
so a zero-epoch trial still completes with an objective value, quickly.

Determinism: `training.seed` seeds torch (weights, dropout) and a generator of its own for
the shuffle order, so the same trial twice on a CPU with the same thread count gives
bit-identical metrics. A trial without a seed draws one and records it in the result.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from core.errors import TrainingError
from core.spec.config import TrialConfig
from workers.training.datasets import Dataset, load_dataset
from workers.training.device import (
    MIXED_DTYPES,
    describe,
    parameter_dtype,
    seed_torch,
    select_device,
    select_dtype,
)
from workers.training.models import build_mlp, check_fits, count_parameters
from workers.training.optim import build_optimizer, build_scheduler, current_lr

logger = logging.getLogger(__name__)

# How often, in steps, the loss is checked for NaN and `should_stop` is asked: each check
# waits for the device, so not every step; often enough that a stop comes within moments.
CHECK_EVERY_STEPS = 50
EVAL_CHUNK_ROWS = 8192
# Which way is better for each metric that `best` keeps.
BEST_DIRECTIONS: dict[str, str] = {
    "val_accuracy": "maximize",
    "val_loss": "minimize",
    "val_rmse": "minimize",
    "train_loss": "minimize",
}


@dataclass
class TrainResult:
    """What one trial's training gave: the epochs, the best and last values, and its context.

    `final` is the last epoch's row (for `epochs: 0`, the evaluation of the untrained model;
    empty when stopped before the first epoch ended). `best` holds, for each metric in
    `BEST_DIRECTIONS`, its best value over the epochs.
    """

    metrics: list[dict[str, float]]
    final: dict[str, float]
    best: dict[str, float]
    param_count: int
    train_seconds: float
    setup_seconds: float
    seed: int
    device: dict[str, Any]
    dataset: dict[str, Any]
    dataset_fingerprint: str
    stopped_early: bool = False
    epochs_completed: int = field(init=False)

    def __post_init__(self) -> None:
        self.epochs_completed = len(self.metrics)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy for the trial record."""
        return asdict(self)

    @classmethod
    def assemble(
        cls,
        metrics: list[dict[str, float]],
        final: dict[str, float],
        *,
        param_count: int,
        train_seconds: float,
        setup_seconds: float,
        seed: int,
        device: torch.device,
        dtype: torch.dtype,
        data: Dataset,
        stopped_early: bool,
    ) -> TrainResult:
        """The one place a result is put together, for `train` and the fused trainer alike:
        `best` from the rows (or from `final` alone when no epoch ran), the device and data
        described as the record keeps them."""
        return cls(
            metrics=metrics,
            final=final,
            best=best_values(metrics or ([final] if final else [])),
            param_count=param_count,
            train_seconds=train_seconds,
            setup_seconds=setup_seconds,
            seed=seed,
            device=describe(device, dtype),
            dataset=data.summary(),
            dataset_fingerprint=data.fingerprint,
            stopped_early=stopped_early,
        )


def best_values(rows: list[dict[str, float]]) -> dict[str, float]:
    """For each metric in `BEST_DIRECTIONS` that the rows have, its best value over them."""
    return {
        name: (max if direction == "maximize" else min)(row[name] for row in rows)
        for name, direction in BEST_DIRECTIONS.items()
        if rows and name in rows[0]
    }


def objective_value(result: TrainResult, metric: str, direction: str) -> float | None:
    """The best value of `metric` over the trial in `direction` (minimize or maximize).

    None when the trial never measured it (no epochs and no evaluation, or the wrong task).
    """
    rows = result.metrics or ([result.final] if result.final else [])
    values = [row[metric] for row in rows if metric in row and math.isfinite(row[metric])]
    if not values:
        return None
    if direction in ("maximize", "max"):
        return max(values)
    if direction in ("minimize", "min"):
        return min(values)
    raise ValueError(f"direction must be minimize or maximize, got {direction!r}")


def train(
    config: TrialConfig,
    *,
    on_epoch: Callable[[int, dict[str, float]], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    data_dir: Path | None = None,
) -> TrainResult:
    """Train the trial `config` describes and return its metrics.

    Raises `TrainingError` for failures that are the trial's result: non-finite loss, out of
    memory, a model that cannot be built, an unavailable device, bad data. A trial with
    `execution.parallel.world_size` above 1 trains on that many processes of this host.
    """
    if config.execution.parallel.enabled:
        from workers.training.parallel import train_parallel

        return train_parallel(config, on_epoch=on_epoch, should_stop=should_stop, data_dir=data_dir)
    try:
        return Trainer(config, data_dir).run(on_epoch, should_stop)
    except (torch.OutOfMemoryError, MemoryError, RuntimeError) as err:
        reason = oom_reason(err)
        if reason is None:
            raise
    # Out of the except blocks the error's traceback, and the tensors its frames held, are
    # gone, so the cache can really be emptied and the worker goes on with a clean device.
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    raise TrainingError(reason)


def oom_reason(err: BaseException) -> str | None:
    """The failure reason for running out of memory (CUDA or CPU), or None for another error."""
    if isinstance(err, torch.OutOfMemoryError):
        # torch's first line: "CUDA out of memory. Tried to allocate X. GPU 0 has ... free.
        # Process ...": the size asked for and what was free is what a reader needs.
        sentences = error_headline(err).removeprefix("CUDA out of memory.").strip().split(". ")
        return f"CUDA out of memory: {'. '.join(sentences[:2]).rstrip('.')}"
    if isinstance(err, MemoryError) or (
        isinstance(err, RuntimeError)
        and ("DefaultCPUAllocator" in str(err) or "can't allocate memory" in str(err))
    ):
        return f"out of memory on the CPU: {error_headline(err)}"
    return None


def error_headline(err: BaseException) -> str:
    """An error's first line of text, or its type's name."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


class Trainer:
    """One trial's state: data on the device, model, optimiser, schedule.

    `run` trains epoch by epoch with `_epoch`; the data-parallel ranks
    (`workers.training.parallel`) subclass it and change only how an epoch trains.
    """

    def __init__(self, config: TrialConfig, data_dir: Path | None) -> None:
        started = time.perf_counter()
        self.config = config
        training = config.training
        self.device = select_device(config.execution)
        self.dtype = select_dtype(config.execution, self.device)
        self.mixed = self.dtype in MIXED_DTYPES
        param_dtype = parameter_dtype(self.dtype)
        self.metric_dtype = torch.float64 if param_dtype == torch.float64 else torch.float32
        self.seed = training.seed if training.seed is not None else fresh_seed()

        self.data: Dataset = load_dataset(config.dataset, data_dir)
        self.classification = self.data.task == "classification"
        y_dtype = torch.int64 if self.classification else param_dtype
        self.x_train, self.y_train, self.x_val, self.y_val = (
            torch.tensor(array, dtype=dtype, device=self.device)
            for array, dtype in (
                (self.data.x_train, param_dtype),
                (self.data.y_train, y_dtype),
                (self.data.x_val, param_dtype),
                (self.data.y_val, y_dtype),
            )
        )

        seed_torch(self.seed, self.device)
        self.shuffle = torch.Generator().manual_seed(self.seed)
        n_in, n_out = self.data.n_features, self.data.out_features
        check_fits(config.model, n_in, n_out, self.device, param_dtype)
        self.model: nn.Module = build_mlp(
            config.model, n_in, n_out, device=self.device, dtype=param_dtype
        )
        self.optimizer = build_optimizer(self.model.parameters(), training)
        self.scheduler = build_scheduler(self.optimizer, training)
        self.scaler = (
            torch.amp.GradScaler(self.device.type) if self.dtype == torch.float16 else None
        )
        self.setup_seconds = time.perf_counter() - started

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.mixed:
            return torch.autocast(self.device.type, dtype=self.dtype)
        return contextlib.nullcontext()

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        with self._autocast():
            out = self.model(x)
        out = out.to(self.metric_dtype)
        return out if self.classification else out.squeeze(-1)

    def _loss(self, out: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        if self.classification:
            return F.cross_entropy(out, y, reduction=reduction)
        return F.mse_loss(out, y.to(out.dtype), reduction=reduction)

    def run(
        self,
        on_epoch: Callable[[int, dict[str, float]], None] | None,
        should_stop: Callable[[], bool] | None,
    ) -> TrainResult:
        started = time.perf_counter()
        metrics: list[dict[str, float]] = []
        stopped = False
        epochs = self.config.training.epochs
        for epoch in range(1, epochs + 1):
            if should_stop is not None and should_stop():
                stopped = True
                break
            row = self._epoch(epoch, should_stop)
            if row is None:
                stopped = True
                break
            metrics.append(row)
            logger.debug("epoch %d: %s", epoch, row)
            if on_epoch is not None:
                on_epoch(epoch, row)
        final: dict[str, float] = metrics[-1] if metrics else {}
        if epochs == 0:
            final = self._untrained_row()
        train_seconds = time.perf_counter() - started
        logger.info(
            "trained %d epoch(s) in %.3fs (setup %.3fs)%s",
            len(metrics),
            train_seconds,
            self.setup_seconds,
            ", stopped early" if stopped else "",
        )
        return TrainResult.assemble(
            metrics,
            final,
            param_count=count_parameters(self.model),
            train_seconds=train_seconds,
            setup_seconds=self.setup_seconds,
            seed=self.seed,
            device=self.device,
            dtype=self.dtype,
            data=self.data,
            stopped_early=stopped,
        )

    def _epoch(self, epoch: int, should_stop: Callable[[], bool] | None) -> dict[str, float] | None:
        """Train one epoch and validate; None when `should_stop` ended it part-way."""
        started = time.perf_counter()
        n = self.x_train.shape[0]
        batch = min(self.config.training.batch_size, n)
        steps = math.ceil(n / batch)
        used = n
        if self.config.model.batch_norm:
            if batch < 2:
                raise TrainingError(
                    "model.batch_norm needs batches of 2 or more rows, but "
                    f"training.batch_size is {self.config.training.batch_size} and the training "
                    f"split has {n} row(s)"
                )
            if n % batch == 1:  # batch norm cannot train on a lone last row: leave it out
                steps, used = steps - 1, n - 1
        lr = current_lr(self.optimizer)
        losses = torch.empty(steps, dtype=self.metric_dtype, device=self.device)
        order = torch.randperm(n, generator=self.shuffle).to(self.device)
        self.model.train()
        checked = 0
        for step in range(steps):
            index = order[step * batch : (step + 1) * batch]
            loss = self._loss(self._forward(self.x_train[index]), self.y_train[index])
            self.optimizer.zero_grad(set_to_none=True)
            if self.scaler is not None:
                self.scaler.scale(loss).backward()
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                loss.backward()
                self.optimizer.step()
            losses[step] = loss.detach()
            if (step + 1) % CHECK_EVERY_STEPS == 0:
                check_finite(losses[checked : step + 1], epoch, checked)
                checked = step + 1
                if should_stop is not None and should_stop():
                    return None
        check_finite(losses[checked:], epoch, checked)
        sizes = torch.full((steps,), batch, dtype=self.metric_dtype, device=self.device)
        sizes[-1] = used - batch * (steps - 1)
        train_loss = float((losses * sizes).sum() / used)
        row: dict[str, float] = {"epoch": epoch, "train_loss": train_loss}
        row.update(self._evaluate(self.x_val, self.y_val, "val", epoch))
        row["lr"] = lr
        if self.scheduler is not None:
            self.scheduler.step()
        row["epoch_seconds"] = time.perf_counter() - started
        return row

    def _untrained_row(self) -> dict[str, float]:
        started = time.perf_counter()
        row: dict[str, float] = {"epoch": 0}
        train = self._evaluate(self.x_train, self.y_train, "train", 0)
        row["train_loss"] = train["train_loss"]
        row.update(self._evaluate(self.x_val, self.y_val, "val", 0))
        row["lr"] = current_lr(self.optimizer)
        row["epoch_seconds"] = time.perf_counter() - started
        return row

    @torch.no_grad()
    def _evaluate(
        self, x: torch.Tensor, y: torch.Tensor, prefix: str, epoch: int
    ) -> dict[str, float]:
        """Loss and accuracy (or RMSE in the target's units) of the model on `x`, `y`."""
        self.model.eval()
        total = torch.zeros((), dtype=torch.float64, device=self.device)
        correct = torch.zeros((), dtype=torch.int64, device=self.device)
        for start in range(0, x.shape[0], EVAL_CHUNK_ROWS):
            out = self._forward(x[start : start + EVAL_CHUNK_ROWS])
            target = y[start : start + EVAL_CHUNK_ROWS]
            total += self._loss(out, target, reduction="sum").double()
            if self.classification:
                correct += (out.argmax(dim=1) == target).sum()
        n = x.shape[0]
        loss = float(total) / n
        if not math.isfinite(loss):
            kind = "nan" if math.isnan(loss) else "inf"
            where = "validation" if prefix == "val" else "training"
            raise TrainingError(f"{where} loss became {kind} at epoch {epoch}")
        if self.classification:
            return {f"{prefix}_loss": loss, f"{prefix}_accuracy": int(correct) / n}
        return {f"{prefix}_loss": loss, f"{prefix}_rmse": math.sqrt(loss) * self.data.target_std}


def check_finite(losses: torch.Tensor, epoch: int, offset: int) -> None:
    """Raise `TrainingError` naming the first step whose loss is NaN or infinite."""
    finite = torch.isfinite(losses)
    if bool(finite.all()):
        return
    first = int((~finite).nonzero()[0])
    value = float(losses[first])
    kind = "nan" if math.isnan(value) else "inf"
    raise TrainingError(f"loss became {kind} at epoch {epoch}, step {offset + first + 1}")


def fresh_seed() -> int:
    """A random trial seed for a config that sets none (logged, and kept in the record)."""
    seed = int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF
    logger.info("training.seed not set; drew %d", seed)
    return seed
