"""Optimisers each take a step downhill; schedules change the lr as documented."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from core.errors import TrainingError
from core.spec.config import OPTIMIZERS, TrainingConfig
from workers.training.fused_optim import LrClock
from workers.training.optim import build_optimizer, build_scheduler, current_lr

ROOT = Path(__file__).resolve().parents[3]


def _problem() -> tuple[nn.Linear, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    x = torch.randn(64, 3)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.3
    return nn.Linear(3, 1), x, y


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_one_step_lowers_the_loss(name: str) -> None:
    model, x, y = _problem()
    optimizer = build_optimizer(model.parameters(), TrainingConfig(optimizer=name, lr=0.05))
    before = nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    before.backward()
    optimizer.step()
    after = nn.functional.mse_loss(model(x), y)
    assert after.item() < before.item()


@pytest.mark.parametrize(
    ("name", "kind", "options"),
    [
        ("sgd", torch.optim.SGD, {"momentum": 0.0, "nesterov": False}),
        ("momentum", torch.optim.SGD, {"momentum": 0.8, "nesterov": False}),
        ("nesterov", torch.optim.SGD, {"momentum": 0.8, "nesterov": True}),
        ("adam", torch.optim.Adam, {"betas": (0.85, 0.99)}),
        ("adamw", torch.optim.AdamW, {"betas": (0.85, 0.99)}),
        ("rmsprop", torch.optim.RMSprop, {"momentum": 0.0, "alpha": 0.99}),
    ],
)
def test_options_reach_torch(name: str, kind: type, options: dict[str, object]) -> None:
    config = TrainingConfig(
        optimizer=name, lr=0.02, momentum=0.8, beta1=0.85, beta2=0.99, weight_decay=0.001
    )
    optimizer = build_optimizer(nn.Linear(2, 1).parameters(), config)
    assert type(optimizer) is kind
    group = optimizer.param_groups[0]
    assert group["lr"] == 0.02 and group["weight_decay"] == 0.001
    for key, value in options.items():
        assert group[key] == value


def test_adamw_takes_the_configured_weight_decay_not_torch_default() -> None:
    optimizer = build_optimizer(nn.Linear(2, 1).parameters(), TrainingConfig(optimizer="adamw"))
    assert optimizer.param_groups[0]["weight_decay"] == 0.0


def test_nesterov_needs_momentum() -> None:
    config = TrainingConfig(optimizer="nesterov", momentum=0.0)
    with pytest.raises(TrainingError, match=r"training.momentum must be > 0"):
        build_optimizer(nn.Linear(2, 1).parameters(), config)


def _lrs(config: TrainingConfig, epochs: int) -> list[float]:
    optimizer = build_optimizer(nn.Linear(2, 1).parameters(), config)
    scheduler = build_scheduler(optimizer, config)
    seen = []
    for _ in range(epochs):
        seen.append(current_lr(optimizer))
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
    return seen


def test_no_schedule_keeps_lr() -> None:
    optimizer = build_optimizer(nn.Linear(2, 1).parameters(), TrainingConfig())
    assert build_scheduler(optimizer, TrainingConfig()) is None
    assert _lrs(TrainingConfig(lr=0.1), 3) == [0.1, 0.1, 0.1]


def test_step_schedule() -> None:
    config = TrainingConfig(lr=1.0, lr_schedule="step", lr_step_size=2, lr_gamma=0.5)
    assert _lrs(config, 6) == pytest.approx([1.0, 1.0, 0.5, 0.5, 0.25, 0.25])


def test_cosine_schedule_over_epochs() -> None:
    config = TrainingConfig(lr=0.4, lr_schedule="cosine", epochs=4)
    expected = [0.4 * (1 + math.cos(math.pi * e / 4)) / 2 for e in range(4)]
    assert _lrs(config, 4) == pytest.approx(expected)


@pytest.mark.parametrize("schedule", ["none", "step", "cosine"])
def test_a_fused_lr_clock_gives_the_unfused_rates(schedule: str) -> None:
    config = TrainingConfig(lr=0.3, lr_schedule=schedule, lr_step_size=2, lr_gamma=0.5, epochs=6)
    clock = LrClock(config)
    seen = []
    for _ in range(6):
        seen.append(clock.lr)
        clock.end_epoch()
    assert seen == _lrs(config, 6)


def test_a_constant_rate_clock_checks_the_optimiser_as_the_unfused_path_does() -> None:
    with pytest.raises(TrainingError, match=r"training.momentum must be > 0"):
        LrClock(TrainingConfig(optimizer="nesterov", momentum=0.0))


def test_a_fused_group_without_a_schedule_never_imports_dynamo() -> None:
    """A fresh interpreter (what a worker's pool process is after the fork): a fused group
    with a constant rate builds no torch optimiser, so `torch._dynamo` (~1.4 s) stays out."""
    script = (
        "import sys\n"
        "from core.spec.config import TrialConfig\n"
        "from workers.training.fused import train_fused\n"
        "configs = [TrialConfig.from_dict({'dataset': {'name': 'iris'}, 'training': "
        "{'epochs': 2, 'lr': lr, 'seed': 1}}) for lr in (0.01, 0.1)]\n"
        "done = {}\n"
        "train_fused(configs, on_epoch=lambda *a: None, should_stop=lambda k: False, "
        "on_done=done.__setitem__)\n"
        "assert len(done) == 2, done\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "False", out.stderr
