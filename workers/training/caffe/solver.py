"""Caffe's solvers in PyTorch: the parameter update of each ``type``, step by step as Caffe
makes it.

`CaffeSolver.step(iteration)` applies one update to the net's learnable blobs from the
gradients accumulated since `zero_grad` (``iter_size`` backward passes), in the order of
Caffe's ``SGDSolver::ApplyUpdate``:

1. the base rate of the iteration, ``learning_rate(config, iteration)`` (`core.spec.caffe.solver`);
2. ``clip_gradients`` (when >= 0): if the L2 norm of all the gradients together, as
   accumulated, is above it, every gradient is scaled by ``clip_gradients / norm``;
3. then for each blob: the gradient divided by ``iter_size`` (Normalize); the decay added,
   ``weight_decay * decay_mult`` times the weight (L2) or its sign (L1) (Regularize); and the
   update value of the solver type at ``rate * lr_mult`` (ComputeUpdateValue), subtracted
   from the weight.

Clipping comes first, before normalisation and decay, as in Caffe: the norm is that of the
summed gradients of the ``iter_size`` passes, without the decay.

Updates, with ``lr = rate * lr_mult``, ``g`` the gradient after steps 2-3, ``m`` momentum,
``d`` delta, all history starting at zero:

- SGD: ``h = m*h + lr*g``; ``u = h`` (the rate inside the velocity, as Caffe has it);
- Nesterov: ``h' = m*h + lr*g``; ``u = (1+m)*h' - m*h``;
- AdaGrad: ``h = h + g^2``; ``u = lr * g / (sqrt(h) + d)``;
- RMSProp: ``h = rms_decay*h + (1-rms_decay)*g^2``; ``u = lr * g / (sqrt(h) + d)``;
- AdaDelta: ``h = m*h + (1-m)*g^2``; ``s = g * sqrt((x + d) / (h + d))``;
  ``x = m*x + (1-m)*s^2``; ``u = lr*s``;
- Adam (``m2`` momentum2, ``t = iteration + 1``): ``a = m*a + (1-m)*g``;
  ``b = m2*b + (1-m2)*g^2``; ``u = lr * sqrt(1-m2^t) / (1-m^t) * a / (sqrt(b) + d)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from core.errors import TrainingError
from core.spec.caffe.solver import SOLVER_TYPES, SolverConfig, learning_rate

if TYPE_CHECKING:
    from workers.training.caffe.model import ParamInfo

_Update = Callable[[int, torch.Tensor, float, int], torch.Tensor]


class CaffeSolver:
    """Updates the learnable blobs of a net as Caffe's solver of ``config.type`` does.

    `params` are the net's blobs in Caffe's order (`CaffeNet.param_infos`), each with its
    ``lr_mult`` and ``decay_mult``; a blob listed twice (shared) is updated once, with the
    multipliers it is first listed with. The loop calls `zero_grad`, runs ``iter_size``
    forward/backward passes, then `step`. `lr` is the base rate of the last step.
    """

    def __init__(self, params: Sequence[ParamInfo], config: SolverConfig) -> None:
        if config.type not in SOLVER_TYPES:
            raise TrainingError(f"caffe.solver.type {config.type!r} is not a Caffe solver")
        seen: set[int] = set()
        self.params: list[ParamInfo] = []
        for info in params:
            if id(info.param) not in seen:
                seen.add(id(info.param))
                self.params.append(info)
        self.config = config
        self.lr = learning_rate(config, 0)
        blobs = [info.param.detach() for info in self.params]
        self._history = [torch.zeros_like(blob) for blob in blobs]
        two = config.type in ("AdaDelta", "Adam")
        self._history2 = [torch.zeros_like(blob) for blob in blobs] if two else []
        updates: dict[str, _Update] = {
            "SGD": self._sgd,
            "Nesterov": self._nesterov,
            "AdaGrad": self._adagrad,
            "RMSProp": self._rmsprop,
            "AdaDelta": self._adadelta,
            "Adam": self._adam,
        }
        self._update = updates[config.type]

    def state(self) -> dict[str, Any]:
        """The solver's history (Caffe's ``SolverState``: its ``history`` blobs) and rate."""
        return {"lr": self.lr, "history": list(self._history), "history2": list(self._history2)}

    @torch.no_grad()
    def restore(self, state: dict[str, Any]) -> None:
        """Take up a `state` of a solver over the same parameters (`ValueError` if not)."""
        for mine, theirs in ((self._history, state["history"]),
                             (self._history2, state["history2"])):  # fmt: skip
            if len(mine) != len(theirs):
                raise ValueError("the solver state holds another number of blobs")
            for blob, saved in zip(mine, theirs, strict=True):
                blob.copy_(saved)
        self.lr = float(state["lr"])

    def zero_grad(self) -> None:
        """Forget the gradients (Caffe's ClearParamDiffs), before an iteration's passes."""
        for info in self.params:
            info.param.grad = None

    @torch.no_grad()
    def step(self, iteration: int) -> float:
        """Apply the update of `iteration` (0 for the first) and return its base rate."""
        config = self.config
        rate = learning_rate(config, iteration)
        if not math.isfinite(rate):
            raise TrainingError(
                f"caffe.solver.lr_policy {config.lr_policy} gives learning rate {rate} at "
                f"iteration {iteration}"
            )
        self.lr = rate
        grads = [
            info.param.grad.detach().clone()
            if info.param.grad is not None
            else torch.zeros_like(info.param)
            for info in self.params
        ]
        if config.clip_gradients >= 0:
            # One sum on the device, one read back (not one per blob).
            norm = (
                float(torch.stack([g.square().sum() for g in grads]).sum().sqrt()) if grads else 0.0
            )
            if norm > config.clip_gradients:
                scale = config.clip_gradients / norm
                for g in grads:
                    g.mul_(scale)
        for i, (info, g) in enumerate(zip(self.params, grads, strict=True)):
            weight = info.param
            if config.iter_size > 1:
                g.mul_(1.0 / config.iter_size)
            decay = config.weight_decay * info.decay_mult
            if decay:
                if config.regularization_type == "L2":
                    g.add_(weight, alpha=decay)
                else:
                    g.add_(torch.sign(weight), alpha=decay)
            weight.sub_(self._update(i, g, rate * info.lr_mult, iteration))
        return rate

    def _sgd(self, i: int, g: torch.Tensor, lr: float, iteration: int) -> torch.Tensor:
        return self._history[i].mul_(self.config.momentum).add_(g, alpha=lr)

    def _nesterov(self, i: int, g: torch.Tensor, lr: float, iteration: int) -> torch.Tensor:
        m, history = self.config.momentum, self._history[i]
        previous = history.clone()
        history.mul_(m).add_(g, alpha=lr)
        return history.mul(1.0 + m).sub_(previous, alpha=m)

    def _adagrad(self, i: int, g: torch.Tensor, lr: float, iteration: int) -> torch.Tensor:
        history = self._history[i].add_(g.square())
        return g.div(history.sqrt().add_(self.config.delta)).mul_(lr)

    def _rmsprop(self, i: int, g: torch.Tensor, lr: float, iteration: int) -> torch.Tensor:
        decay = self.config.rms_decay
        history = self._history[i].mul_(decay).add_(g.square(), alpha=1.0 - decay)
        return g.div(history.sqrt().add_(self.config.delta)).mul_(lr)

    def _adadelta(self, i: int, g: torch.Tensor, lr: float, iteration: int) -> torch.Tensor:
        m, delta = self.config.momentum, self.config.delta
        grads, updates = self._history[i], self._history2[i]
        grads.mul_(m).add_(g.square(), alpha=1.0 - m)
        step = g.mul((updates + delta).div_(grads + delta).sqrt_())
        updates.mul_(m).add_(step.square(), alpha=1.0 - m)
        return step.mul_(lr)

    def _adam(self, i: int, g: torch.Tensor, lr: float, iteration: int) -> torch.Tensor:
        beta1, beta2 = self.config.momentum, self.config.momentum2
        t = iteration + 1
        correction = math.sqrt(1.0 - beta2**t) / (1.0 - beta1**t)
        first = self._history[i].mul_(beta1).add_(g, alpha=1.0 - beta1)
        second = self._history2[i].mul_(beta2).add_(g.square(), alpha=1.0 - beta2)
        return first.div(second.sqrt().add_(self.config.delta)).mul_(lr * correction)
