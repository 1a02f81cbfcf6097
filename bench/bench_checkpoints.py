"""What keeping checkpoints and models costs (#30).

1. **Checkpoint cost, through the real platform**: configs/mcleod-demo.yaml (48 trials of
   20 epochs on digits) submitted to the real RabbitMQ (SWEEPSTACK_TEST_BROKER_URL, default
   127.0.0.1:5672) and a SecantusDB started here, trained by one Celery worker with 2
   processes, once with ``artifacts: {keep: none}`` (no checkpoint, no model kept) and once
   with ``artifacts: {keep: top_k, checkpoint_every: 5}`` (four checkpoints a trial, the 10
   best models kept), the two interleaved ``--repeat`` times. Prints, for each, the wall
   time (submit to the last terminal record) and the training time (the sum of the trials'
   ``train_seconds``, checkpoints included: they are taken inside the epoch loop), and the
   overhead of checkpoints against the run without, from the medians.
2. **Checkpoint cost, trial by trial**: the same 48 trials trained in this process (one
   torch thread), each twice in turn, without checkpoints and with ``checkpoint_every: 5``
   into a SecantusDB started here (the worker's own keeper, `TrialCheckpoints`, its
   background writer included), so the machine's load falls on both alike; prints the
   summed ``train_seconds`` of each and the overhead.
3. **Store size of a 50,000-trial sweep under the default retention**: 50,000 complete
   trials (``--trials``) with random objectives each hand their trained model (a 2 x 64
   MLP on digits) to the worker's own keeper (`workers.checkpointing.TrialCheckpoints`,
   default policy: the 10 best), as the workers would when they finish; prints the models
   kept, the bytes the sweep's artifacts take, and the time per finish.

    python -m bench.bench_checkpoints [--repeat 2] [--workers 2] [--trials 50000]
                                      [--no-platform] [--no-in-process] [--no-store-size]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import torch
import yaml

from core.spec.artifacts import Artifacts
from core.spec.config import TrialConfig
from core.store.store import Store
from tests.integration.stack import ROOT, Stack
from tests.services import SecantusProcess, broker_url_or_fail
from workers.checkpointing import TrialCheckpoints
from workers.training.datasets import load_dataset
from workers.training.models import build_mlp, model_meta

DEMO = ROOT / "configs" / "mcleod-demo.yaml"
POLICIES = {
    "no checkpoints": {"keep": "none"},
    "checkpoint_every: 5": {"keep": "top_k", "checkpoint_every": 5},
}


def run_sweep(stack: Stack, artifacts: dict[str, Any]) -> dict[str, float]:
    document = yaml.safe_load(DEMO.read_text())
    document["name"] = f"ckpt-bench-{uuid.uuid4().hex[:6]}"
    document["artifacts"] = artifacts
    started = time.perf_counter()
    sweep_id, _ = stack.submit(yaml.safe_dump(document))
    counts = stack.wait_finished(sweep_id, timeout=3 * 3600)
    wall = time.perf_counter() - started
    trials = stack.all_trials(sweep_id)
    train = sum(float(t.get("train_seconds") or 0.0) for t in trials)
    kept = len(stack.store.artifacts.models(sweep_id, "maximize"))
    left = stack.store.db["artifacts"].count_documents({"sweep_id": sweep_id, "kind": "checkpoint"})
    return {"wall": wall, "train": train, "complete": counts["complete"], "kept": kept,
            "checkpoints_left": left}  # fmt: skip


def platform(repeat: int, workers: int) -> None:
    print(f"== checkpoint cost: {DEMO.name} through the platform, {workers} processes ==")
    with tempfile.TemporaryDirectory() as tmp:
        server = SecantusProcess(Path(tmp) / "data")
        stack = Stack(broker_url_or_fail(), server.url, f"bench_{uuid.uuid4().hex[:8]}", Path(tmp))
        try:
            stack.start_worker(concurrency=workers)
            runs: dict[str, list[dict[str, float]]] = {name: [] for name in POLICIES}
            for _ in range(repeat):
                for name, artifacts in POLICIES.items():
                    result = run_sweep(stack, artifacts)
                    runs[name].append(result)
                    print(f"  {name:22s} wall {result['wall']:7.1f} s  training "
                          f"{result['train']:7.1f} s  complete {result['complete']:.0f}  "
                          f"models kept {result['kept']:.0f}  checkpoints left "
                          f"{result['checkpoints_left']:.0f}")  # fmt: skip
        finally:
            stack.close()
            server.stop()
    base, with_ckpt = (runs[name] for name in POLICIES)
    for key in ("wall", "train"):
        a = statistics.median(r[key] for r in base)
        b = statistics.median(r[key] for r in with_ckpt)
        print(f"  {key:5s} median: {a:.1f} s without, {b:.1f} s with checkpoints: "
              f"overhead {100 * (b - a) / a:+.1f} %")  # fmt: skip


def in_process() -> None:
    from core.spec.sweep import load_spec
    from scheduler.expand import expand
    from workers.training import train

    print(f"== checkpoint cost: {DEMO.name}, trial by trial in this process, one thread ==")
    torch.set_num_threads(1)
    trials = expand(load_spec(DEMO.read_text()), with_config=True)
    policy = Artifacts(checkpoint_every=5)
    totals = {"without": 0.0, "with": 0.0}
    saved = 0
    with tempfile.TemporaryDirectory() as tmp:
        server = SecantusProcess(Path(tmp) / "data")
        store = Store.connect(server.url, "bench_in_process")
        try:
            sweep_id = uuid.uuid4().hex[:12]
            for i, trial in enumerate(trials):
                config = TrialConfig.model_validate(trial.config)
                totals["without"] += train(config).train_seconds
                doc = {"_id": f"{sweep_id}-{i:03d}", "sweep_id": sweep_id, "attempt": 1}
                keeper = TrialCheckpoints(store.artifacts, _Lifecycle(), doc, policy,  # type: ignore[arg-type]
                                          lambda: None, budget=60.0)  # fmt: skip
                totals["with"] += train(config, checkpoints=keeper).train_seconds
                keeper.wait()
                saved += keeper.saved_any
                store.artifacts.delete(doc["_id"])
        finally:
            store.close()
            server.stop()
    a, b = totals["without"], totals["with"]
    print(f"  {len(trials)} trials ({saved} checkpointed): training {a:.1f} s without, "
          f"{b:.1f} s with checkpoint_every: 5: overhead {100 * (b - a) / a:+.1f} %")


class _Lifecycle:
    """The keeper asks the lifecycle nothing when it only keeps models."""


def store_size(trials: int) -> None:
    print(f"== store size: {trials:,} complete trials, default retention (top 10) ==")
    config = TrialConfig.model_validate(
        {"dataset": {"name": "digits"}, "model": {"hidden_units": 64, "hidden_layers": 2}}
    )
    data = load_dataset(config.dataset, None)
    model = build_mlp(config.model, data.n_features, data.out_features)
    meta = model_meta(config, data, torch.float32)
    objective = {"metric": "val_accuracy", "direction": "maximize"}
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        server = SecantusProcess(Path(tmp) / "data")
        store = Store.connect(server.url, "bench_store_size")
        try:
            store.ensure_indexes()
            policy = Artifacts()
            sweep_id = uuid.uuid4().hex[:12]
            started = time.perf_counter()
            for i in range(trials):
                doc = {"_id": f"{sweep_id}-{i:06d}", "sweep_id": sweep_id, "attempt": 1}
                keeper = TrialCheckpoints(store.artifacts, _Lifecycle(), doc, policy,  # type: ignore[arg-type]
                                          lambda: None, budget=60.0)  # fmt: skip
                keeper.trained(model, meta)
                keeper.keep_model("complete", objective, rng.random())
                if (i + 1) % 10_000 == 0:
                    print(f"  {i + 1:,} trials: {time.perf_counter() - started:.1f} s")
            seconds = time.perf_counter() - started
            kept = store.artifacts.models(sweep_id, "maximize")
            files = store.db["blobs.files"].count_documents({})
            chunks = store.db["blobs.chunks"].count_documents({})
            print(f"  models kept {len(kept)}, artifact bytes {store.artifacts.usage(sweep_id):,}"
                  f" ({files} GridFS files, {chunks} chunks); "
                  f"{1000 * seconds / trials:.2f} ms per finish")  # fmt: skip
        finally:
            store.close()
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--trials", type=int, default=50_000)
    parser.add_argument("--no-platform", action="store_true")
    parser.add_argument("--no-in-process", action="store_true")
    parser.add_argument("--no-store-size", action="store_true")
    args = parser.parse_args()
    if not args.no_in_process:
        in_process()
    if not args.no_store_size:
        store_size(args.trials)
    if not args.no_platform:
        platform(args.repeat, args.workers)


if __name__ == "__main__":
    main()
