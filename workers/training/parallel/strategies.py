"""How the ranks of one data-parallel trial combine their work: one class per strategy.

A rank's trainer calls, for every step: `reduce_gradients` between backward and the
optimiser step, then `after_step`; at the end of every epoch `epoch_totals`, then evaluates
inside `consensus` (the model the trial is judged by); `finish` after the last epoch's
training and `close` at the end. Sync strategies keep every rank in the same step count,
so their collectives always pair up.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator

import torch
import torch.distributed.rpc as rpc
from torch import nn

from core.spec.config import ParallelConfig
from workers.training.parallel.comm import (
    CommMeter,
    all_reduce_sum,
    flatten,
    load_flat,
)

log = logging.getLogger(__name__)

# [loss sum, rows, compute seconds, communication seconds] of one rank over a stretch.
STATS = 4


class Strategy:
    """The base: ranks train alone; subclasses say when and how they meet.

    `global_gradient` says whether a rank scales its slice's loss by the global batch (so
    that summed gradients are the global mean) rather than by its own slice.
    """

    global_gradient = False

    def __init__(
        self, config: ParallelConfig, rank: int, model: nn.Module, device: torch.device
    ) -> None:
        self.config, self.rank, self.world_size = config, rank, config.world_size
        self.device = device
        self.meter = CommMeter()
        self.steps = 0

    def reduce_gradients(
        self, model: nn.Module, loss_sum: torch.Tensor, batch_rows: int, rows: int
    ) -> torch.Tensor:
        """Combine gradients if the strategy does; return the step's mean loss to check."""
        return loss_sum / max(rows, 1)

    def after_step(self, model: nn.Module, loss_sum: torch.Tensor, rows: int) -> None:
        """Called after every step (taken or, on an empty slice, skipped)."""
        self.steps += 1

    def epoch_totals(self, local: torch.Tensor) -> torch.Tensor:
        """The epoch's `STATS` summed over the ranks (a small all-reduce)."""
        all_reduce_sum(local, CommMeter(), self.world_size)  # bookkeeping, not training
        return local

    def bytes_total(self) -> int:
        """Bytes moved by training so far, over all ranks."""
        return self.meter.bytes

    @contextlib.contextmanager
    def consensus(self, model: nn.Module) -> Iterator[None]:
        """Inside the block, `model` holds the state the trial is evaluated on."""
        yield

    def finish(self) -> None:
        """After the last epoch's training, before its evaluation."""

    def close(self) -> None:
        """Release what the strategy holds; safe to call twice."""


class AllReduce(Strategy):
    """Synchronous SGD (PCL-DNN): one all-reduce of all gradients (and the loss) per step."""

    global_gradient = True

    def reduce_gradients(
        self, model: nn.Module, loss_sum: torch.Tensor, batch_rows: int, rows: int
    ) -> torch.Tensor:
        params = [p for p in model.parameters() if p.requires_grad]
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads] + [loss_sum.reshape(1).to(grads[0].dtype)])
        all_reduce_sum(flat, self.meter, self.world_size)
        offset = 0
        for p in params:
            n = p.numel()
            p.grad = flat[offset : offset + n].view_as(p)
            offset += n
        return flat[-1] / batch_rows


class LocalSGD(Strategy):
    """Periodic model averaging (SparkNet): `tau` local steps, then an all-reduce mean.

    Only the parameters (and batch-norm statistics) are averaged; each rank keeps its own
    optimiser state. The trial is evaluated on the average of the ranks' models.
    """

    def __init__(
        self, config: ParallelConfig, rank: int, model: nn.Module, device: torch.device
    ) -> None:
        super().__init__(config, rank, model, device)
        self.in_sync = True

    def _average(self, model: nn.Module) -> torch.Tensor:
        flat = flatten(model)
        all_reduce_sum(flat, self.meter, self.world_size)
        return flat.div_(self.world_size)

    def after_step(self, model: nn.Module, loss_sum: torch.Tensor, rows: int) -> None:
        super().after_step(model, loss_sum, rows)
        self.in_sync = False
        if self.steps % self.config.tau == 0:
            load_flat(model, self._average(model))
            self.in_sync = True

    @contextlib.contextmanager
    def consensus(self, model: nn.Module) -> Iterator[None]:
        if self.in_sync:  # every rank knows it: they all take the same steps
            yield
            return
        own = flatten(model)
        load_flat(model, self._average(model))
        try:
            yield
        finally:
            load_flat(model, own)

    def finish(self) -> None:
        """Nothing to do: the last evaluation is of the average, as the final model is."""


class ElasticSync(Strategy):
    """Elastic averaging SGD through collectives: every `tau` steps, with d_i = x_i - c,
    x_i <- x_i - alpha d_i and c <- c + alpha sum_i d_i. Every rank keeps an equal copy of
    the centre c, which is what the trial is evaluated on."""

    def __init__(
        self, config: ParallelConfig, rank: int, model: nn.Module, device: torch.device
    ) -> None:
        super().__init__(config, rank, model, device)
        self.alpha = config.elastic_alpha
        self.centre = flatten(model)  # equal on every rank: the same seed built the model

    def after_step(self, model: nn.Module, loss_sum: torch.Tensor, rows: int) -> None:
        super().after_step(model, loss_sum, rows)
        if self.steps % self.config.tau:
            return
        x = flatten(model)
        diff = x - self.centre
        total = diff.clone()
        all_reduce_sum(total, self.meter, self.world_size)
        load_flat(model, x.sub_(diff, alpha=self.alpha))
        self.centre.add_(total, alpha=self.alpha)

    @contextlib.contextmanager
    def consensus(self, model: nn.Module) -> Iterator[None]:
        own = flatten(model)
        load_flat(model, self.centre)
        try:
            yield
        finally:
            load_flat(model, own)


class Centre:
    """The asynchronous centre variable, held by rank 0 and updated under a lock.

    An exchange with rank i computes d = alpha (x_i - c), moves c by +d and sends d back for
    the rank to subtract: DeepSpark's elastic update, one rank at a time, no barrier. The
    ranks' `STATS` ride along with their exchanges and are summed here per epoch of rank 0.
    """

    def __init__(self, state: torch.Tensor, alpha: float) -> None:
        self.state, self.alpha = state, alpha
        self.lock = threading.Lock()
        self.bytes = 0
        self.exchanges = 0
        self.stats = torch.zeros(STATS, dtype=torch.float64)

    def exchange(self, rank: int, x: torch.Tensor, stats: torch.Tensor) -> torch.Tensor:
        with self.lock:
            diff = (x.to(self.state.device) - self.state).mul_(self.alpha)
            self.state.add_(diff)
            self.add_stats(rank, stats, x)
            self.exchanges += 1
        return diff

    def add_stats(self, rank: int, stats: torch.Tensor, x: torch.Tensor | None = None) -> None:
        self.stats += stats.to(torch.float64)
        if x is not None and rank != 0:
            self.bytes += 2 * x.numel() * x.element_size()

    def snapshot(self) -> torch.Tensor:
        with self.lock:
            return self.state.clone()

    def take_stats(self) -> torch.Tensor:
        with self.lock:
            out, self.stats = self.stats, torch.zeros(STATS, dtype=torch.float64)
            return out


_CENTRE: Centre | None = None  # set in rank 0's process before RPC starts


def _remote_exchange(rank: int, x: torch.Tensor, stats: torch.Tensor) -> torch.Tensor:
    if _CENTRE is None:
        raise RuntimeError("this process holds no centre (not rank 0)")
    return _CENTRE.exchange(rank, x, stats)


def _remote_stats(rank: int, stats: torch.Tensor) -> None:
    if _CENTRE is None:
        raise RuntimeError("this process holds no centre (not rank 0)")
    with _CENTRE.lock:
        _CENTRE.add_stats(rank, stats)


class ElasticAsync(Strategy):
    """Asynchronous elastic averaging (DeepSpark): every `tau` local steps a rank sends its
    parameters to rank 0 over torch RPC and gets back the elastic difference; nobody waits
    for anybody else. Rank 0 trains too and exchanges with the centre in its own process.

    A rank's `STATS` since its last exchange go with the exchange, so rank 0's epoch rows
    sum what every rank reported during that epoch of rank 0's (a rank's last steps before
    a boundary may land in the next row). RPC must be initialised by the caller (`rank.py`).
    """

    def __init__(
        self, config: ParallelConfig, rank: int, model: nn.Module, device: torch.device
    ) -> None:
        super().__init__(config, rank, model, device)
        self.alpha = config.elastic_alpha
        self.window = torch.zeros(STATS, dtype=torch.float64)
        # The loss stays on the device until a window closes: no device sync per step.
        self.window_loss = torch.zeros((), dtype=torch.float64, device=device)
        self.window_started = time.perf_counter()
        self.window_comm = 0.0
        self.finished = False

    @staticmethod
    def make_centre(model: nn.Module, alpha: float) -> Centre:
        """Create rank 0's centre from the initial model, before RPC starts."""
        global _CENTRE
        _CENTRE = Centre(flatten(model).cpu(), alpha)
        return _CENTRE

    def _close_window(self) -> torch.Tensor:
        now = time.perf_counter()
        comm = self.meter.seconds - self.window_comm
        stats = self.window.clone()
        stats[0] = float(self.window_loss)
        stats[2] = now - self.window_started - comm
        stats[3] = comm
        self.window.zero_()
        self.window_loss.zero_()
        self.window_started, self.window_comm = now, self.meter.seconds
        return stats

    def after_step(self, model: nn.Module, loss_sum: torch.Tensor, rows: int) -> None:
        super().after_step(model, loss_sum, rows)
        self.window_loss += loss_sum
        self.window[1] += rows
        if self.steps % self.config.tau:
            return
        x = flatten(model).cpu()
        stats = self._close_window()
        if self.rank == 0:
            assert _CENTRE is not None
            diff = _CENTRE.exchange(0, x, stats)
        else:
            nbytes = 2 * x.numel() * x.element_size()
            with self.meter.timed(nbytes, torch.device("cpu")):
                diff = rpc.rpc_sync(
                    "rank0",
                    _remote_exchange,
                    args=(self.rank, x, stats),
                    timeout=self.config.timeout,
                )
        load_flat(model, x.sub_(diff).to(self.device))

    def epoch_totals(self, local: torch.Tensor) -> torch.Tensor:
        if self.rank != 0:
            return local
        assert _CENTRE is not None
        with _CENTRE.lock:
            _CENTRE.add_stats(0, self._close_window())
        return _CENTRE.take_stats()

    def bytes_total(self) -> int:
        return _CENTRE.bytes if _CENTRE is not None else self.meter.bytes

    def finish(self) -> None:
        """Send the last stats and leave RPC; on rank 0 this waits for every other rank to
        finish, so the last evaluation sees the centre after every exchange."""
        if self.finished:
            return
        self.finished = True
        if self.rank != 0:
            rpc.rpc_sync(
                "rank0",
                _remote_stats,
                args=(self.rank, self._close_window()),
                timeout=self.config.timeout,
            )
        rpc.shutdown(graceful=True, timeout=self.config.timeout)

    def close(self) -> None:
        self.finish()

    @contextlib.contextmanager
    def consensus(self, model: nn.Module) -> Iterator[None]:
        if self.rank != 0 or _CENTRE is None:
            yield
            return
        own = flatten(model)
        load_flat(model, _CENTRE.snapshot().to(own.device))
        try:
            yield
        finally:
            load_flat(model, own)


def build_strategy(
    config: ParallelConfig, rank: int, model: nn.Module, device: torch.device
) -> Strategy:
    """The strategy object `config` names, for this rank."""
    if config.strategy == "allreduce":
        return AllReduce(config, rank, model, device)
    if config.strategy == "local_sgd":
        return LocalSGD(config, rank, model, device)
    if config.asynchronous:
        return ElasticAsync(config, rank, model, device)
    return ElasticSync(config, rank, model, device)


def uses_rpc(config: ParallelConfig) -> bool:
    """Whether the ranks talk over torch RPC (asynchronous easgd) instead of collectives."""
    return config.strategy == "easgd" and config.asynchronous


__all__ = [
    "STATS",
    "AllReduce",
    "Centre",
    "ElasticAsync",
    "ElasticSync",
    "LocalSGD",
    "Strategy",
    "build_strategy",
    "uses_rpc",
]
