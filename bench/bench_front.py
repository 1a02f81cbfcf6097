"""The full grid against multi-objective TPE with Pareto-rank ASHA (#31), on the McLeod space.

Objectives: ``val_accuracy`` (max) and ``param_count`` (min). Every point of the grid is
trained once, epoch by epoch, with the workers' own training function
(`workers.training.train`, one process), and its curve is kept (a JSON cache beside the
system's temp folder, keyed by the spec; ``--fresh`` retrains). The grid's front is
that of every point's best epoch. The search is then replayed on those curves, as a
tabular benchmark: the scheduler's `SearchSession` (Optuna's multi-objective TPE, the
platform's ask-and-tell) asks a point, and the scheduler's Pareto-rank pruner
(`scheduler.rank_judge.RankJudge`, the sweep's ``pruning`` section) judges it at each rung
against the trials that reached that rung before it; a pruned trial costs the epochs up to
its rung and is told pruned, a complete one is told both objectives. Trials run one after
another (parallelism 1); training is deterministic given the config and seed, so a
replayed trial is the trial the platform would train.

Prints, for the grid and for each search seed: the hypervolume of the front of complete
trials against one pinned reference point (accuracy 0, and 1.1 x the grid's largest
parameter count), the epochs trained, and the search's ratios to the grid's.

    python -m bench.bench_front [--spec configs/mcleod-demo.yaml] [--trials 24] [--seeds 3]

``train_seconds`` as the second objective is not run: a Pareto-rank pruner refuses it
(epoch rows carry no cumulative time; docs/spec.md).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from core.analysis.pareto import hypervolume, losses, nondominated
from core.spec.config import TrialConfig
from core.spec.kinds import kind_of
from core.spec.sweep import load_spec
from scheduler.expand import expand
from scheduler.rank_judge import RankJudge
from scheduler.search_session import SearchSession

ROOT = Path(__file__).resolve().parents[1]
OBJECTIVES = [
    {"metric": "val_accuracy", "direction": "maximize"},
    {"metric": "param_count", "direction": "minimize"},
]
PRUNING = {"algorithm": "asha", "min_resource": 2, "reduction_factor": 3}


def _document(spec_path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(spec_path.read_text())
    for key in ("objective", "pruning", "search"):
        doc.pop(key, None)
    doc["objectives"] = OBJECTIVES
    doc.setdefault("execution", {})["device"] = "cpu"
    return doc


def grid_curves(doc: dict[str, Any], fresh: bool) -> list[dict[str, Any]]:
    """Each grid point's params, param_count and rows (cached by the document)."""
    key = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:12]
    cache = Path(tempfile.gettempdir()) / f"sweepstack-bench-front-{key}.json"
    if cache.exists() and not fresh:
        return json.loads(cache.read_text())
    import torch

    from workers.training import train

    torch.set_num_threads(2)
    spec = load_spec({**doc, "search": {"algorithm": "grid"}})
    out = []
    started = time.perf_counter()
    for point in expand(spec, with_config=True):
        rows: list[dict[str, float]] = []
        keep = rows.append
        result = train(TrialConfig.model_validate(point.config),
                       on_epoch=lambda _e, row, keep=keep: keep(dict(row)))  # fmt: skip
        out.append({"params": point.params, "param_count": result.param_count, "rows": rows})
    print(f"trained the grid's {len(out)} points in {time.perf_counter() - started:.0f} s")
    cache.write_text(json.dumps(out))
    return out


def _best(rows: list[dict[str, float]]) -> float:
    return max(r["val_accuracy"] for r in rows)


def front_volume(points: list[tuple[float, float]], reference: list[float]) -> float:
    directions = [o["direction"] for o in OBJECTIVES]
    if not points:
        return 0.0
    loss = losses(np.array(points), directions)
    ref = losses(np.array([reference]), directions)[0]
    return hypervolume(loss[nondominated(loss)], ref)


def search(
    doc: dict[str, Any], curves: list[dict[str, Any]], trials: int, seed: int
) -> tuple[list[tuple[float, float]], int, dict[str, int]]:
    """The replayed TPE + Pareto-rank ASHA search: its complete trials' objectives, the
    epochs it trained, and how many trials stopped at each epoch."""
    by_params = {json.dumps(c["params"], sort_keys=True): c for c in curves}
    spec = load_spec(
        {
            **doc,
            "search": {"algorithm": "tpe", "trials": trials, "seed": seed},
            "pruning": PRUNING,
        }
    )
    session = SearchSession(spec)
    goals = [(o.metric, o.direction) for o in spec.objectives]
    judge = RankJudge(spec.pruning, goals, spec.planned_epochs())
    complete: list[tuple[float, float]] = []
    epochs = 0
    stopped: dict[str, int] = {}
    for _ in range(trials):
        asked = session.ask(1)
        if not asked:
            break
        point = session.point(asked[0], 0, with_config=True)
        curve = by_params[json.dumps(point.params, sort_keys=True)]
        tid = str(asked[0].number)
        judge.set_costs(tid, kind_of(point.config).costs_before_training(point.config))
        stop = None
        for epoch, row in enumerate(curve["rows"], start=1):
            epochs += 1
            if judge.decide({tid: (asked[0].number, 0)}, {tid: {epoch: row}}):
                stop = epoch
                break
        if stop is None:
            values = (_best(curve["rows"]), float(curve["param_count"]))
            session.tell(asked[0].number, list(values), "complete")
            judge.complete(tid)
            complete.append(values)
            stopped["complete"] = stopped.get("complete", 0) + 1
        else:
            session.tell(asked[0].number, None, "pruned")
            stopped[str(stop)] = stopped.get(str(stop), 0) + 1
    return complete, epochs, stopped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=ROOT / "configs" / "mcleod-demo.yaml")
    parser.add_argument("--trials", type=int, default=24)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--fresh", action="store_true")
    args = parser.parse_args()
    doc = _document(args.spec)
    curves = grid_curves(doc, args.fresh)
    grid_points = [(_best(c["rows"]), float(c["param_count"])) for c in curves]
    grid_epochs = sum(len(c["rows"]) for c in curves)
    # Two pinned references: the loose one (accuracy 0, 1.1 x the largest model), where the
    # smallest accurate model holds nearly all the volume, and the grid front's own nadir
    # moved out by a tenth of its range, which weighs the whole front.
    front = [p for p, on in zip(grid_points, _on_front(grid_points), strict=True) if on]
    accs, sizes = [a for a, _ in front], [s for _, s in front]
    references = {
        "loose": [0.0, 1.1 * max(p for _, p in grid_points)],
        "front nadir": [min(accs) - 0.1 * (max(accs) - min(accs)),
                        max(sizes) + 0.1 * (max(sizes) - min(sizes))],
    }  # fmt: skip
    runs = [("grid", len(curves), grid_points, grid_epochs, None)]
    for seed in range(args.seeds):
        complete, epochs, stopped = search(doc, curves, args.trials, seed)
        runs.append((f"tpe+rank-asha seed {seed}", args.trials, complete, epochs, stopped))
    print(f"space: {args.spec.name} ({len(curves)} points, {len(front)} on the grid's front), "
          f"objectives val_accuracy (max), param_count (min); pruning {PRUNING}")  # fmt: skip
    for name, reference in references.items():
        print(f"\nreference {name}: {[round(v, 4) for v in reference]}")
        print(f"{'run':<22}{'trials':>7}{'complete':>9}{'hypervolume':>14}{'epochs':>8}"
              f"{'hv ratio':>10}{'epoch ratio':>13}  stopped at")  # fmt: skip
        grid_volume = front_volume(grid_points, reference)
        met = 0
        for label, trials, points, epochs, stopped in runs:
            volume = front_volume(points, reference)
            hv, ep = volume / grid_volume, epochs / grid_epochs
            met += label != "grid" and hv >= 0.98 and ep <= 0.25
            print(f"{label:<22}{trials:>7}{len(points):>9}{volume:>14.2f}{epochs:>8}"
                  f"{hv:>10.3f}{ep:>13.3f}  {stopped or ''}")  # fmt: skip
        print(f"the bar (>= 0.98 of the hypervolume with <= 0.25 of the epochs): met by {met} "
              f"of {args.seeds} seeds")  # fmt: skip


def _on_front(points: list[tuple[float, float]]) -> list[bool]:
    loss = losses(np.array(points), [o["direction"] for o in OBJECTIVES])
    return nondominated(loss).tolist()


if __name__ == "__main__":
    main()
