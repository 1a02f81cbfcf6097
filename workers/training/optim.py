"""Optimisers and learning-rate schedules from `TrainingConfig`.

An optimiser's name says what it is, and it reads only the fields that belong to it:

| optimizer | torch                               | reads                                  |
|-----------|-------------------------------------|----------------------------------------|
| sgd       | SGD, momentum 0                     | lr, weight_decay                       |
| momentum  | SGD(momentum)                       | lr, momentum, weight_decay             |
| nesterov  | SGD(momentum, nesterov=True)        | lr, momentum (> 0), weight_decay       |
| adam      | Adam(betas=(beta1, beta2))          | lr, beta1, beta2, weight_decay (L2)    |
| adamw     | AdamW(betas=(beta1, beta2))         | lr, beta1, beta2, weight_decay (decoupled) |
| rmsprop   | RMSprop(alpha=0.99), momentum 0     | lr, weight_decay                       |

rmsprop is plain RMSprop, as `torch.optim.RMSprop` and Keras give it: `training.momentum`
defaults to 0.9 for the SGD family, and reading it here would quietly make every rmsprop
trial a momentum-RMSprop one. AdamW's weight decay is `training.weight_decay` (default 0),
not torch's own default of 0.01.

Schedules step once per epoch: `step` multiplies the lr by `lr_gamma` every `lr_step_size`
epochs; `cosine` anneals it from `lr` towards 0 over `epochs` epochs, so epoch e (from 0)
trains at lr * (1 + cos(pi * e / epochs)) / 2.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch.optim import Optimizer
from torch.optim.lr_scheduler import CosineAnnealingLR, LRScheduler, StepLR

from core.errors import TrainingError
from core.spec.config import TrainingConfig

RMSPROP_ALPHA = 0.99


def check_optimizer(config: TrainingConfig) -> None:
    """Raise the `TrainingError` that `build_optimizer` would for these settings, without
    building one (a torch optimiser's first build imports `torch._dynamo`, ~1.4 s)."""
    if config.optimizer not in ("sgd", "momentum", "nesterov", "adam", "adamw", "rmsprop"):
        raise TrainingError(f"training.optimizer {config.optimizer!r} is not supported")
    if config.optimizer == "nesterov" and config.momentum <= 0:
        raise TrainingError(
            f"training.momentum must be > 0 for the nesterov optimizer, got {config.momentum}"
        )


def build_optimizer(
    params: Iterable[torch.Tensor] | Iterable[dict], config: TrainingConfig
) -> Optimizer:
    """The optimiser `config.optimizer` names, over `params`."""
    check_optimizer(config)
    name, lr, decay = config.optimizer, config.lr, config.weight_decay
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.0, weight_decay=decay)
    if name == "momentum":
        return torch.optim.SGD(params, lr=lr, momentum=config.momentum, weight_decay=decay)
    if name == "nesterov":
        return torch.optim.SGD(
            params, lr=lr, momentum=config.momentum, nesterov=True, weight_decay=decay
        )
    betas = (config.beta1, config.beta2)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, betas=betas, weight_decay=decay)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, betas=betas, weight_decay=decay)
    if name == "rmsprop":
        return torch.optim.RMSprop(
            params, lr=lr, alpha=RMSPROP_ALPHA, momentum=0.0, weight_decay=decay
        )
    raise TrainingError(f"training.optimizer {name!r} is not supported")


def build_scheduler(optimizer: Optimizer, config: TrainingConfig) -> LRScheduler | None:
    """The per-epoch schedule `config.lr_schedule` names; None for a constant lr."""
    schedule = config.lr_schedule
    if schedule == "none":
        return None
    if schedule == "step":
        return StepLR(optimizer, step_size=config.lr_step_size, gamma=config.lr_gamma)
    if schedule == "cosine":
        return CosineAnnealingLR(optimizer, T_max=max(config.epochs, 1), eta_min=0.0)
    raise TrainingError(f"training.lr_schedule {schedule!r} is not supported")


def current_lr(optimizer: Optimizer) -> float:
    """The learning rate of the first parameter group: the one the trial reports."""
    return float(optimizer.param_groups[0]["lr"])
