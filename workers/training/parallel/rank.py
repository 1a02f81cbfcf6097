"""One rank of a data-parallel trial: a process that trains its share and meets the others.

The worker's launcher starts every rank of a trial on its own host. Ranks on several hosts
rendezvous the same way, at a c10d TCP store that rank 0 opens on ``--master HOST:PORT``
(the ``tcp://`` init method of torch.distributed; torch RPC for asynchronous easgd). On
each host, start one process per rank with the same trial config::

    python -m workers.training.parallel.rank --config trial.json \\
        --rank 1 --world-size 4 --master 10.0.0.5:29500

Rank 0 must run on the host named by ``--master`` and that port must be reachable from the
others; set ``GLOO_SOCKET_IFNAME`` (and ``TP_SOCKET_IFNAME`` for RPC) to the interface the
ranks share when a host has several. Rank 0 writes its events (``ready``, one ``epoch`` per
epoch, ``checkpoint`` and ``model`` with ``--checkpoint-dir``, ``result``) as JSON lines
to ``--report-fd`` or to stdout; any rank writes an
``error`` event and exits 1 when training fails. Every collective and RPC has
``execution.parallel.timeout``, so a rank whose peer died fails instead of hanging.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.rpc as rpc

from core.errors import TrainingError
from core.spec.artifacts import Artifacts
from core.spec.config import TrialConfig
from workers.training.checkpoints import model_file, pack, unpack
from workers.training.epochs import error_headline, oom_reason
from workers.training.loop import CHECK_EVERY_STEPS, Trainer, check_finite
from workers.training.models import count_parameters
from workers.training.optim import current_lr
from workers.training.parallel.strategies import (
    STATS,
    ElasticAsync,
    Strategy,
    build_strategy,
    uses_rpc,
)

log = logging.getLogger(__name__)
Report = Callable[[dict[str, Any]], None]


def backend_for(config: TrialConfig, device: torch.device) -> str:
    """`execution.parallel.backend`, with `auto` meaning nccl on CUDA and gloo on the CPU."""
    backend = config.execution.parallel.backend
    if backend == "auto":
        return "nccl" if device.type == "cuda" else "gloo"
    if backend == "nccl" and device.type != "cuda":
        raise TrainingError(
            "execution.parallel.backend nccl needs CUDA, but the trial runs on the CPU"
        )
    return backend


class RankTrainer(Trainer):
    """A `Trainer` that trains rank `rank`'s slice of every global batch under a strategy.

    The global batch is `training.batch_size` rows in the order every rank draws from the
    same seeded generator; rank r takes the r-th of `world_size` near-equal slices. Only
    rank 0 evaluates; every epoch row adds `compute_seconds` and `comm_seconds` (means over
    the ranks) and `comm_bytes` (over all ranks).
    """

    def __init__(self, config: TrialConfig, data_dir: Path | None, rank: int) -> None:
        super().__init__(config, data_dir)
        self.parallel = config.execution.parallel
        self.rank, self.world_size = rank, self.parallel.world_size
        if rank:  # the same initial weights everywhere, but each rank its own dropout
            torch.manual_seed(self.seed + 1_000_003 * rank)
        self.strategy: Strategy | None = None

    def attach(self, strategy: Strategy) -> None:
        self.strategy = strategy

    def _epoch(self, epoch: int, should_stop: Callable[[], bool] | None) -> dict[str, float] | None:
        strategy = self.strategy
        assert strategy is not None
        started = time.perf_counter()
        comm_at_start, bytes_at_start = strategy.meter.seconds, strategy.bytes_total()
        size, rank = self.world_size, self.rank
        n = self.x_train.shape[0]
        batch = min(self.config.training.batch_size, n)
        steps = math.ceil(n / batch)
        if self.config.model.batch_norm:
            if batch // size < 2:
                raise TrainingError(
                    "model.batch_norm needs 2 or more rows per rank, but training.batch_size "
                    f"{self.config.training.batch_size} over execution.parallel.world_size "
                    f"{size} gives {batch // size}"
                )
            if (n - batch * (steps - 1)) // size < 2:  # a last batch too small to split
                steps -= 1
        lr = current_lr(self.optimizer)
        losses = torch.empty(steps, dtype=self.metric_dtype, device=self.device)
        loss_sum = torch.zeros((), dtype=self.metric_dtype, device=self.device)
        rows = 0
        order = torch.randperm(n, generator=self.shuffle).to(self.device)
        self.model.train()
        checked = 0
        for step in range(steps):
            index = order[step * batch : (step + 1) * batch]
            mine = index.tensor_split(size)[rank]
            k = int(mine.numel())
            self.optimizer.zero_grad(set_to_none=True)
            if k:
                batch_loss = self._loss(
                    self._forward(self.x_train[mine]), self.y_train[mine], reduction="sum"
                )
                scaled = batch_loss / (index.numel() if strategy.global_gradient else k)
                (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
                batch_loss = batch_loss.detach()
            else:
                batch_loss = torch.zeros((), dtype=self.metric_dtype, device=self.device)
            losses[step] = strategy.reduce_gradients(self.model, batch_loss, index.numel(), k)
            if k or strategy.global_gradient:
                if self.scaler is not None:
                    self.scaler.step(self.optimizer)
                    self.scaler.update()
                else:
                    self.optimizer.step()
            strategy.after_step(self.model, batch_loss, k)
            loss_sum += batch_loss
            rows += k
            if (step + 1) % CHECK_EVERY_STEPS == 0:
                check_finite(losses[checked : step + 1], epoch, checked)
                checked = step + 1
        check_finite(losses[checked:], epoch, checked)
        if epoch == self.config.training.epochs:
            strategy.finish()
        trained = time.perf_counter() - started
        comm = strategy.meter.seconds - comm_at_start
        local = torch.tensor([float(loss_sum), rows, trained - comm, comm], dtype=torch.float64)
        totals = strategy.epoch_totals(local.to(self.device)).cpu()
        assert totals.numel() == STATS
        row: dict[str, float] = {
            "epoch": epoch,
            "train_loss": float(totals[0] / max(float(totals[1]), 1.0)),
        }
        with strategy.consensus(self.model):
            if rank == 0:
                row.update(self._evaluate(self.x_val, self.y_val, "val", epoch))
        row["lr"] = lr
        if self.scheduler is not None:
            self.scheduler.step()
        row["compute_seconds"] = float(totals[2]) / size
        row["comm_seconds"] = float(totals[3]) / size
        row["comm_bytes"] = float(strategy.bytes_total() - bytes_at_start)
        row["epoch_seconds"] = time.perf_counter() - started
        return row


def _connect(
    config: TrialConfig, trainer: RankTrainer, master: str, join_timeout: float | None = None
) -> str:
    """Join the other ranks: a gloo/NCCL process group, or RPC for asynchronous easgd.

    With `join_timeout` (ranks on several hosts) the rendezvous at rank 0's TCP store waits
    that long for every rank to join, and the collectives then have the trial's timeout."""
    parallel = config.execution.parallel
    backend = backend_for(config, trainer.device)
    init = f"tcp://{master}"
    if join_timeout is not None and not uses_rpc(parallel):
        host, _, port = master.rpartition(":")
        store = dist.TCPStore(
            host.strip("[]"),
            int(port),
            parallel.world_size,
            trainer.rank == 0,
            timeout=timedelta(seconds=join_timeout),
        )
        dist.init_process_group(
            backend,
            store=store,
            rank=trainer.rank,
            world_size=parallel.world_size,
            timeout=timedelta(seconds=parallel.timeout),
        )
        # Every rank is in: from here on a failure is a lost rank, not one that never came.
        dist.barrier()
        return backend
    if uses_rpc(parallel):
        if trainer.rank == 0:
            ElasticAsync.make_centre(trainer.model, parallel.elastic_alpha)
        options = rpc.TensorPipeRpcBackendOptions(init_method=init, rpc_timeout=parallel.timeout)
        rpc.init_rpc(
            f"rank{trainer.rank}",
            rank=trainer.rank,
            world_size=parallel.world_size,
            rpc_backend_options=options,
        )
        return "rpc"
    dist.init_process_group(
        backend,
        init_method=init,
        rank=trainer.rank,
        world_size=parallel.world_size,
        timeout=timedelta(seconds=parallel.timeout),
    )
    return backend


class RankCheckpoints:
    """A rank's side of the trial's checkpoints (`workers.training.epochs.Checkpointing`):
    every rank takes up the checkpoint the launcher hands it (``--resume``, rank 0's state
    of an earlier attempt); rank 0 writes a checkpoint into ``--checkpoint-dir`` when the
    sweep's policy says one is due, and its trained model at the end, and reports each as
    an event (``checkpoint``, ``model``) that the launcher stores."""

    def __init__(
        self, rank: int, report: Report, folder: Path, policy: Artifacts, resume: Path | None
    ) -> None:
        self.rank, self.report, self.folder, self.policy = rank, report, folder, policy
        self.resume = resume
        self.last = time.monotonic()

    def resumed(self) -> tuple[Any, dict[str, Any]] | None:
        if self.resume is None:
            return None
        state, meta = unpack(self.resume.read_bytes())
        if self.rank:  # rank 0's rows: the others evaluate nothing, and report nothing
            meta = {**meta, "metrics": []}
        return state, meta

    def resuming(self, meta: dict[str, Any]) -> None:
        self.last = time.monotonic()

    def unusable(self, err: Exception) -> None:
        raise err

    def _write(self, name: str, data: bytes) -> Path:
        path = self.folder / name
        part = path.with_suffix(".part")
        part.write_bytes(data)
        part.replace(path)
        return path

    def after_epoch(self, epoch: int, capture: Any) -> None:
        if self.rank or not self.policy.due(epoch, time.monotonic() - self.last):
            return
        state, meta = capture()
        self.save(epoch, state, meta)

    def epoch_model(self, epoch: int, row: dict[str, float], snapshot: Any) -> None:
        """Nothing: a data-parallel trial keeps its last epoch's weights."""

    def save(self, epoch: int, state: Any, meta: dict[str, Any]) -> None:
        path = self._write(f"checkpoint-{epoch}", pack(state, {**meta, "epoch": epoch}))
        self.report({"event": "checkpoint", "epoch": epoch, "path": str(path)})
        self.last = time.monotonic()

    def save_file(self, name: str, data: bytes) -> dict[str, Any]:
        raise TrainingError("a data-parallel trial keeps no files of its own")

    def trained(self, model: Any, meta: dict[str, Any]) -> None:
        if self.rank == 0:
            path = self._write("model", model_file(model, meta))
            self.report({"event": "model", "path": str(path)})


def run_rank(
    config: TrialConfig,
    rank: int,
    master: str,
    report: Report,
    data_dir: Path | None = None,
    checkpoints: RankCheckpoints | None = None,
    join_timeout: float | None = None,
) -> None:
    """Train this rank's share of the trial; rank 0 reports its epochs and result (and,
    with `checkpoints`, its checkpoints and trained model)."""
    trainer = RankTrainer(config, data_dir, rank)
    transport = _connect(config, trainer, master, join_timeout)
    strategy = build_strategy(config.execution.parallel, rank, trainer.model, trainer.device)
    trainer.attach(strategy)
    try:
        if rank == 0:
            report(
                {
                    "event": "ready",
                    "setup_seconds": trainer.setup_seconds,
                    "param_count": count_parameters(trainer.model),
                    "seed": trainer.seed,
                    "dataset_fingerprint": trainer.data.fingerprint,
                }
            )

        def on_epoch(epoch: int, row: dict[str, float]) -> None:
            if rank == 0:
                report({"event": "epoch", "epoch": epoch, "row": row})

        result = trainer.run(on_epoch, None, checkpoints)
        strategy.close()
        if rank == 0:
            result.device.update(
                world_size=config.execution.parallel.world_size,
                backend=transport,
                strategy=config.execution.parallel.strategy,
            )
            fields = result.to_dict()
            fields.pop("epochs_completed", None)
            report({"event": "result", "result": fields})
    finally:
        if transport != "rpc" and dist.is_initialized():
            dist.destroy_process_group()


def failure_reason(exc: BaseException, rank: int) -> str:
    """The one-line-plus-context reason a rank reports for an error."""
    if isinstance(exc, TrainingError):
        return exc.reason
    memory = oom_reason(exc)
    if memory is not None:
        return f"rank {rank}: {memory}"
    if isinstance(exc, RuntimeError) and "timed out" in str(exc).lower():
        return (
            f"rank {rank}: a collective timed out (execution.parallel.timeout): another rank "
            f"stopped answering; {error_headline(exc)}"
        )
    tail = "".join(traceback.format_exception(exc)[-3:]).strip()
    return f"rank {rank}: {type(exc).__name__}: {exc}\n{tail}"


def _writer(fd: int | None) -> Report:
    def report(event: dict[str, Any]) -> None:
        data = (json.dumps(event, allow_nan=True) + "\n").encode()
        if fd is None:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
            return
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    return report


def _config_document(path: Path) -> dict[str, Any]:
    """A trial config: the JSON of one, or the first line of `sweepstack generate SPEC
    --format jsonl --with-config` (its ``config``)."""
    text = path.read_text()
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        document = json.loads(text.splitlines()[0])
    if isinstance(document, dict) and "config" in document and "params" in document:
        return document["config"]
    return document


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workers.training.parallel.rank",
        description="Run one rank of a data-parallel Sweepstack trial.",
    )
    parser.add_argument(
        "--config",
        required=True,
        type=Path,
        help="the trial config (JSON), or a line of `sweepstack generate --with-config`",
    )
    parser.add_argument("--rank", required=True, type=int, help="this rank, 0 .. world_size-1")
    parser.add_argument(
        "--master", required=True, help="HOST:PORT of the c10d TCP store rank 0 opens"
    )
    parser.add_argument("--report-fd", type=int, default=None, help="write events here, not stdout")
    parser.add_argument("--data-dir", type=Path, default=None, help="base for dataset paths")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--resume", type=Path, default=None,
                        help="a checkpoint (rank 0's, of an earlier attempt) to go on from")
    parser.add_argument("--checkpoint-dir", type=Path, default=None,
                        help="where rank 0 writes its checkpoints and trained model")
    parser.add_argument("--checkpoint-policy", default=None,
                        help="the sweep's artifacts policy, as JSON (when checkpoints are due)")
    parser.add_argument("--join-timeout", type=float, default=None,
                        help="seconds every rank has to join (ranks on several hosts)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    warnings.filterwarnings("ignore", category=UserWarning, module="torch.distributed")
    report = _writer(args.report_fd)
    torch.set_num_threads(max(1, args.threads))
    try:
        config = TrialConfig.model_validate(_config_document(args.config))
        size = config.execution.parallel.world_size
        if not 0 <= args.rank < size:
            raise TrainingError(f"--rank must be in 0..{size - 1}, got {args.rank}")
        checkpoints = None
        if args.checkpoint_dir is not None:
            policy = Artifacts.model_validate_json(args.checkpoint_policy or "{}")
            checkpoints = RankCheckpoints(args.rank, report, args.checkpoint_dir, policy,
                                          args.resume)  # fmt: skip
        run_rank(config, args.rank, args.master, report, args.data_dir, checkpoints,
                 args.join_timeout)  # fmt: skip
    except Exception as exc:  # every failure is reported as an event, then exit 1
        report({"event": "error", "rank": args.rank, "reason": failure_reason(exc, args.rank)})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
