"""What a trial's training gives back: `TrainResult`, its best values and its objective.

Every way of training (the MLP loop, a data-parallel trial's ranks, a fused group, a Caffe
net, a user's training function) returns a `TrainResult`, so the worker records them all
alike. It sits below the trainers, so that none of them imports another to reach it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from workers.training.device import describe

if TYPE_CHECKING:
    import torch

    from workers.training.datasets import Dataset

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
        data: Dataset[Any],
        stopped_early: bool,
    ) -> TrainResult:
        """The one place a result is put together, for the MLP, fused and Caffe trainers
        alike: `best` from the rows (or from `final` alone when no epoch ran), the device
        and data described as the record keeps them."""
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


def best_values(rows: Sequence[dict[str, float]]) -> dict[str, float]:
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
