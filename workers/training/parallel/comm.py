"""What the ranks exchange and what it costs: flat parameter vectors, timed collectives.

Bytes are counted from the payloads, as a ring all-reduce moves them: each of W ranks sends
2(W-1)/W of the payload, 2(W-1) payloads in all. An exchange with the asynchronous centre
moves the parameters there and the difference back: two payloads. Seconds are wall time
inside the collective, waiting for slower ranks included: that wait is what synchronising
costs.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn


@dataclass
class CommMeter:
    """Seconds spent in communication and bytes moved, over all ranks, since the start."""

    seconds: float = 0.0
    bytes: int = 0

    @contextlib.contextmanager
    def timed(self, nbytes: int, device: torch.device) -> Iterator[None]:
        """Time the communication inside the block and count `nbytes` for it."""
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        started = time.perf_counter()
        try:
            yield
        finally:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            self.seconds += time.perf_counter() - started
            self.bytes += nbytes


def ring_bytes(tensor: torch.Tensor, world_size: int) -> int:
    """Bytes a ring all-reduce of `tensor` moves over all ranks together."""
    return 2 * (world_size - 1) * tensor.numel() * tensor.element_size()


def all_reduce_sum(tensor: torch.Tensor, meter: CommMeter, world_size: int) -> None:
    """Sum `tensor` over the ranks in place, timed and counted."""
    with meter.timed(ring_bytes(tensor, world_size), tensor.device):
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)


def state_tensors(model: nn.Module) -> list[torch.Tensor]:
    """The tensors that make a model's state: parameters, then floating buffers (batch norm
    running statistics); integer buffers such as batch counts are left alone."""
    tensors = [p for p in model.parameters()]
    tensors.extend(b for b in model.buffers() if b.is_floating_point())
    return tensors


def flatten(model: nn.Module) -> torch.Tensor:
    """A copy of the model's state as one vector."""
    return torch.cat([t.detach().reshape(-1) for t in state_tensors(model)])


@torch.no_grad()
def load_flat(model: nn.Module, flat: torch.Tensor) -> None:
    """Write a vector made by `flatten` back into the model's state."""
    offset = 0
    for tensor in state_tensors(model):
        n = tensor.numel()
        tensor.copy_(flat[offset : offset + n].view_as(tensor))
        offset += n
