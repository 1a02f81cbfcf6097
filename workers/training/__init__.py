"""Plain PyTorch training, one trial (`train`) or a fused group of them (`train_fused`).

`trial.train` trains one trial: on this process with `loop`, or on several with
`parallel`; `fused`, `fused_model`, `fused_optim` and `fused_plan` train K compatible
trials as one stacked model; `caffe` trains Caffe nets. `result` (`TrainResult`, what every
trainer returns), `epochs` (the epoch loop and memory failures, shared), `models`, `optim`,
`datasets` and `device` are what they all build from. No Celery and no store here:
`workers.runner` and `workers.group_runner` call these and record what they return.
"""

from __future__ import annotations

from workers.training.result import TrainResult, objective_value
from workers.training.trial import train

__all__ = ["TrainResult", "objective_value", "train"]
