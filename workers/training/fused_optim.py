"""Optimisers for K stacked models, each with its own hyperparameters, and their lr clocks.

Every parameter tensor of a fused model has the models on its first axis, so each update
of `torch.optim`'s single-tensor path (what it runs on a CPU) is written once with the
per-model values as a [K, 1, ...] tensor in place of a Python float, in the same order
of operations, so that model k follows exactly the trajectory `workers.training.optim`
gives it alone (up to the rounding of a fused multiply-add; see the faithfulness tests):

| kind      | torch.optim path (per parameter p, gradient g)                              |
|-----------|-----------------------------------------------------------------------------|
| sgd       | g += wd p; p -= lr g                                                        |
| momentum  | g += wd p; b = g (first step) else b = m b + g; p -= lr b                  |
| nesterov  | as momentum, then g = g + m b; p -= lr g                                    |
| adam      | g += wd p; m1.lerp_(g, 1-b1); m2 = b2 m2 + (1-b2) g g;                      |
|           | p -= lr/(1-b1^t) * m1 / (sqrt(m2)/sqrt(1-b2^t) + eps)                       |
| adamw     | p *= 1 - lr wd; then adam without the L2 term                               |
| rmsprop   | g += wd p; s = a s + (1-a) g g; p -= lr g / (sqrt(s) + eps), a = 0.99        |

The hyperparameters are read as `workers.training.optim.build_optimizer` reads them
(sgd and rmsprop ignore `training.momentum`). Learning rates come from `LrClock`: a real
torch optimiser and scheduler per model over one dummy tensor, stepped once per epoch, so
the schedule's values are torch's own, float for float.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from core.spec.config import TrainingConfig
from workers.training.optim import (
    RMSPROP_ALPHA,
    build_optimizer,
    build_scheduler,
    check_optimizer,
    current_lr,
)

ADAM_EPS = 1e-8
RMSPROP_EPS = 1e-8
KINDS = ("sgd", "momentum", "nesterov", "adam", "adamw", "rmsprop")


class LrClock:
    """One model's learning rate per epoch, as its unfused optimiser and schedule give it.

    Building it also checks the optimiser settings as the unfused path does (nesterov
    needs momentum > 0), raising the same `TrainingError`. A constant rate needs no torch
    optimiser (it is ``training.lr``, as torch keeps it), so a fused group without a
    schedule never builds one, and never imports `torch._dynamo` (`workers.app`).
    """

    def __init__(self, training: TrainingConfig) -> None:
        check_optimizer(training)
        self._lr = float(training.lr)
        self._optimizer: Optimizer | None = None
        self._scheduler: LRScheduler | None = None
        if training.lr_schedule != "none":
            self._dummy = torch.zeros(1, requires_grad=True)
            self._optimizer = build_optimizer([self._dummy], training)
            self._scheduler = build_scheduler(self._optimizer, training)

    @property
    def lr(self) -> float:
        """The rate the current epoch trains at."""
        return self._lr if self._optimizer is None else current_lr(self._optimizer)

    def end_epoch(self) -> None:
        """Advance the schedule one epoch (the no-op step keeps torch from warning)."""
        if self._optimizer is not None and self._scheduler is not None:
            self._optimizer.step()  # no gradient: changes nothing, marks the step as taken
            self._scheduler.step()


def _momentum(kind: str, training: TrainingConfig) -> float:
    return training.momentum if kind in ("momentum", "nesterov") else 0.0


class FusedOptimizer:
    """`kind`'s update over stacked parameters, model k with `trainings[k]`'s values.

    `step` takes the parameters (whose `.grad` backward filled) and this epoch's learning
    rate of each model; `keep` drops models, with their state, when they leave the group.
    """

    def __init__(self, kind: str, trainings: list[TrainingConfig]) -> None:
        if kind not in KINDS:
            raise ValueError(f"training.optimizer {kind!r} cannot be fused")
        self.kind = kind
        self.weight_decay = [t.weight_decay for t in trainings]
        self.momentum = [_momentum(kind, t) for t in trainings]
        self.beta1 = [t.beta1 for t in trainings]
        self.beta2 = [t.beta2 for t in trainings]
        self.steps = 0
        self._lrs: tuple[float, ...] = ()
        self.state: list[dict[str, Tensor]] = []
        self._cache: dict[tuple[str, int, torch.dtype, torch.device], Tensor] = {}

    def keep(self, index: list[int]) -> None:
        """Keep only the models at these positions, in this order."""
        for name in ("weight_decay", "momentum", "beta1", "beta2"):
            values = getattr(self, name)
            setattr(self, name, [values[i] for i in index])
        rows = torch.tensor(index, dtype=torch.long)
        self.state = [
            {key: value.index_select(0, rows.to(value.device)) for key, value in slot.items()}
            for slot in self.state
        ]
        self._cache.clear()
        self._lrs = ()

    def member_state(self, slices: list[tuple[slice, ...]]) -> dict[str, Any]:
        """One model's own part of the state (`FusedMLP.member_slices` says where it lies)."""
        slots = [
            {key: value[part].squeeze(0).clone() for key, value in slot.items()}
            for slot, part in zip(self.state, slices, strict=True)
        ] if self.state else []  # fmt: skip
        return {"steps": self.steps, "slots": slots}

    def load_members(
        self, params: list[Tensor], states: list[dict[str, Any]],
        slices: list[list[tuple[slice, ...]]],
    ) -> None:  # fmt: skip
        """Take up each model's `member_state` (model k's at `slices[k]`), the padding zero
        (what training leaves it). Every model must have taken as many steps."""
        steps = {int(s["steps"]) for s in states}
        if len(steps) != 1:
            raise ValueError(f"the models' states have taken different numbers of steps: {steps}")
        self.steps = steps.pop()
        if not any(s["slots"] for s in states):
            return
        self.state = []
        for i, param in enumerate(params):
            slot: dict[str, Tensor] = {}
            for key in states[0]["slots"][i]:
                full = torch.zeros_like(param)
                for state, parts in zip(states, slices, strict=True):
                    full[parts[i]] = state["slots"][i][key].to(full).unsqueeze(0)
                slot[key] = full
            self.state.append(slot)
        self._cache.clear()
        self._lrs = ()

    def _per_model(self, name: str, values: list[float], like: Tensor) -> Tensor:
        """`values` as a [K, 1, ...] tensor that broadcasts against `like`."""
        key = (name, like.dim(), like.dtype, like.device)
        cached = self._cache.get(key)
        if cached is None:
            shape = (len(values),) + (1,) * (like.dim() - 1)
            cached = torch.tensor(values, dtype=like.dtype, device=like.device).view(shape)
            self._cache[key] = cached
        return cached

    @staticmethod
    def _fresh(values: list[float], like: Tensor, made: dict[tuple[int, int], Tensor]) -> Tensor:
        """Like `_per_model` for values of this step only, made once per shape in `made`."""
        key = (id(values), like.dim())
        if key not in made:
            shape = (len(values),) + (1,) * (like.dim() - 1)
            made[key] = torch.tensor(values, dtype=like.dtype, device=like.device).view(shape)
        return made[key]

    @torch.no_grad()
    def step(self, params: list[Tensor], lrs: list[float]) -> None:
        """One update of every parameter; `lrs[k]` is model k's learning rate."""
        if not self.state:
            self.state = [{} for _ in params]
        self.steps += 1
        if self.kind in ("adam", "adamw"):
            self._adam(params, lrs)
            return
        decays = any(self.weight_decay)
        neg_lrs = [-lr for lr in lrs]
        if tuple(lrs) != self._lrs:  # a new epoch's rates: drop the last epoch's tensors
            self._lrs = tuple(lrs)
            self._cache = {key: value for key, value in self._cache.items() if key[0] != "-lr"}
        for param, slot in zip(params, self.state, strict=True):
            grad = param.grad
            assert grad is not None
            if decays:
                grad = grad.add(param * self._per_model("wd", self.weight_decay, param))
            neg_lr = self._per_model("-lr", neg_lrs, param)
            if self.kind == "rmsprop":
                square_avg = slot.get("square_avg")
                if square_avg is None:
                    square_avg = slot["square_avg"] = torch.zeros_like(param)
                square_avg.mul_(RMSPROP_ALPHA).addcmul_(grad, grad, value=1 - RMSPROP_ALPHA)
                avg = square_avg.sqrt().add_(RMSPROP_EPS)
                param.addcmul_(grad / avg, neg_lr)
                continue
            if self.kind in ("momentum", "nesterov"):
                momentum = self._per_model("momentum", self.momentum, param)
                buf = slot.get("momentum_buffer")
                if buf is None:
                    buf = slot["momentum_buffer"] = grad.detach().clone()
                else:
                    buf.mul_(momentum).add_(grad)
                grad = grad.add(buf * momentum) if self.kind == "nesterov" else buf
            param.addcmul_(grad, neg_lr)

    def _adam(self, params: list[Tensor], lrs: list[float]) -> None:
        step = float(self.steps)
        # Python floats, as torch computes them from its step tensor's value.
        step_sizes, bias2_sqrt = [], []
        for lr, beta1, beta2 in zip(lrs, self.beta1, self.beta2, strict=True):
            step_sizes.append(-(lr / (1 - beta1**step)))
            bias2_sqrt.append((1 - beta2**step) ** 0.5)
        decoupled = self.kind == "adamw"
        decays = any(self.weight_decay)
        one_minus_beta1 = [1 - b for b in self.beta1]
        one_minus_beta2 = [1 - b for b in self.beta2]
        shrink = [1 - lr * wd for lr, wd in zip(lrs, self.weight_decay, strict=True)]
        made: dict[tuple[int, int], Tensor] = {}
        for param, slot in zip(params, self.state, strict=True):
            grad = param.grad
            assert grad is not None
            if decays:
                if decoupled:
                    param.mul_(self._fresh(shrink, param, made))
                else:
                    grad = grad.add(param * self._per_model("wd", self.weight_decay, param))
            exp_avg = slot.get("exp_avg")
            if exp_avg is None:
                exp_avg = slot["exp_avg"] = torch.zeros_like(param)
                slot["exp_avg_sq"] = torch.zeros_like(param)
            exp_avg_sq = slot["exp_avg_sq"]
            exp_avg.lerp_(grad, self._per_model("1-b1", one_minus_beta1, param))
            exp_avg_sq.mul_(self._per_model("b2", self.beta2, param))
            exp_avg_sq.addcmul_(grad * self._per_model("1-b2", one_minus_beta2, param), grad)
            denom = (exp_avg_sq.sqrt() / self._fresh(bias2_sqrt, param, made)).add_(ADAM_EPS)
            param.addcmul_(exp_avg / denom, self._fresh(step_sizes, param, made))
