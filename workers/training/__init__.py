"""Plain PyTorch training of one trial: model, data, optimiser, device, loop.

No Celery and no store here: `workers.tasks` calls `train` and records what it returns.
"""

from __future__ import annotations

from workers.training.loop import TrainResult, objective_value, train, warm_up

__all__ = ["TrainResult", "objective_value", "train", "warm_up"]
