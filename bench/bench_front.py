"""The full grid against multi-objective TPE with Pareto-rank ASHA (#31), on the McLeod space.

Objectives: ``val_accuracy`` (max) against a cost (min): ``param_count``, and
``train_seconds``. Every point of the grid is trained once, epoch by epoch, with the
workers' own training function (`workers.training.train`, one process), and its curve is
kept (a JSON cache beside the system's temp folder, keyed by the spec; ``--fresh``
retrains). The grid's front is that of every point's best epoch. The search is then
replayed on those curves, as a tabular benchmark: the scheduler's `SearchSession`
(Optuna's multi-objective TPE, the platform's ask-and-tell) asks a point, and the
scheduler's Pareto-rank pruner (`scheduler.rank_judge.RankJudge`, the sweep's ``pruning``
section) judges it at each rung against the trials that reached that rung before it; a
pruned trial costs the epochs up to its rung and is told pruned, a complete one is told
both objectives. Trials run one after another (parallelism 1); training is deterministic
given the config and seed, so a replayed trial is the trial the platform would train. A
trial's ``train_seconds`` at an epoch is the sum of its rows' ``epoch_seconds`` so far, as
the worker writes it in each row; its value the sum over all its epochs.

Beside it, the same TPE without pruning, given as many trials as the pruned search's
epochs buy at full length: what Optuna alone finds for the same training (it cannot prune a
multi-objective study, optuna#3450).

Prints, for the grid and each search seed: the hypervolume of the front of complete
trials against two pinned reference points, the epochs trained, and the ratios to the
grid's.

    python -m bench.bench_front [--spec configs/mcleod-digits.yaml] [--trials 300] [--seeds 3]
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
COSTS = ("param_count", "train_seconds")
PRUNING = {"algorithm": "asha", "min_resource": 1, "reduction_factor": 3}


def objectives(cost: str) -> list[dict[str, str]]:
    return [{"metric": "val_accuracy", "direction": "maximize"},
            {"metric": cost, "direction": "minimize"}]  # fmt: skip


def _document(spec_path: Path, cost: str = "param_count") -> dict[str, Any]:
    doc = yaml.safe_load(spec_path.read_text())
    for key in ("objective", "pruning", "search"):
        doc.pop(key, None)
    doc["objectives"] = objectives(cost)
    doc.setdefault("execution", {})["device"] = "cpu"
    return doc


def grid_curves(doc: dict[str, Any], fresh: bool) -> list[dict[str, Any]]:
    """Each grid point's params, param_count and rows (cached by the document, whatever
    its objectives), each row with the seconds trained so far (``train_seconds``)."""
    trained = {k: v for k, v in doc.items() if k != "objectives"}
    key = hashlib.sha256(json.dumps(trained, sort_keys=True).encode()).hexdigest()[:12]
    cache = Path(tempfile.gettempdir()) / f"sweepstack-bench-front-{key}.json"
    if cache.exists() and not fresh:
        return _timed(json.loads(cache.read_text()))
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
    return _timed(out)


def _timed(curves: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for curve in curves:
        total = 0.0
        for row in curve["rows"]:
            total += row["epoch_seconds"]
            row["train_seconds"] = total
        curve["train_seconds"] = total
    return curves


def _values(curve: dict[str, Any], cost: str) -> tuple[float, float]:
    """A complete trial's objectives: its best epoch's accuracy, and its cost."""
    return max(r["val_accuracy"] for r in curve["rows"]), float(curve[cost])


def front_volume(points: list[tuple[float, float]], reference: list[float]) -> float:
    if not points:
        return 0.0
    loss = losses(np.array(points), DIRECTIONS)
    ref = losses(np.array([reference]), DIRECTIONS)[0]
    return hypervolume(loss[nondominated(loss)], ref)


DIRECTIONS = ["maximize", "minimize"]


def search(
    doc: dict[str, Any],
    curves: list[dict[str, Any]],
    trials: int,
    seed: int,
    pruning: dict[str, Any] | None,
) -> tuple[list[tuple[float, float]], int, dict[str, int]]:
    """The replayed TPE search (with the Pareto-rank pruner of `pruning`, or none): its
    complete trials' objectives, the epochs it trained, and how many trials stopped at each
    epoch."""
    by_params = {json.dumps(c["params"], sort_keys=True): c for c in curves}
    search_doc = {"algorithm": "tpe", "trials": trials, "seed": seed}
    spec = load_spec({**doc, "search": search_doc, **({"pruning": pruning} if pruning else {})})
    cost = spec.objectives[1].metric
    session = SearchSession(spec)
    goals = [(o.metric, o.direction) for o in spec.objectives]
    judge = RankJudge(spec.pruning, goals, spec.planned_epochs()) if pruning else None
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
        stop = None
        if judge is not None:
            judge.set_costs(tid, kind_of(point.config).costs_before_training(point.config))
        for epoch, row in enumerate(curve["rows"], start=1):
            epochs += 1
            if judge is not None and judge.decide({tid: (asked[0].number, 0)}, {tid: {epoch: row}}):
                stop = epoch
                break
        if stop is None:
            values = _values(curve, cost)
            session.tell(asked[0].number, list(values), "complete")
            if judge is not None:
                judge.complete(tid)
            complete.append(values)
            stopped["complete"] = stopped.get("complete", 0) + 1
        else:
            session.tell(asked[0].number, None, "pruned")
            stopped[str(stop)] = stopped.get(str(stop), 0) + 1
    return complete, epochs, stopped


def references(grid_points: list[tuple[float, float]]) -> dict[str, list[float]]:
    """Two pinned reference points: the loose one (accuracy 0, 1.1 x the largest cost),
    where the cheapest accurate model holds nearly all the volume, and the grid front's own
    nadir moved out by a tenth of its range, which weighs the whole front."""
    front = [p for p, on in zip(grid_points, _on_front(grid_points), strict=True) if on]
    accs, costs = [a for a, _ in front], [c for _, c in front]
    return {
        "loose": [0.0, 1.1 * max(c for _, c in grid_points)],
        "front nadir": [min(accs) - 0.1 * (max(accs) - min(accs)),
                        max(costs) + 0.1 * (max(costs) - min(costs))],
    }  # fmt: skip


def compare(spec_path: Path, cost: str, args: argparse.Namespace, pruning: dict[str, Any]) -> None:
    doc = _document(spec_path, cost)
    curves = grid_curves(doc, args.fresh)
    grid_points = [_values(c, cost) for c in curves]
    grid_epochs = sum(len(c["rows"]) for c in curves)
    epochs_per_trial = grid_epochs / len(curves)
    runs = [("grid", len(curves), grid_points, grid_epochs, None)]
    for seed in range(args.seeds):
        complete, epochs, stopped = search(doc, curves, args.trials, seed, pruning)
        runs.append((f"tpe+rank-asha seed {seed}", args.trials, complete, epochs, stopped))
        alone = max(1, round(epochs / epochs_per_trial))
        complete, epochs, _ = search(doc, curves, alone, seed, None)
        runs.append((f"tpe alone seed {seed}", alone, complete, epochs, None))
    n_front = sum(_on_front(grid_points))
    print(f"\n== val_accuracy (max) against {cost} (min): {spec_path.name}, {len(curves)} "
          f"points, {n_front} on the grid's front; pruning {pruning}")  # fmt: skip
    for name, reference in references(grid_points).items():
        print(f"reference {name}: {[round(v, 4) for v in reference]}")
        print(f"  {'run':<22}{'trials':>7}{'complete':>9}{'hypervolume':>14}{'epochs':>8}"
              f"{'hv ratio':>10}{'epoch ratio':>13}  stopped at")  # fmt: skip
        grid_volume = front_volume(grid_points, reference)
        met = 0
        for label, trials, points, epochs, stopped in runs:
            hv, ep = front_volume(points, reference) / grid_volume, epochs / grid_epochs
            met += label.startswith("tpe+") and hv >= 0.98 and ep <= 0.25
            print(f"  {label:<22}{trials:>7}{len(points):>9}{hv * grid_volume:>14.4g}"
                  f"{epochs:>8}{hv:>10.3f}{ep:>13.3f}  {stopped or ''}")  # fmt: skip
        print(f"  the bar (>= 0.98 of the grid's hypervolume with <= 0.25 of its epochs): "
              f"met by {met} of {args.seeds} seeds")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=ROOT / "configs" / "mcleod-digits.yaml")
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--cost", choices=COSTS, action="append")
    parser.add_argument("--min-resource", type=int, default=PRUNING["min_resource"])
    parser.add_argument("--reduction-factor", type=int, default=PRUNING["reduction_factor"])
    parser.add_argument("--fresh", action="store_true")
    args = parser.parse_args()
    pruning = {**PRUNING, "min_resource": args.min_resource,
               "reduction_factor": args.reduction_factor}  # fmt: skip
    for cost in args.cost or COSTS:
        compare(args.spec, cost, args, pruning)
        args.fresh = False


def _on_front(points: list[tuple[float, float]]) -> list[bool]:
    return nondominated(losses(np.array(points), DIRECTIONS)).tolist()


if __name__ == "__main__":
    main()
