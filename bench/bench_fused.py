"""Fused trials vs one trial at a time, side by side in one run.

1. **Whole sweep, through the real platform**: the McLeod digits sweep submitted to the
   real RabbitMQ (SWEEPSTACK_TEST_BROKER_URL, default 127.0.0.1:5672) and a SecantusDB
   started here, trained by one Celery worker with 2 processes (one torch thread each),
   once with ``execution.fuse: auto`` and once with ``fuse: off``. Prints wall time
   (submit to the last terminal record), messages, the best val_accuracy of each and how
   far apart the two runs' per-trial objectives are. ``--sweep full`` runs
   configs/mcleod-digits.yaml as it is (360 trials up to 5 x 1024 units, 20 epochs);
   ``--sweep trimmed`` (the default) keeps everything but widths 512-1024, whose
   multiply-adds dominate a CPU and which fusing cannot make cheaper (225 trials);
   ``--sweep small`` keeps widths 16-64 only, where per-step overhead dominates
   (135 trials); ``--sweep all`` runs the three. The spec that ran is printed.
2. **Training alone**: model-samples per second (models x training rows x epochs / s) of
   K = 1, 8, 32 and 128 fused 64-128-10 MLPs (digits, SGD with momentum, batches of 64)
   against training the same models one after another, in this process, one thread.
3. **GPU**: the same as 2 on CUDA when there is one.
4. **Calibration** (``--calibrate``, alone): the seconds of one training step of one model
   and of fused groups of K, for depths and widths of the McLeod sweep on digits (batches
   of 64, SGD with momentum, one thread), single and fused interleaved and the fastest of
   many windows kept (a shared machine's load inflates the others), then the constants
   of the cost model (`scheduler.cost`) fitted to them by least squares, beside the values
   in the code and the model's error on each shape.

    python -m bench.bench_fused [--sweep small|trimmed|full|all] [--workers 2] [--repeat 1]
                                [--no-platform] [--calibrate]
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import torch
import yaml

from core.spec.config import TrialConfig
from scheduler.expand import canonical
from tests.integration.stack import ROOT, Stack
from tests.services import SecantusProcess, broker_url_or_fail

MCLEOD = ROOT / "configs" / "mcleod-digits.yaml"
VARIANT_WIDTHS = {"small": [16, 32, 64], "trimmed": [16, 32, 64, 128, 256]}
TRAINING_KS = (1, 8, 32, 128)


def mcleod(variant: str) -> dict[str, Any]:
    """The McLeod digits spec, as it is (`full`) or with fewer widths (module docstring)."""
    document = yaml.safe_load(MCLEOD.read_text())
    if variant in VARIANT_WIDTHS:
        document["model"]["hidden_units"] = VARIANT_WIDTHS[variant]
    return document


def _all_trials(stack: Stack, sweep_id: str) -> list[dict[str, Any]]:
    out, cursor = [], None
    while True:
        page, cursor = stack.store.reads.trials(sweep_id, limit=500, cursor=cursor)
        out += page
        if not cursor:
            return out


def run_sweep(stack: Stack, document: dict[str, Any], fuse: str) -> dict[str, Any]:
    """Submit the sweep with `execution.fuse` = `fuse`; wait for it; what it took and found."""
    spec = copy.deepcopy(document)
    spec["name"] = f"{document['name']}-{fuse}-{uuid.uuid4().hex[:6]}"
    spec["execution"] = {**spec.get("execution", {}), "fuse": fuse, "device": "cpu"}
    started = time.perf_counter()
    sweep_id, count = stack.submit(yaml.safe_dump(spec))
    messages = stack.queue_depth()
    counts = stack.wait_finished(sweep_id, timeout=6 * 3600)
    seconds = time.perf_counter() - started
    trials = _all_trials(stack, sweep_id)
    objectives = {
        canonical(t["params"]): t["objective"] for t in trials if t.get("objective") is not None
    }
    best = max(trials, key=lambda t: t.get("objective") or -1.0)
    return {
        "seconds": seconds,
        "trials": count,
        "messages": messages,
        "counts": {k: v for k, v in counts.items() if v},
        "best": best.get("objective"),
        "best_params": best["params"],
        "objectives": objectives,
    }


def platform(variant: str, workers: int, repeat: int) -> None:
    document = mcleod(variant)
    print(f"\n== 1. whole sweep through the platform: McLeod digits, {variant} ==")
    print("spec that ran (execution.fuse set per run, execution.device: cpu):")
    for line in yaml.safe_dump(
        {k: document[k] for k in ("dataset", "model", "training")}, sort_keys=False
    ).splitlines():
        print(f"    {line}")
    with tempfile.TemporaryDirectory() as tmp:
        server = SecantusProcess(Path(tmp) / "data")
        stack = Stack(broker_url_or_fail(), server.url, f"bench_{uuid.uuid4().hex[:8]}", Path(tmp))
        try:
            stack.start_worker(concurrency=workers)
            runs: dict[str, list[dict[str, Any]]] = {"auto": [], "off": []}
            for _ in range(repeat):  # alternating, so that a shared machine's load hits both
                for fuse in ("off", "auto"):
                    runs[fuse].append(run_sweep(stack, document, fuse))
            results = {fuse: min(done, key=lambda r: r["seconds"]) for fuse, done in runs.items()}
            every = {fuse: [round(r["seconds"], 1) for r in done] for fuse, done in runs.items()}
        finally:
            stack.close()
            server.stop()
    fused, alone = results["auto"], results["off"]
    print(f"load average after the runs (this machine has {os.cpu_count()} CPUs): "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}")  # fmt: skip
    print(f"{'':24}{'fuse: auto':>16}{'fuse: off':>16}")
    print(f"{'trials':24}{fused['trials']:>16}{alone['trials']:>16}")
    print(f"{'messages':24}{fused['messages']:>16}{alone['messages']:>16}")
    print(f"{'wall time (s)':24}{fused['seconds']:>16.1f}{alone['seconds']:>16.1f}")
    print(f"{'best val_accuracy':24}{fused['best']:>16.4f}{alone['best']:>16.4f}")
    print(f"{'states':24}{fused['counts']!s:>16}  {alone['counts']!s}")
    print(f"speedup: {alone['seconds'] / fused['seconds']:.2f}x with {workers} worker processes")
    if repeat > 1:
        print(f"wall times of every run (the table shows the fastest): {every}")
    print(f"best (fused): {fused['best_params']}")
    print(f"best (off):   {alone['best_params']}")
    shared = set(fused["objectives"]) & set(alone["objectives"])
    gaps = sorted(abs(fused["objectives"][k] - alone["objectives"][k]) for k in shared)
    if gaps:
        same = sum(g == 0 for g in gaps)
        print(
            f"per-trial best val_accuracy, fused vs off: {same} of {len(gaps)} identical, "
            f"largest gap {gaps[-1]:.4f} (float32 rounding, bmm against mm, grown by "
            "unstable trials; in float64 fused and unfused agree to ~1e-15)"
        )


def _config(seed: int, device: str) -> TrialConfig:
    return TrialConfig.from_dict(
        {
            "dataset": {"name": "digits", "validation_fraction": 0.25},
            "model": {"hidden_layers": 1, "hidden_units": 128},
            "training": {
                "optimizer": "momentum",
                "lr": 0.05,
                "batch_size": 64,
                "epochs": 5,
                "seed": seed,
            },
            "execution": {"device": device},
        }
    )


def training_alone(device: str) -> None:
    from workers.training import train
    from workers.training.datasets import load_dataset
    from workers.training.fused import train_fused

    threads = torch.get_num_threads()
    if device == "cpu":
        torch.set_num_threads(1)
    print(f"\n== {'2' if device == 'cpu' else '3'}. training alone on {device}: "
          f"64-128-10 MLPs on digits, 5 epochs, batches of 64 ==")  # fmt: skip
    rows = load_dataset(_config(0, device).dataset).n_train
    samples = rows * 5
    train(_config(0, device))  # load the data set and warm up both paths
    train_fused([_config(0, device)])
    sequential_models = 16

    def sequential_run() -> float:
        started = time.perf_counter()
        for seed in range(sequential_models):
            train(_config(seed, device))
        return time.perf_counter() - started

    sequential = sequential_models * samples / min(sequential_run() for _ in range(2))
    print(f"{'K':>5}{'fused model-samples/s':>24}{'sequential':>14}{'speedup':>10}")
    for k in TRAINING_KS:
        configs = [_config(seed, device) for seed in range(k)]
        best = math.inf
        for _ in range(2):
            started = time.perf_counter()
            train_fused(configs)
            best = min(best, time.perf_counter() - started)
        fused = k * samples / best
        print(f"{k:>5}{fused:>24,.0f}{sequential:>14,.0f}{fused / sequential:>9.1f}x")
    print(
        f"(sequential: {sequential_models} models one after another; best of 2 runs each; "
        "setup included in both)"
    )
    torch.set_num_threads(threads)


CALIBRATION_SHAPES = (
    (1, 16, (2, 8, 32)),
    (2, 64, (2, 8, 32)),
    (4, 64, (2, 8, 32)),
    (2, 128, (3, 9)),
    (1, 256, (3, 9)),
    (3, 256, (3,)),
    (1, 512, (3,)),
    (2, 1024, (2,)),
)


def _step_timer(depth: int, width: int, k: int) -> Any:
    """A function that runs `steps` training steps of k models (k = 0: one model alone)."""
    import torch.nn.functional as F

    from workers.training.datasets import load_dataset
    from workers.training.fused_model import FusedMLP
    from workers.training.fused_optim import FusedOptimizer
    from workers.training.models import build_mlp
    from workers.training.optim import build_optimizer

    config = _config(0, "cpu")
    model = config.model.model_copy(update={"hidden_layers": depth, "hidden_units": width})
    data = load_dataset(config.dataset)  # real digits: random data may diverge to denormals
    x = torch.tensor(data.x_train, dtype=torch.float32)
    y = torch.tensor(data.y_train, dtype=torch.int64)
    if k == 0:
        net = build_mlp(model, 64, 10, device=torch.device("cpu"), dtype=torch.float32)
        optimizer = build_optimizer(net.parameters(), config.training)

        def one(steps: int) -> None:
            for _step in range(steps):
                index = torch.randint(0, len(y), (64,))
                loss = F.cross_entropy(net(x[index]), y[index])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()

        return one
    nets = [build_mlp(model, 64, 10, device=torch.device("cpu"), dtype=torch.float32)] * k
    fused = FusedMLP(nets, [model] * k, [None] * k)
    fused_optimizer = FusedOptimizer("momentum", [config.training] * k)
    lrs = [0.05] * k

    def many(steps: int) -> None:
        for _step in range(steps):
            index = torch.randint(0, len(y), (k, 64))
            out = fused(x[index], train=True)
            loss = F.cross_entropy(out.flatten(0, 1), y[index].flatten(), reduction="none")
            fused.zero_grad()
            (loss.view(k, 64).mean(1)).sum().backward()
            fused_optimizer.step(fused.parameters(), lrs)

    return many


def calibrate(windows: int = 12, steps: int = 10) -> None:
    """Time steps of single and fused models and fit the cost model (module docstring, 4)."""
    from scheduler import cost

    torch.set_num_threads(1)
    print("\n== 4. calibration of the cost model, scheduler.cost (one thread, batch 64) ==")
    spec = {"dataset": {"name": "digits", "validation_fraction": 0.25}}
    rows: list[tuple[int, int, int, float, float]] = []  # depth, width, k, flops, seconds
    for depth, width, ks in CALIBRATION_SHAPES:
        config = {**spec, "model": {"hidden_layers": depth, "hidden_units": width}}
        flops = cost.step_flops(config, [width] * depth)
        timers = {k: _step_timer(depth, width, k) for k in (0, *ks)}
        best = dict.fromkeys(timers, math.inf)
        for run in timers.values():
            run(2)  # warm up
        for _ in range(windows):  # interleaved, so that load hits every timer alike
            for k, run in timers.items():
                started = time.perf_counter()
                run(steps)
                best[k] = min(best[k], (time.perf_counter() - started) / steps)
        for k, seconds in best.items():
            rows.append((depth, width, k, flops, seconds))
        print(f"  {depth} x {width:<5} ({flops / 1e6:7.1f} Mflop/step): "
              + ", ".join(f"{'alone' if k == 0 else f'K={k}'} {s * 1e3:.2f} ms"
                          for k, s in best.items()), flush=True)  # fmt: skip

    import numpy as np

    def fit(columns: list[list[float]], seconds: list[float]) -> list[float]:
        """Non-negative least squares, column by column dropped when negative."""
        matrix, target = np.array(columns, dtype=float).T, np.array(seconds)
        keep = list(range(matrix.shape[1]))
        while True:
            solution, *_ = np.linalg.lstsq(matrix[:, keep], target, rcond=None)
            if (solution >= 0).all() or len(keep) == 1:
                out = [0.0] * matrix.shape[1]
                for i, value in zip(keep, solution, strict=True):
                    out[i] = max(float(value), 0.0)
                return out
            keep.pop(int(np.argmin(solution)))

    singles = [r for r in rows if r[2] == 0]
    groups = [r for r in rows if r[2] > 0]
    layer, per_flop = fit(
        [[d + 1 for d, *_ in singles], [f for *_, f, _ in singles]], [s for *_, s in singles]
    )
    fused_layer, member_layer, fused_flop = fit(
        [
            [d + 1 for d, *_ in groups],
            [(d + 1) * k for d, _, k, _, _ in groups],
            [k * f for _, _, k, f, _ in groups],
        ],
        [s for *_, s in groups],
    )
    print(f"{'constant':28}{'fitted':>12}{'in the code':>14}")
    for name, value in (
        ("LAYER_STEP_SECONDS", layer),
        ("FLOPS_PER_SECOND", 1 / max(per_flop, 1e-15)),
        ("FUSED_LAYER_STEP_SECONDS", fused_layer),
        ("MEMBER_LAYER_STEP_SECONDS", member_layer),
        ("FUSED_FLOPS_PER_SECOND", 1 / max(fused_flop, 1e-15)),
    ):
        print(f"{name:28}{value:>12.3g}{getattr(cost, name):>14.3g}")
    print("the code's model against each measurement (gain: K models alone / fused):")
    single = math.nan
    for depth, width, k, flops, seconds in rows:
        alone = cost.step_seconds(depth, flops, 1)
        if k == 0:
            single = seconds
            print(f"  {depth} x {width:<5} alone  {seconds * 1e3:7.2f} ms, "
                  f"model {alone * 1e3:7.2f}")  # fmt: skip
            continue
        model = cost.step_seconds(depth, flops, k)
        gain, modelled = k * single / seconds, k * alone / model
        print(f"  {depth} x {width:<5} K={k:<4} {seconds * 1e3:7.2f} ms, "
              f"model {model * 1e3:7.2f}; gain {gain:5.2f}x, model {modelled:5.2f}x")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", choices=("small", "trimmed", "full", "all"), default="trimmed")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each mode, alternating")
    parser.add_argument("--no-platform", action="store_true", help="only training alone")
    parser.add_argument("--calibrate", action="store_true", help="only the cost model's fit")
    args = parser.parse_args()
    if args.calibrate:
        calibrate()
        return
    if not args.no_platform:
        for variant in ("small", "trimmed", "full") if args.sweep == "all" else (args.sweep,):
            platform(variant, args.workers, args.repeat)
    training_alone("cpu")
    if torch.cuda.is_available():
        training_alone("cuda")
    else:
        print("\n== 3. GPU: no CUDA device on this machine ==")


if __name__ == "__main__":
    main()
