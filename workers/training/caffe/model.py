"""A Caffe net (its TRAIN and TEST graphs) as one PyTorch module.

`CaffeNet(train, test, generator)` draws every layer's blobs with its fillers, TRAIN's layers
first then the TEST-only ones, in layer order, from `generator`. Layers of one name in both
phases share their blobs, as Caffe's ShareTrainedLayersWith does (BatchNorm's statistics
too), so the TEST net evaluates what TRAIN learnt. `forward(inputs, phase)` feeds the data
layer's tops from `inputs` and returns every blob by name (an in-place layer's top replaces
its bottom's entry); `loss` sums ``loss_weight x top`` over the phase's weighted tops, as
Caffe's Net does; `param_infos` lists the learnable blobs in Caffe's order (layer order, then
blob order) with their ``lr_mult`` / ``decay_mult`` for the solver. BatchNorm's statistics
are buffers, never parameters. The module's train()/eval() mode follows the phase run last.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from core.errors import TrainingError
from core.spec.caffe.layers import LAYER_TYPES
from core.spec.caffe.net import LayerDef, NetGraph
from workers.training.caffe.layers import Forward, make_blobs, make_forward


@dataclass
class ParamInfo:
    """One learnable blob for the solver: which layer, which blob, its multipliers."""

    param: nn.Parameter
    layer: str
    index: int
    lr_mult: float
    decay_mult: float


class _Held(nn.Module):
    """One layer's blobs: learnable ones as parameters, statistics as buffers."""

    def __init__(self, params: list[Tensor], stats: list[Tensor]) -> None:
        super().__init__()
        self.params = nn.ParameterList([nn.Parameter(p) for p in params])
        for i, stat in enumerate(stats):
            self.register_buffer(f"stat{i}", stat)
        self.stat_count = len(stats)

    def blobs(self) -> tuple[list[Tensor], list[Tensor]]:
        stats = [getattr(self, f"stat{i}") for i in range(self.stat_count)]
        return list(self.params), stats


@dataclass
class _Step:
    layer: LayerDef
    forward: Forward
    held: int | None  # index into CaffeNet.held


class CaffeNet(nn.Module):
    """The module a Caffe trial trains: both phases' graphs over one set of blobs."""

    def __init__(
        self,
        train: NetGraph,
        test: NetGraph | None,
        generator: torch.Generator,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.graphs = {"TRAIN": train, **({"TEST": test} if test is not None else {})}
        self.dtype = dtype
        self.held = nn.ModuleList()
        owner: dict[str, tuple[int, LayerDef]] = {}
        self._steps: dict[str, list[_Step]] = {}
        for phase, graph in self.graphs.items():
            steps = []
            for layer in graph.layers:
                if LAYER_TYPES[layer.type].data:
                    continue
                steps.append(_Step(layer, make_forward(layer), self._hold(layer, owner, generator)))
            self._steps[phase] = steps

    def _hold(
        self, layer: LayerDef, owner: dict[str, tuple[int, LayerDef]], generator: torch.Generator
    ) -> int | None:
        if not (layer.param_shapes or layer.stat_shapes):
            return None
        if layer.name in owner:
            index, first = owner[layer.name]
            if (first.param_shapes, first.stat_shapes) != (layer.param_shapes, layer.stat_shapes):
                raise TrainingError(
                    f"layer '{layer.name}' ({layer.type}): its TEST blobs "
                    f"{[list(s) for s in layer.param_shapes]} differ from its TRAIN blobs "
                    f"{[list(s) for s in first.param_shapes]}"
                )
            return index
        params, stats = make_blobs(layer, generator, self.dtype)
        self.held.append(_Held(params, stats))
        owner[layer.name] = (len(self.held) - 1, layer)
        return len(self.held) - 1

    def _graph(self, phase: str) -> NetGraph:
        if phase not in self.graphs:
            raise TrainingError(f"the net has no {phase} phase")
        return self.graphs[phase]

    def forward(self, inputs: dict[str, Tensor], phase: str = "TRAIN") -> dict[str, Tensor]:
        """Every blob of `phase` by name, computed from the data layer's tops in `inputs`."""
        graph = self._graph(phase)
        train = phase == "TRAIN"
        if self.training != train:
            self.train(train)
        blobs: dict[str, Tensor] = {}
        for top in graph.data.tops:
            if top in inputs:
                value = inputs[top]
                blobs[top] = value.to(self.dtype) if value.is_floating_point() else value
        if graph.data.data_top not in blobs:
            raise TrainingError(f"the input '{graph.data.data_top}' was not fed to the net")
        for step in self._steps[phase]:
            missing = [b for b in step.layer.bottoms if b not in blobs]
            if missing:
                raise TrainingError(
                    f"layer '{step.layer.name}' ({step.layer.type}) needs '{missing[0]}', "
                    "which the data set did not feed (a labelled data set feeds the second top)"
                )
            bottoms = [
                blobs[b] if down else blobs[b].detach()
                for b, down in zip(step.layer.bottoms, step.layer.propagate_down, strict=True)
            ]
            held = self.held[step.held].blobs() if step.held is not None else ([], [])
            tops = step.forward(held, bottoms, train)
            blobs.update(zip(step.layer.tops, tops, strict=True))
        return blobs

    def loss(self, blobs: dict[str, Tensor], phase: str = "TRAIN") -> Tensor:
        """Σ loss_weight x (sum of the top) over the phase's weighted tops."""
        total: Tensor | None = None
        for layer in self._graph(phase).layers:
            for top, weight in zip(layer.tops, layer.loss_weights, strict=True):
                if weight:
                    term = blobs[top].sum() * weight
                    total = term if total is None else total + term
        if total is None:
            raise TrainingError(f"the {phase} net has no loss (no top with a loss_weight)")
        return total

    def outputs(self, blobs: dict[str, Tensor], phase: str = "TRAIN") -> dict[str, float]:
        """Each loss and accuracy top's value, by top name."""
        return {top: float(blobs[top].detach().sum()) for top in self._graph(phase).outputs()}

    def param_infos(self) -> list[ParamInfo]:
        """The learnable blobs in Caffe's order, with their solver multipliers."""
        infos: list[ParamInfo] = []
        for step in self._steps["TRAIN"]:
            if step.held is None:
                continue
            layer = step.layer
            params = self.held[step.held].params
            for i, param in enumerate(params):
                infos.append(
                    ParamInfo(param, layer.name, i, layer.lr_mults[i], layer.decay_mults[i])
                )
        return infos
