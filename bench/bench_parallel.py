"""Data-parallel training of one trial: a SparkNet-style table on this machine.

For world_size 1 (one process) and 2 (two gloo ranks on the CPU), each strategy and
tau in {1, 5, 20, 50}: time per epoch (mean of the epochs after the first, rank 0's wall
clock; the ranks' start-up is not in it), speedup over world_size 1, the share of the ranks'
training time spent communicating, the bytes moved per epoch, and the final validation
accuracy (and loss) on digits. `allreduce` does not use tau: it has one row.

python -m bench.bench_parallel [--epochs 10] [--units 1024] [--batch-size 256] [--threads 1]

The default network (2x1024, global batch 256) is compute-bound enough for two ranks to
gain on two cores; `--units 256 --batch-size 64` shows the communication-bound case,
where every strategy that meets often is slower than one process.

On a GPU machine, `--device cuda` runs the ranks with NCCL, one GPU each.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

from core.spec.config import TrialConfig
from workers.training import TrainResult, train

TAUS = (1, 5, 20, 50)
STRATEGIES: tuple[tuple[str, dict[str, Any], tuple[int | None, ...]], ...] = (
    ("allreduce", {"strategy": "allreduce"}, (None,)),
    ("local_sgd", {"strategy": "local_sgd"}, TAUS),
    ("easgd", {"strategy": "easgd"}, TAUS),
    ("easgd async", {"strategy": "easgd", "asynchronous": True}, TAUS),
)


def _config(args: argparse.Namespace, parallel: dict[str, Any]) -> TrialConfig:
    return TrialConfig.model_validate(
        {
            "dataset": {"name": "digits"},
            "model": {"hidden_layers": args.layers, "hidden_units": args.units},
            "training": {
                "optimizer": "sgd",
                "lr": args.lr,
                "batch_size": args.batch_size,
                "epochs": args.epochs,
                "seed": 0,
            },
            "execution": {"device": args.device, "dtype": "float32", "parallel": parallel},
        }
    )


def _epoch_seconds(result: TrainResult) -> float:
    rows = result.metrics[1:] or result.metrics
    return statistics.mean(row["epoch_seconds"] for row in rows)


def _comm_share(result: TrainResult) -> float | None:
    rows = [row for row in result.metrics if "comm_seconds" in row]
    if not rows:
        return None
    comm = sum(row["comm_seconds"] for row in rows)
    compute = sum(row["compute_seconds"] for row in rows)
    return comm / (comm + compute) if comm + compute > 0 else 0.0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--units", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda for NCCL on GPUs")
    parser.add_argument("--world-size", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    size = args.world_size
    print(
        f"digits, MLP {args.layers}x{args.units}, sgd lr {args.lr}, global batch "
        f"{args.batch_size}, {args.epochs} epochs, {args.device}, {args.threads} thread(s) "
        f"per process, world_size 1 vs {size}"
    )
    started = time.perf_counter()
    single = train(_config(args, {}))
    base = _epoch_seconds(single)
    header = (
        f"{'strategy':<12} {'ws':>2} {'tau':>4} {'s/epoch':>8} {'speedup':>7} "
        f"{'comm %':>6} {'MB/epoch':>8} {'val acc':>7} {'val loss':>8}"
    )
    print(header)
    print("-" * len(header))
    print(
        f"{'one process':<12} {1:>2} {'-':>4} {base:8.4f} {1.0:7.2f} {'-':>6} {'-':>8} "
        f"{single.final['val_accuracy']:7.4f} {single.final['val_loss']:8.4f}"
    )
    for label, parallel, taus in STRATEGIES:
        for tau in taus:
            options = {**parallel, "world_size": size}
            if tau is not None:
                options["tau"] = tau
            result = train(_config(args, options))
            seconds = _epoch_seconds(result)
            share = _comm_share(result)
            megabytes = statistics.mean(row["comm_bytes"] for row in result.metrics) / 1e6
            print(
                f"{label:<12} {size:>2} {tau if tau is not None else '-':>4} {seconds:8.4f} "
                f"{base / seconds:7.2f} {100 * (share or 0):6.1f} {megabytes:8.2f} "
                f"{result.final['val_accuracy']:7.4f} {result.final['val_loss']:8.4f}",
                flush=True,
            )
    print(f"({time.perf_counter() - started:.0f} s in all)")


if __name__ == "__main__":
    main()
