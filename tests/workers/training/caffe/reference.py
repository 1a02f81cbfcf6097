"""Caffe's solver update written out again in NumPy, apart from `CaffeSolver`, for tests.

From Caffe's documented semantics: the base rate of the iteration's lr policy; clip the
accumulated gradients on their global L2 norm; then per blob divide by iter_size, add the
decay (weight_decay * decay_mult times the weight for L2, its sign for L1), and take the
step of the solver type at rate * lr_mult.
"""

from __future__ import annotations

import math

import numpy as np

from core.spec.caffe.solver import SolverConfig


def reference_rate(c: SolverConfig, it: int) -> float:
    """Caffe's GetLearningRate for `c.lr_policy` at iteration `it`."""
    policy = c.lr_policy
    if policy == "fixed":
        return c.base_lr
    if policy == "step":
        return c.base_lr * c.gamma ** math.floor(it / c.stepsize)
    if policy == "exp":
        return c.base_lr * c.gamma**it
    if policy == "inv":
        return c.base_lr * (1 + c.gamma * it) ** (-c.power)
    if policy == "multistep":
        return c.base_lr * c.gamma ** len([v for v in c.stepvalue if it >= v])
    if policy == "poly":
        return c.base_lr * (1 - it / c.max_iter) ** c.power
    assert policy == "sigmoid"
    return c.base_lr * (1 / (1 + math.exp(-c.gamma * (it - c.stepsize))))


class ReferenceSolver:
    """Float64 weights and their histories, updated from the gradients of each iteration."""

    def __init__(
        self, weights: list[np.ndarray], mults: list[tuple[float, float]], config: SolverConfig
    ) -> None:
        self.weights = [np.array(w, dtype=np.float64) for w in weights]
        self.mults = mults
        self.config = config
        self.h = [np.zeros_like(w) for w in self.weights]
        self.h2 = [np.zeros_like(w) for w in self.weights]
        self.clipped = 0

    def step(self, grads: list[np.ndarray], it: int) -> None:
        c, w, h, h2 = self.config, self.weights, self.h, self.h2
        rate = reference_rate(c, it)
        norm = math.sqrt(sum(float((g * g).sum()) for g in grads))
        if c.clip_gradients >= 0 and norm > c.clip_gradients:
            self.clipped += 1
            grads = [g * (c.clip_gradients / norm) for g in grads]
        for k, (lr_mult, decay_mult) in enumerate(self.mults):
            g = grads[k] / c.iter_size
            decay = c.weight_decay * decay_mult
            g = g + decay * (w[k] if c.regularization_type == "L2" else np.sign(w[k]))
            lr, m, d = rate * lr_mult, c.momentum, c.delta
            if c.type == "SGD":
                h[k] = m * h[k] + lr * g
                u = h[k]
            elif c.type == "Nesterov":
                old = h[k]
                h[k] = m * h[k] + lr * g
                u = (1 + m) * h[k] - m * old
            elif c.type == "AdaGrad":
                h[k] = h[k] + g * g
                u = lr * g / (np.sqrt(h[k]) + d)
            elif c.type == "RMSProp":
                h[k] = c.rms_decay * h[k] + (1 - c.rms_decay) * g * g
                u = lr * g / (np.sqrt(h[k]) + d)
            elif c.type == "AdaDelta":
                h[k] = m * h[k] + (1 - m) * g * g
                s = g * np.sqrt((h2[k] + d) / (h[k] + d))
                h2[k] = m * h2[k] + (1 - m) * s * s
                u = lr * s
            else:
                assert c.type == "Adam"
                t = it + 1
                h[k] = m * h[k] + (1 - m) * g
                h2[k] = c.momentum2 * h2[k] + (1 - c.momentum2) * g * g
                corrected = lr * math.sqrt(1 - c.momentum2**t) / (1 - m**t)
                u = corrected * h[k] / (np.sqrt(h2[k]) + d)
            w[k] = w[k] - u


#: Settings of each solver type and lr policy that train the test nets sensibly.
TYPE_SETTINGS: dict[str, dict[str, object]] = {
    "SGD": {"base_lr": 0.05, "momentum": 0.9},
    "Nesterov": {"base_lr": 0.05, "momentum": 0.9},
    "AdaGrad": {"base_lr": 0.05},
    "RMSProp": {"base_lr": 0.01, "rms_decay": 0.9},
    "AdaDelta": {"base_lr": 1.0, "momentum": 0.95, "delta": 1e-6},
    "Adam": {"base_lr": 0.01, "momentum": 0.9, "momentum2": 0.999},
}
POLICY_SETTINGS: dict[str, dict[str, object]] = {
    "fixed": {},
    "step": {"gamma": 0.5, "stepsize": 5},
    "exp": {"gamma": 0.95},
    "inv": {"gamma": 0.1, "power": 0.75},
    "multistep": {"gamma": 0.5, "stepvalue": (3, 8, 15)},
    "poly": {"power": 1.5},
    "sigmoid": {"gamma": -0.3, "stepsize": 10},
}


def config_for(kind: str, policy: str, max_iter: int, **changes: object) -> SolverConfig:
    """A solver of `kind` and `policy` with L2 decay, clipping and iter_size 2."""
    settings = {
        "type": kind,
        "lr_policy": policy,
        "max_iter": max_iter,
        "weight_decay": 0.01,
        "iter_size": 2,
        "clip_gradients": 3.0,
        **TYPE_SETTINGS[kind],
        **POLICY_SETTINGS[policy],
        **changes,
    }
    return SolverConfig(**settings)  # type: ignore[arg-type]
