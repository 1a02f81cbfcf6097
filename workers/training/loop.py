"""The MLP's training loop: one trial's config in, its per-epoch metrics and results out.

Plain PyTorch, no Celery and no store: the worker's task passes `on_epoch` to report each
epoch and `should_stop` to end a trial early (cancelled, pruned, out of time). `Trainer`
trains on this process; `workers.training.trial.train` picks it, or the data-parallel
ranks (`workers.training.parallel`, which subclass it), for a trial's config.

Epochs count from 1; the row of epoch k holds the metrics after k epochs of training:
`epoch`, `train_loss` (the mean loss over that epoch's batches, as the model changed),
`val_loss`, `val_accuracy` (classification) or `val_rmse` (regression, in the target's own
units), `lr` (the rate the epoch trained at), `epoch_seconds` (training plus validation) and
`train_seconds` (the seconds trained so far, earlier attempts' included: what a Pareto-rank
pruner compares at a rung when ``train_seconds`` is an objective).

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
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from core.errors import TrainingError
from core.spec.config import TrialConfig
from workers.training.checkpoints import CheckpointError
from workers.training.datasets import Dataset, load_dataset
from workers.training.device import (
    MIXED_DTYPES,
    parameter_dtype,
    seed_torch,
    select_device,
    select_dtype,
)
from workers.training.epochs import Checkpointing, fresh_seed, reporter, resume, run_epochs
from workers.training.models import build_mlp, check_fits, count_parameters, model_meta
from workers.training.optim import build_optimizer, build_scheduler, current_lr
from workers.training.result import TrainResult

logger = logging.getLogger(__name__)

# How often, in steps, the loss is checked for NaN and `should_stop` is asked: each check
# waits for the device, so not every step; often enough that a stop comes within moments.
CHECK_EVERY_STEPS = 50
EVAL_CHUNK_ROWS = 8192


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

    def state(self) -> dict[str, Any]:
        """Everything the next epochs depend on: weights, optimiser, schedule, loss scaler
        and random streams (`workers.training.checkpoints.pack` writes it)."""
        rng: dict[str, Any] = {"torch": torch.get_rng_state(), "shuffle": self.shuffle.get_state()}
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "rng": rng,
        }

    def _take_up(self, state: dict[str, Any], meta: dict[str, Any]) -> None:
        self.restore(state)
        self.seed = int(meta.get("seed", self.seed))

    def restore(self, state: dict[str, Any]) -> None:
        """Take up a `state` of the same config; `CheckpointError` when it does not fit."""
        try:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            if self.scheduler is not None:
                self.scheduler.load_state_dict(state["scheduler"])
            if self.scaler is not None and state.get("scaler"):
                self.scaler.load_state_dict(state["scaler"])
            torch.set_rng_state(state["rng"]["torch"])
            self.shuffle.set_state(state["rng"]["shuffle"])
            if self.device.type == "cuda" and "cuda" in state["rng"]:
                torch.cuda.set_rng_state(state["rng"]["cuda"], self.device)
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise CheckpointError(f"the checkpoint does not fit this trial: {exc}") from exc

    def model_meta(self) -> dict[str, Any]:
        """What rebuilds the trained model (`workers.training.models.model_meta`)."""
        return model_meta(self.config, self.data, parameter_dtype(self.dtype))

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
        checkpoints: Checkpointing | None = None,
    ) -> TrainResult:
        """Train every epoch of the config (`epochs.run_epochs`), or evaluate the untrained
        model for `epochs: 0`, and put the result together. With `checkpoints`, go on from
        the trial's last checkpoint if it has one, and save one when due after an epoch."""
        epochs = self.config.training.epochs
        progress = resume(checkpoints, self._take_up)
        report = reporter(progress, on_epoch, checkpoints, self.model,
                          lambda: (self.state(), {"seed": self.seed}))  # fmt: skip
        _, stopped = run_epochs(
            range(progress.first, epochs + 1), lambda epoch: self._epoch(epoch, should_stop),
            report, should_stop,
        )  # fmt: skip
        metrics = progress.rows
        final: dict[str, float] = metrics[-1] if metrics else {}
        if epochs == 0:
            final = self._untrained_row()
        train_seconds = progress.seconds()
        if checkpoints is not None and not stopped:
            checkpoints.trained(self.model, self.model_meta())
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
        row["train_seconds"] = 0.0
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

