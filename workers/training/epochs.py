"""What every trainer does around its epochs, written once: the epoch loop, a seed for a
trial that sets none, and running out of memory as the trial's result.

`run_epochs` is the loop of the MLP (`workers.training.loop`, and through it the data-parallel
ranks) and of Caffe nets (`workers.training.caffe.loop`): each says only how one epoch trains
(`train_epoch`), and the loop asks `should_stop` before each, keeps the rows and reports them.
`failures_as_results` turns an out-of-memory error into the `TrainingError` that ends the
trial FAILED, for every way of training alike.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import torch

from core.errors import TrainingError

logger = logging.getLogger(__name__)

T = TypeVar("T")
Row = dict[str, float]
OnEpoch = Callable[[int, Row], None]
ShouldStop = Callable[[], bool]
#: A trainer's whole state (`workers.training.checkpoints.pack`'s tree) and what it says of it.
Capture = Callable[[], tuple[Any, dict[str, Any]]]


class Checkpointing(Protocol):
    """What a trainer asks of the worker about checkpoints (`workers.checkpointing`): the
    state to resume from, where a checkpoint goes, and the trained model to keep."""

    #: The sweep's policy (`core.spec.artifacts.Artifacts`): when checkpoints are due.
    policy: Any

    def resumed(self) -> tuple[Any, dict[str, Any]] | None:
        """The (state, meta) of the trial's last checkpoint, or None: train from epoch 1."""

    def resuming(self, meta: dict[str, Any]) -> None:
        """The trainer restored the checkpoint of `meta` and goes on after its epoch."""

    def after_epoch(self, epoch: int, capture: Capture) -> None:
        """`epoch` was trained and reported: save `capture()` if a checkpoint is due."""

    def epoch_model(
        self, epoch: int, row: dict[str, float], snapshot: Callable[[], dict[str, Any]]
    ) -> None:
        """`epoch` ended with `row`: keep `snapshot()` (the model's weights, copied) if it is
        the best epoch yet by the sweep's objective, the weights a kept model will have."""

    def save(self, epoch: int, state: Any, meta: dict[str, Any]) -> None:
        """Save a checkpoint of `state` after `epoch` now."""

    def save_file(self, name: str, data: bytes) -> dict[str, Any]:
        """Keep a file of the trial's own."""

    def unusable(self, err: Exception) -> None:
        """The checkpoint `resumed` gave could not be taken up: note why, and give None
        from now on (the trial trains from epoch 1)."""

    def trained(self, model: Any, meta: dict[str, Any]) -> None:
        """The trial trained every epoch: `model` (with `meta`, what rebuilds it) is the
        one to keep if the sweep keeps it."""


def run_epochs(
    epochs: Iterable[int],
    train_epoch: Callable[[int], Row | None],
    on_epoch: OnEpoch | None,
    should_stop: ShouldStop | None,
) -> tuple[list[Row], bool]:
    """Train each of `epochs` in turn: ask `should_stop` before it, train it
    (`train_epoch` returns its row, or None when it was stopped part-way, and that epoch is
    dropped), keep its row and report it to `on_epoch`.

    Returns the rows of the epochs trained and whether training stopped early.
    """
    rows: list[Row] = []
    for epoch in epochs:
        if should_stop is not None and should_stop():
            return rows, True
        row = train_epoch(epoch)
        if row is None:
            return rows, True
        rows.append(row)
        logger.debug("epoch %d: %s", epoch, row)
        if on_epoch is not None:
            on_epoch(epoch, row)
    return rows, False


@dataclass
class Progress:
    """A trial's epochs so far: the rows (a resume's first), the epoch to train next, and
    the seconds trained before this attempt began (`resume`)."""

    rows: list[Row]
    first: int = 1
    before: float = 0.0
    started: float = field(default_factory=time.perf_counter)

    def seconds(self) -> float:
        """Seconds of training, this attempt's and those before it."""
        return self.before + time.perf_counter() - self.started


def resume(
    checkpoints: Checkpointing | None, take_up: Callable[[Any, dict[str, Any]], None]
) -> Progress:
    """Where a trainer starts: after the trial's last checkpoint when `checkpoints` has one
    (`take_up(state, meta)` restores it, raising `CheckpointError` when it does not fit),
    else at epoch 1."""
    found = checkpoints.resumed() if checkpoints is not None else None
    if found is None or checkpoints is None:
        return Progress([])
    state, meta = found
    take_up(state, meta)
    rows = list(meta["metrics"])
    progress = Progress(rows, int(meta.get("epoch", len(rows))) + 1,
                        float(meta.get("train_seconds", 0.0)))  # fmt: skip
    checkpoints.resuming(meta)
    return progress


def weights_copy(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A copy of the model's weights as they are now (its ``state_dict``, detached)."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def reporter(
    progress: Progress,
    on_epoch: OnEpoch | None,
    checkpoints: Checkpointing | None,
    model: torch.nn.Module,
    capture: Capture,
) -> OnEpoch:
    """What `run_epochs` calls after each epoch: give the row the seconds trained so far
    (``train_seconds``, a resumed attempt's included), report it, keep it in `progress`, offer
    the model's weights as the best epoch's, and save a checkpoint when due (`capture()`:
    the trainer's state and what its meta adds to the rows and seconds)."""

    def reported(epoch: int, row: Row) -> None:
        seconds = row["train_seconds"] = progress.seconds()
        if on_epoch is not None:
            on_epoch(epoch, row)
        progress.rows.append(row)
        if checkpoints is None:
            return
        checkpoints.epoch_model(epoch, row, lambda: weights_copy(model))

        def state() -> tuple[Any, dict[str, Any]]:
            state, meta = capture()
            return state, {**meta, "metrics": list(progress.rows), "train_seconds": seconds}

        checkpoints.after_epoch(epoch, state)

    return reported


def failures_as_results(train: Callable[[], T]) -> T:
    """`train()`, with running out of memory (CUDA or CPU) raised as a `TrainingError` that
    says so (`oom_reason`); any other error goes through as it is."""
    try:
        return train()
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


def fresh_seed() -> int:
    """A random trial seed for a config that sets none (logged, and kept in the record)."""
    seed = int.from_bytes(os.urandom(4), "little") & 0x7FFFFFFF
    logger.info("training.seed not set; drew %d", seed)
    return seed
