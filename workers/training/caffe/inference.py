"""A kept Caffe net as a plain module for inference: `caffe_module(weights, meta)`.

A Caffe trial's kept model (`workers.checkpointing`) is its `CaffeNet`'s weights with what
rebuilds the net: the trial's config (the net's and the solver's texts), the images' shape
and classes, the dtype. `caffe_module` builds the same graphs, takes the weights up, and
wraps the net so that ``module(x)`` runs its TEST phase on a batch of images as its data
layer gives them (after any ``transform_param``, which lies outside the net) and returns the
scores the loss layer would read: the first bottom of its first loss layer (the logits of a
SoftmaxWithLoss), or, for a net without one, its last blob.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from core.spec.caffe.net import build_graph
from core.spec.caffe.prototxt import parse
from core.spec.caffe.solver import parse_solver
from core.spec.caffe.trial import CaffeTrialConfig
from workers.training.caffe.loop import DTYPES
from workers.training.caffe.model import CaffeNet
from workers.training.checkpoints import CheckpointError


class CaffeInference(nn.Module):
    """A `CaffeNet`'s TEST phase as ``forward(x) -> scores`` (module docstring)."""

    def __init__(self, net: CaffeNet) -> None:
        super().__init__()
        self.net = net
        graph = net.graphs.get("TEST") or net.graphs["TRAIN"]
        self.phase = "TEST" if "TEST" in net.graphs else "TRAIN"
        self.data_top = graph.data.data_top
        self.label_top = graph.data.label_top
        losses = [layer for layer in graph.layers if any(layer.loss_weights)]
        self.scores = losses[0].bottoms[0] if losses else graph.layers[-1].tops[0]

    def forward(self, x: Tensor) -> Tensor:
        inputs = {self.data_top: x}
        if self.label_top is not None:  # the loss layer reads labels; scores do not need them
            inputs[self.label_top] = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
        return self.net(inputs, self.phase)[self.scores]


def caffe_module(weights: dict[str, Tensor], meta: dict[str, Any]) -> nn.Module:
    """The kept Caffe net of `weights` and `meta` as a `CaffeInference` in eval mode;
    `CheckpointError` when they do not describe one net."""
    try:
        config = CaffeTrialConfig.model_validate(meta["config"])
        net_text = parse(config.caffe.net_text, config.caffe.net_source)
        solver = parse_solver(parse(config.caffe.solver_text, config.caffe.solver_source),
                              config.caffe.solver_source)  # fmt: skip
        shape, classes = tuple(int(d) for d in meta["shape"]), int(meta["classes"])
        source = config.caffe.net_source
        train = build_graph(net_text, "TRAIN", shape, classes, source, solver.train_state)
        test = build_graph(net_text, "TEST", shape, classes, source, solver.test_state)
        dtype = DTYPES[str(meta.get("dtype", "float32"))]
        net = CaffeNet(train, test, torch.Generator().manual_seed(0), dtype)
        net.load_state_dict(weights)
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise CheckpointError(f"the model file does not describe its Caffe net: {exc}") from exc
    return CaffeInference(net).eval()
