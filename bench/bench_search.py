"""Search and early stopping on one spec: the full grid vs grid + ASHA vs TPE + ASHA.

Each variant is the real ``sweepstack run SPEC --workers N --json`` as a subprocess, with
the embedded defaults in a fresh data folder and no dashboard, the spec changed only in its
``search`` and ``pruning`` sections:

- ``grid``: every trial, every epoch (the spec as written, ``search.algorithm: grid``);
- ``grid + asha``: the same trials, Optuna's successive-halving pruner on the objective;
- ``tpe + asha``: Optuna's TPE sampler with a budget of ``--tpe-trials`` trials (default: a
  third of the grid), with the same pruner.

From each sweep's records (the store is reopened on its data folder) it counts the epochs
trained (every epoch row of every attempt: what the workers computed), the trials by state,
and the best objective; it prints one row per variant with the share of the grid's epochs
and the gap to the grid's best in percentage points, and for each pruned variant the share
of the grid's wall time it saved against the share of epochs (1.00 x: every epoch saved
saved as much time as the grid's average epoch). Wall times include the command's
start and stop. A busy machine makes wall times noisy; epochs and accuracies are not.

    python -m bench.bench_search configs/mcleod-digits.yaml [--workers 2] [--tpe-trials 120]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench.bench_peers import clean_env

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("grid", "grid+asha", "tpe+asha")


@dataclass
class Outcome:
    """What one variant of the sweep did."""

    variant: str
    wall: float
    epochs: int
    counts: dict[str, int]
    best: float | None


def variant_spec(raw: dict[str, Any], variant: str, tpe_trials: int, pruner: dict) -> dict:
    """The spec of one variant: `raw` with its search and pruning sections replaced."""
    out = dict(raw)
    out["name"] = f"{raw.get('name', 'sweep')}-{variant.replace('+', '-')}"
    seed = (raw.get("search") or {}).get("seed", 0)
    if variant.startswith("tpe"):
        out["search"] = {"algorithm": "tpe", "trials": tpe_trials, "seed": seed}
    else:
        out["search"] = {"algorithm": "grid"}
    if variant.endswith("+asha"):
        out["pruning"] = dict(pruner)
    else:
        out.pop("pruning", None)
    return out


def _stored(data: Path, sweep_id: str) -> int:
    """Epoch rows of every attempt of the sweep's trials, read from its data folder."""
    import pymongo

    from tests.services import SecantusProcess

    server = SecantusProcess(data / "db")
    try:
        client = pymongo.MongoClient(server.url, serverSelectionTimeoutMS=10000)
        epochs = client["sweepstack"]["metrics"].count_documents({"sweep_id": sweep_id})
        client.close()
    finally:
        server.stop()
    return int(epochs)


def run_variant(raw: dict, variant: str, workers: int, tmp: Path, **options: Any) -> Outcome:
    """`sweepstack run` on one variant of the spec, in a fresh data folder."""
    spec = tmp / f"spec-{variant}.yaml"
    spec.write_text(yaml.safe_dump(variant_spec(raw, variant, **options), sort_keys=False))
    data = tmp / f"data-{variant}"
    env = clean_env()
    env["HOME"] = str(tmp / "home")
    cmd = [sys.executable, "-m", "cli.main", "run", str(spec), "--workers", str(workers)]
    cmd += ["--json", "--data", str(data), "--no-dashboard"]
    started = time.time()
    out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.time() - started
    if out.returncode != 0:
        raise RuntimeError(f"sweepstack run ({variant}) failed:\n{out.stderr[-3000:]}")
    summary = json.loads(out.stdout)
    best = (summary.get("best") or {}).get("objective")
    return Outcome(variant, wall, _stored(data, summary["sweep_id"]), summary["counts"], best)


def print_table(outcomes: list[Outcome], spec: Path, workers: int) -> None:
    print(f"spec {spec}, {workers} workers; wall times are noisy if the machine is shared")
    head = f"{'variant':<10} {'trials':>6} {'pruned':>6} {'epochs':>7} {'% of grid':>9}"
    print(f"{head} {'wall s':>7} {'best':>7} {'vs grid (pp)':>12}")
    grid = next((o for o in outcomes if o.variant == "grid"), None)
    for o in outcomes:
        trials = sum(o.counts.values())
        share = f"{100 * o.epochs / grid.epochs:.1f}" if grid and grid.epochs else "-"
        gap = "-"
        if grid and grid.best is not None and o.best is not None:
            gap = f"{100 * (o.best - grid.best):+.2f}"
        best = "-" if o.best is None else f"{o.best:.4f}"
        print(
            f"{o.variant:<10} {trials:>6} {o.counts.get('pruned', 0):>6} {o.epochs:>7} "
            f"{share:>9} {o.wall:>7.1f} {best:>7} {gap:>12}"
        )
    for o in outcomes:
        if grid is None or o is grid or not grid.epochs or o.epochs >= grid.epochs:
            continue
        epochs_saved = 1 - o.epochs / grid.epochs
        wall_saved = 1 - o.wall / grid.wall
        print(
            f"{o.variant}: {100 * wall_saved:.1f} % of the grid's wall time saved, "
            f"{100 * epochs_saved:.1f} % of its epochs: {wall_saved / epochs_saved:.2f} x"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", type=Path)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tpe-trials", type=int, default=None, help="[default: grid / 3]")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=", ".join(VARIANTS))
    parser.add_argument(
        "--pruner",
        default='{"algorithm": "asha", "min_resource": 2, "reduction_factor": 3}',
        help="the pruning section of the pruned variants, as JSON",
    )
    args = parser.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"--variants: unknown {unknown}; choose from {', '.join(VARIANTS)}")
    raw = yaml.safe_load(args.spec.read_text())
    tpe_trials = args.tpe_trials
    if tpe_trials is None:
        from cli.shared import load_spec
        from scheduler.expand import tally

        tpe_trials = max(1, tally(load_spec(str(args.spec))).count // 3)
    pruner = json.loads(args.pruner)
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="bench-search-") as tmp:
        for variant in variants:
            options = {"tpe_trials": tpe_trials, "pruner": pruner}
            outcomes.append(run_variant(raw, variant, args.workers, Path(tmp), **options))
            print(f"  done: {variant} in {outcomes[-1].wall:.1f} s", flush=True)
    print_table(outcomes, args.spec, args.workers)


if __name__ == "__main__":
    main()
