"""K multilayer perceptrons of one depth and activation as one stacked model.

Layer l of every model is one weight tensor [K, in, out] and one bias [K, out]; a batch
is [K, B, features] (each model its own rows) and goes through `torch.baddbmm`. The
weights are stored as `nn.Linear`'s transposed: backward then gives each weight's
gradient in the weight's own layout (stored [K, out, in] and used transposed, every
gradient was a strided copy: 45% of a step at width 1024). The shared
validation set goes through as [N, features], broadcast to every model. Each model is
first built by the unfused builder (`build_mlp`, with its own seed: the same initial
weights, whatever its init scheme) and then copied in, so model k starts exactly where
its unfused twin does.

**Padding.** Hidden layer l is as wide as its widest model; a narrower model's extra
units have zero weights and biases, and their activations are multiplied by a 0/1 mask
after the activation function (sigmoid(0) is not 0), so they are exactly zero going
forward, their gradients are exactly zero coming back, and no optimiser moves them (the
updates of a zero weight with a zero gradient are zero, weight decay included).

**Batch norm** runs `F.batch_norm` on the batch viewed as [B, K * width]: per channel,
which is per model and unit, exactly as `nn.BatchNorm1d` on each model alone (momentum
0.1, eps 1e-5, running statistics per model). Padded channels get a zero scale and bias.

**Dropout** draws each model's mask as `nn.Dropout` does on a CPU (a Bernoulli tensor the
shape of that model's own layer, divided by 1 - p, multiplied in), from a generator that
continues the model's own seeded stream after its initialisation, so on a CPU each model
sees the masks it would see alone. On CUDA the unfused path uses a fused dropout kernel
whose stream cannot be replayed per model: there the masks are drawn the same way from a
per-model CUDA generator seeded with the trial's seed, statistically alike but not the
same numbers.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from core.spec.config import ModelConfig
from workers.training.models import _ACTIVATIONS

BN_MOMENTUM = 0.1
BN_EPS = 1e-5


def _layers(model: nn.Module) -> tuple[list[nn.Linear], list[nn.BatchNorm1d]]:
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm1d)]
    return linears, norms


class FusedMLP:
    """The stacked parameters, masks and dropout streams of K models (module docstring).

    `models[k]` is model k built by `build_mlp` from `configs[k]`; `dropout_streams[k]` is
    the generator its dropout masks come from (None when its dropout is 0).
    """

    def __init__(
        self,
        models: list[nn.Module],
        configs: list[ModelConfig],
        dropout_streams: list[torch.Generator | None],
    ) -> None:
        first = configs[0]
        self.activation = _ACTIVATIONS[first.activation]()
        self.batch_norm = first.batch_norm
        self.depth = first.hidden_layers
        self.widths = [list(c.widths) for c in configs]
        self.dropout = [c.dropout for c in configs]
        self.streams = list(dropout_streams)
        per_model = [_layers(m) for m in models]
        reference = per_model[0][0][0].weight
        device, dtype = reference.device, reference.dtype
        count = len(models)
        in_features = per_model[0][0][0].in_features
        out_features = per_model[0][0][-1].out_features
        hidden = [max(w[layer] for w in self.widths) for layer in range(self.depth)]
        sizes = [in_features, *hidden, out_features]
        self.weights: list[Tensor] = []
        self.biases: list[Tensor] = []
        self.bn_weight: list[Tensor] = []
        self.bn_bias: list[Tensor] = []
        self.bn_mean: list[Tensor] = []
        self.bn_var: list[Tensor] = []
        self.masks: list[Tensor | None] = []
        with torch.no_grad():
            for layer in range(self.depth + 1):
                fan_in, fan_out = sizes[layer], sizes[layer + 1]
                weight = torch.zeros(count, fan_in, fan_out, device=device, dtype=dtype)
                bias = torch.zeros(count, fan_out, device=device, dtype=dtype)
                for k, (linears, _) in enumerate(per_model):
                    source = linears[layer]
                    weight[k, : source.in_features, : source.out_features] = source.weight.T
                    bias[k, : source.out_features] = source.bias
                self.weights.append(weight.requires_grad_())
                self.biases.append(bias.requires_grad_())
                if layer == self.depth:
                    break
                mask = torch.zeros(count, 1, fan_out, device=device, dtype=dtype)
                for k, width in enumerate(self.widths):
                    mask[k, :, : width[layer]] = 1
                self.masks.append(None if bool(mask.all()) else mask)
                if self.batch_norm:
                    tensors = [torch.zeros(count, fan_out, device=device, dtype=dtype)]
                    tensors += [torch.zeros_like(tensors[0]) for _ in range(2)]
                    tensors.append(torch.ones_like(tensors[0]))
                    scale, shift, mean, var = tensors
                    for k, (_, norms) in enumerate(per_model):
                        norm = norms[layer]
                        n = norm.num_features
                        scale[k, :n], shift[k, :n] = norm.weight, norm.bias
                        mean[k, :n], var[k, :n] = norm.running_mean, norm.running_var
                    self.bn_weight.append(scale.requires_grad_())
                    self.bn_bias.append(shift.requires_grad_())
                    self.bn_mean.append(mean)
                    self.bn_var.append(var)

    @property
    def count(self) -> int:
        """How many models are stacked."""
        return self.weights[0].shape[0]

    def parameters(self) -> list[Tensor]:
        """The trainable tensors, each with the models on its first axis."""
        out = []
        for layer in range(self.depth + 1):
            out += [self.weights[layer], self.biases[layer]]
            if self.batch_norm and layer < self.depth:
                out += [self.bn_weight[layer], self.bn_bias[layer]]
        return out

    def zero_grad(self) -> None:
        """Drop the gradients, as `zero_grad(set_to_none=True)` does."""
        for param in self.parameters():
            param.grad = None

    def keep(self, index: list[int]) -> None:
        """Keep only the models at these positions, in this order."""
        rows = torch.tensor(index, dtype=torch.long, device=self.weights[0].device)

        def pick(tensors: list[Tensor], grad: bool) -> list[Tensor]:
            picked = [t.detach().index_select(0, rows) for t in tensors]
            return [t.requires_grad_() for t in picked] if grad else picked

        self.weights, self.biases = pick(self.weights, True), pick(self.biases, True)
        self.bn_weight, self.bn_bias = pick(self.bn_weight, True), pick(self.bn_bias, True)
        self.bn_mean, self.bn_var = pick(self.bn_mean, False), pick(self.bn_var, False)
        self.masks = [None if m is None else m.index_select(0, rows) for m in self.masks]
        self.widths = [self.widths[i] for i in index]
        self.dropout = [self.dropout[i] for i in index]
        self.streams = [self.streams[i] for i in index]

    def member_slices(self, position: int) -> list[tuple[slice, ...]]:
        """For each tensor of `parameters()`, the part of it that is model `position`'s own
        (its row, without padding): weights [in, out], biases and batch-norm [out]."""
        widths = self.widths[position]
        n_in = self.weights[0].shape[1]
        n_out = self.weights[-1].shape[2]
        sizes = [n_in, *widths, n_out]
        out: list[tuple[slice, ...]] = []
        for layer in range(self.depth + 1):
            fan_in, fan_out = sizes[layer], sizes[layer + 1]
            out.append((slice(position, position + 1), slice(0, fan_in), slice(0, fan_out)))
            out.append((slice(position, position + 1), slice(0, fan_out)))
            if self.batch_norm and layer < self.depth:
                out += [(slice(position, position + 1), slice(0, fan_out))] * 2
        return out

    @torch.no_grad()
    def copy_into(self, position: int, model: nn.Module) -> nn.Module:
        """Model `position`'s current weights (and batch-norm statistics) copied into
        `model`, a fresh `build_mlp` of its config: the member as a plain model."""
        linears, norms = _layers(model)
        for layer, linear in enumerate(linears):
            n, m = linear.in_features, linear.out_features
            linear.weight.copy_(self.weights[layer][position, :n, :m].T)
            linear.bias.copy_(self.biases[layer][position, :m])
        for layer, norm in enumerate(norms):
            n = norm.num_features
            norm.weight.copy_(self.bn_weight[layer][position, :n])
            norm.bias.copy_(self.bn_bias[layer][position, :n])
            norm.running_mean.copy_(self.bn_mean[layer][position, :n])
            norm.running_var.copy_(self.bn_var[layer][position, :n])
        return model

    def __call__(self, x: Tensor, train: bool) -> Tensor:
        """Outputs [K, rows, out] for `x` [K, rows, in] (own rows) or [rows, in] (shared)."""
        h = x
        for layer in range(self.depth + 1):
            weight, bias = self.weights[layer], self.biases[layer]
            if h.dim() == 2:
                h = torch.matmul(h, weight) + bias.unsqueeze(1)
            else:
                h = torch.baddbmm(bias.unsqueeze(1), h, weight)
            if layer == self.depth:
                return h
            if self.batch_norm:
                h = self._norm(h, layer, train)
            h = self.activation(h)
            mask = self.masks[layer]
            if mask is not None:
                h = h * mask
            if train and any(self.dropout):
                h = h * self._noise(h, layer)
        return h

    def _norm(self, h: Tensor, layer: int, train: bool) -> Tensor:
        count, rows, width = h.shape
        flat = h.transpose(0, 1).reshape(rows, count * width)
        out = F.batch_norm(
            flat,
            self.bn_mean[layer].view(-1),
            self.bn_var[layer].view(-1),
            self.bn_weight[layer].view(-1),
            self.bn_bias[layer].view(-1),
            training=train,
            momentum=BN_MOMENTUM,
            eps=BN_EPS,
        )
        return out.view(rows, count, width).transpose(0, 1)

    def _noise(self, h: Tensor, layer: int) -> Tensor:
        """Each model's dropout mask for this layer, scaled, in one [K, rows, width] tensor."""
        noise = torch.ones_like(h)
        rows = h.shape[1]
        for k, (p, stream) in enumerate(zip(self.dropout, self.streams, strict=True)):
            if p <= 0:
                continue
            width = self.widths[k][layer]
            own = torch.empty(rows, width, dtype=h.dtype, device=h.device)
            noise[k, :, :width] = own.bernoulli_(1 - p, generator=stream).div_(1 - p)
        return noise


def parameter_count(models: list[nn.Module]) -> list[int]:
    """Each model's own trainable parameters (its padding is not counted)."""
    return [sum(p.numel() for p in m.parameters() if p.requires_grad) for m in models]
