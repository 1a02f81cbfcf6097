"""Plain PyTorch training, one trial (`train`) or a fused group of them (`train_fused`).

`loop` trains one trial and defines `TrainResult`; `fused`, `fused_model`, `fused_optim`
and `fused_plan` train K compatible trials as one stacked model; `models`, `optim`,
`datasets` and `device` are what both build from; `parallel` trains one trial on several
processes. No Celery and no store here: `workers.runner` and `workers.group_runner` call
these and record what they return.
"""

from __future__ import annotations

from workers.training.loop import TrainResult, objective_value, train

__all__ = ["TrainResult", "objective_value", "train"]
