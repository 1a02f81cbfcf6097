"""Test data for the dashboard: sweeps whose trials already finished, with plausible results.

Training 360 networks (or 50,000) to look at a page is not the point of a dashboard test,
and finishing trials one by one through the lifecycle costs ~5 ms each, so `seed_sweep`
writes finished trial documents directly through the store's own database handle, in the
exact shapes of `core.store.records` (the same functions `SweepAdmin.create_sweep` uses),
with the sweep's counts matching. Results follow the seed paper's shape: accuracy rises with width
and plateaus past a few hundred units, sigmoid nets degrade with depth, seeds add a little
noise, and training time grows about linearly with depth. Use it for tests and benchmarks
only: the lifecycle is the one writer of real trials.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from core.spec.sweep import SweepSpec, load_spec_file
from core.states import TrialState
from core.store.records import sweep_document, trial_document, utcnow
from core.store.store import INSERT_BATCH, Store
from scheduler.expand import TrialPoint, expand

MCLEOD_SPEC = "configs/mcleod-digits.yaml"
WORKERS = ("celery@gpu-node-1", "celery@gpu-node-2", "celery@cpu-node-1")
REASONS = (
    "training diverged: the loss is NaN at epoch {epoch} (model.activation={activation}, "
    "training.lr={lr})",
    "out of memory: CUDA out of memory. Tried to allocate {mb} MiB",
    "time limit exceeded: execution.time_limit is 1800 s",
)


@dataclass
class Seeded:
    """A seeded sweep: its id, its points, and the state of each trial by index."""

    sweep_id: str
    points: list[TrialPoint]
    states: dict[int, str] = field(default_factory=dict)
    objectives: dict[int, float] = field(default_factory=dict)

    def ids(self, state: str) -> list[str]:
        """The store ids of the trials in `state`, by index."""
        return [f"{self.sweep_id}-{p.id}" for p in self.points if self.states[p.index] == state]

    def count(self, state: str) -> int:
        return sum(1 for s in self.states.values() if s == state)


def outcome(config: dict[str, Any], seed: int) -> tuple[float, float]:
    """A plausible (validation accuracy, training seconds) for a config, fixed by its seed."""
    rng = random.Random(f"{seed}:{sorted(config.get('model', {}).items())}")
    model, training = config.get("model", {}), config.get("training", {})
    layers = int(model.get("hidden_layers", 2))
    units = model.get("hidden_units", 64)
    units = sum(units) / len(units) if isinstance(units, list) else float(units)
    activation = model.get("activation", "relu")
    lr = float(training.get("lr", 0.01))
    base = {"relu": 0.975, "tanh": 0.968, "elu": 0.972, "gelu": 0.974, "sigmoid": 0.95}
    accuracy = base.get(activation, 0.96) - 0.28 * math.exp(-units / 55)
    if activation == "sigmoid":
        accuracy -= 0.035 * (layers - 1) ** 1.3
    else:
        accuracy += 0.004 * min(layers, 3)
    accuracy -= 0.02 * abs(math.log10(lr) + 1.7) ** 2
    accuracy += rng.gauss(0, 0.004)
    seconds = 0.8 + 0.55 * layers * (1 + units / 400) + rng.gauss(0, 0.08)
    return min(max(accuracy, 0.1), 0.995), max(seconds, 0.1)


def epoch_rows(trial_id: str, sweep_id: str, attempt: int, accuracy: float, seconds: float,
               epochs: int, end: datetime, upto: int | None = None) -> list[dict[str, Any]]:
    """Per-epoch metric rows rising to `accuracy` (the first `upto` epochs of them)."""
    rows = []
    pace = 2.0 + (hash(trial_id) % 1000) / 250
    for epoch in range(1, (upto or epochs) + 1):
        fraction = 1 - math.exp(-epoch / pace)
        rows.append({
            "trial_id": trial_id,
            "sweep_id": sweep_id,
            "attempt": attempt,
            "epoch": epoch,
            "metrics": {
                "epoch": epoch,
                "train_loss": round(2.3 * (1 - fraction) + 0.02, 5),
                "val_loss": round(2.3 * (1 - fraction) + 0.08, 5),
                "val_accuracy": round(0.1 + (accuracy - 0.1) * fraction, 5),
                "lr": 0.05,
                "epoch_seconds": round(seconds / epochs, 4),
            },
            "reported_at": end - timedelta(seconds=seconds * (epochs - epoch) / epochs),
        })
    return rows


def seed_sweep(store: Store, spec: SweepSpec, **options: Any) -> Seeded:
    """Write the sweep `build_sweep` makes (same options) into the store; see it."""
    store.ensure_indexes()
    built = build_sweep(spec, **options)
    for i in range(0, len(built.trials), INSERT_BATCH):
        store.db["trials"].insert_many(built.trials[i : i + INSERT_BATCH], ordered=False)
    for i in range(0, len(built.metrics), INSERT_BATCH):
        store.db["metrics"].insert_many(built.metrics[i : i + INSERT_BATCH],
                                        ordered=False)
    store.db["sweeps"].insert_one(built.sweep)
    return built.seeded


@dataclass
class Built:
    """The documents of a seeded sweep, before they are written."""

    seeded: Seeded
    sweep: dict[str, Any]
    trials: list[dict[str, Any]]
    metrics: list[dict[str, Any]]


def build_sweep(
    spec: SweepSpec,
    *,
    failed: int = 0,
    pruned: int = 0,
    running: int = 0,
    queued: int = 0,
    curves: int = 30,
    spacing: float = 1.0,
    now: datetime | None = None,
    seed: int = 0,
    owner: str | None = "alice",
    sections: dict[str, Any] | None = None,
) -> Built:
    """A sweep of `spec` whose trials are finished, but for the last `queued` (still queued)
    and the `running` before them; `failed` random finished ones failed with a reason, and
    `pruned` others pruned (as the pruning helper's finish leaves them: ``pruned_epoch``,
    the epochs before it reported, no objective).

    Trials finished `spacing` seconds apart, the last one at `now`. Per-epoch metrics are
    made for the `curves` best complete trials, every pruned and every running trial.
    `sections` go into the stored spec as they are (``search``, ``pruning``), as a spec
    the scheduler accepted keeps them.
    """
    now = now or utcnow()
    rng = random.Random(seed)
    points = expand(spec, with_config=True)
    n = len(points)
    finished = n - queued - running
    if finished < failed + pruned or finished < 0:
        raise ValueError(f"cannot seed {failed} failed and {pruned} pruned of {finished} "
                         "finished trials")
    sweep_id = f"{rng.getrandbits(48):012x}"
    ending = rng.sample(range(finished), failed + pruned)
    failing, pruning = set(ending[:failed]), set(ending[failed:])
    start = now - timedelta(seconds=spacing * finished)
    docs, metrics, states, objectives = [], [], {}, {}
    epochs = int(spec.document.get("training", {}).get("epochs", 20) or 20)
    for point in points:
        doc = trial_document(sweep_id, point, point.config, start)
        accuracy, seconds = outcome(point.config, point.seed)
        worker = {"host": "node", "pid": 1000 + point.index % 7,
                  "name": WORKERS[point.index % len(WORKERS)]}
        position = point.index
        if position < finished:
            end = start + timedelta(seconds=spacing * (position + 1))
            state = TrialState.FAILED.value if position in failing else TrialState.COMPLETE.value
            if position in pruning:
                state = TrialState.PRUNED.value
            doc.update(state=state, attempt=1, worker=worker, started_at=end - timedelta(
                seconds=seconds), heartbeat_at=end, finished_at=end, updated_at=end,
                device="cuda:0" if "gpu" in worker["name"] else "cpu", dtype="float32",
                param_count=_param_count(point.config))
            if state == TrialState.COMPLETE.value:
                doc.update(objective=accuracy, train_seconds=seconds, result={
                    "objective": accuracy, "final": {"val_accuracy": accuracy},
                    "best": {"val_accuracy": accuracy}, "epochs": epochs})
                objectives[point.index] = accuracy
            elif state == TrialState.PRUNED.value:
                stop = rng.randint(1, max(1, epochs - 1))
                doc.update(pruned_epoch=stop, train_seconds=seconds * stop / epochs,
                           progress={"epoch": stop, "metrics": {}})
                metrics.extend(epoch_rows(doc["_id"], sweep_id, 1, accuracy * 0.9, seconds,
                                          epochs, end, upto=stop))
            else:
                reason = rng.choice(REASONS).format(
                    epoch=rng.randint(2, 9), mb=rng.choice((512, 1024, 2048)),
                    activation=point.config["model"].get("activation"),
                    lr=point.config["training"].get("lr"))
                doc.update(error=reason)
            doc["history"] = [{"attempt": 1, "state": state, "worker": worker,
                               "started_at": doc["started_at"], "finished_at": end,
                               "error": doc["error"]}]
        elif position < finished + running:
            state = TrialState.RUNNING.value
            doc.update(state=state, attempt=1, worker=worker, started_at=now - timedelta(
                seconds=3), heartbeat_at=now, updated_at=now)
            metrics.extend(epoch_rows(doc["_id"], sweep_id, 1, accuracy, seconds, epochs, now,
                                      upto=3))
        else:
            state = TrialState.QUEUED.value
        states[point.index] = state
        docs.append(doc)
    best = sorted(objectives, key=lambda i: -objectives[i])[:curves]
    for index in best:
        doc = docs[index]
        accuracy, seconds = outcome(points[index].config, points[index].seed)
        metrics.extend(epoch_rows(doc["_id"], sweep_id, 1, accuracy, seconds, epochs,
                                  doc["finished_at"]))
    sweep = sweep_document(sweep_id, name=spec.name, description=spec.description,
                           spec=spec.document, metric=spec.objective.metric,
                           direction=spec.objective.direction, owner=owner, trial_count=n,
                           max_index=n - 1, now=start)
    sweep["spec"] = {**sweep["spec"], **(sections or {})}
    sweep["counts"] = {state.value: 0 for state in TrialState}
    for state in states.values():
        sweep["counts"][state] += 1
    sweep["updated_at"] = now
    return Built(Seeded(sweep_id, points, states, objectives), sweep, docs, metrics)


def _param_count(config: dict[str, Any]) -> int:
    model = config.get("model", {})
    layers = int(model.get("hidden_layers", 2))
    units = model.get("hidden_units", 64)
    widths: Sequence[int] = units if isinstance(units, list) else [int(units)] * layers
    sizes = [64, *widths, 10]
    return sum(a * b + b for a, b in itertools.pairwise(sizes))


def mcleod_spec(root: str = ".") -> SweepSpec:
    """The McLeod digits spec of `configs/` (5 depths x 8 widths x 3 activations x 3 seeds)."""
    return load_spec_file(f"{root}/{MCLEOD_SPEC}")
