"""`bench_peers --search`: an adaptive spec (a sampler and a pruner) through `sweepstack run`
and through a plain N-process Optuna script, on the same training function.

- ``sweepstack run SPEC --workers N --json`` with the embedded defaults, in a fresh data
  folder; what it trained is read back from the stored records: each trial's state, the
  epoch rows of its last attempt, and for a pruned trial the last epoch it trained.
- Optuna: N processes started together on one `JournalStorage` file, each
  ``study.optimize`` until the study holds ``search.trials`` finished trials
  (`MaxTrialsCallback`). The sampler is the one a user would write
  (``TPESampler(seed=..., **the spec's options)``), the pruner Optuna's own for the spec's
  ``pruning`` section; each trial suggests the spec's dimensions, trains the resolved config
  with `workers.training.train` on one torch thread, and calls ``trial.report`` and
  ``trial.should_prune`` after every epoch, stopping before the next one when told.

Each run is one sweep seed (``search.seed``, the same for both systems); `--repeat N` runs
seeds 0..N-1 in alternating order and the summary shows each system's medians.
"""

from __future__ import annotations

import collections
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SYSTEMS = ("sweepstack", "optuna")


@dataclass
class SearchOutcome:
    """What one system's adaptive search did."""

    system: str
    seed: int
    wall: float
    complete: int
    pruned: int
    failed: int
    epochs: int
    best: float | None
    #: epoch a pruned trial stopped at -> how many trials stopped there
    stopped_at: dict[int, int] = field(default_factory=dict)


def seeded_spec(spec_path: Path, seed: int, tmp: Path) -> Path:
    """A copy of the spec with ``search.seed`` set."""
    raw = yaml.safe_load(spec_path.read_text())
    raw.setdefault("search", {})["seed"] = seed
    raw["name"] = f"{raw.get('name', 'sweep')}-seed{seed}"
    path = tmp / f"spec-seed{seed}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _clean_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWEEPSTACK_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["HOME"] = str(tmp / "home")
    return env


def _stored(data: Path, sweep_id: str) -> tuple[dict[str, int], int, dict[int, int]]:
    """From the data folder's store: counts by state, epochs trained (the rows of each
    trial's last attempt), and the histogram of the epochs pruned trials stopped at."""
    import pymongo

    from tests.services import SecantusProcess

    server = SecantusProcess(data / "db")
    try:
        client = pymongo.MongoClient(server.url, serverSelectionTimeoutMS=10000)
        db = client["sweepstack"]
        fields = {"state": 1, "attempt": 1, "pruned_epoch": 1}
        trials = {d["_id"]: d for d in db["trials"].find({"sweep_id": sweep_id}, fields)}
        rows = collections.Counter(
            (row["trial_id"], row.get("attempt"))
            for row in db["metrics"].find({"sweep_id": sweep_id}, {"trial_id": 1, "attempt": 1})
        )
        client.close()
    finally:
        server.stop()
    counts = collections.Counter(doc["state"] for doc in trials.values())
    epochs = sum(rows[(tid, doc.get("attempt"))] for tid, doc in trials.items())
    stopped = collections.Counter(
        int(doc["pruned_epoch"])
        for doc in trials.values()
        if doc["state"] == "pruned" and doc.get("pruned_epoch") is not None
    )
    return dict(counts), epochs, dict(stopped)


def run_sweepstack(spec_path: Path, seed: int, workers: int, tmp: Path) -> SearchOutcome:
    """`sweepstack run` on the seeded spec, in a fresh data folder."""
    spec = seeded_spec(spec_path, seed, tmp)
    data = tmp / "data"
    cmd = [sys.executable, "-m", "cli.main", "run", str(spec), "--workers", str(workers)]
    cmd += ["--json", "--data", str(data), "--port", "0"]
    started = time.time()
    out = subprocess.run(
        cmd, env=_clean_env(tmp), cwd=ROOT, capture_output=True, text=True, check=False
    )
    wall = time.time() - started
    if out.returncode != 0:
        raise RuntimeError(f"sweepstack run failed:\n{out.stderr[-3000:]}")
    summary = json.loads(out.stdout)
    counts, epochs, stopped = _stored(data, summary["sweep_id"])
    return SearchOutcome(
        system="sweepstack run",
        seed=seed,
        wall=wall,
        complete=counts.get("complete", 0),
        pruned=counts.get("pruned", 0),
        failed=counts.get("failed", 0),
        epochs=epochs,
        best=(summary.get("best") or {}).get("objective"),
        stopped_at=stopped,
    )


def optuna_search_worker(spec_path: str, journal: str, study_name: str) -> None:
    """One Optuna process of the plain script: suggest, train, report every epoch."""
    import optuna
    import torch

    from core.errors import TrainingError
    from core.spec.config import TrialConfig
    from core.spec.pruners import make_pruner
    from core.spec.search import pruning_direction
    from core.spec.space import Fixed
    from core.spec.sweep import load_spec_file
    from scheduler.samplers import max_epochs, param
    from scheduler.search_session import suggest
    from workers.training import objective_value, train

    torch.set_num_threads(1)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec = load_spec_file(spec_path)
    search, pruning = spec.search, spec.pruning
    metric, direction = spec.objective.metric, spec.objective.direction
    pruned_metric = pruning.metric or metric
    # The pruned metric reported negated when it improves the other way, as the scheduler does.
    flip = pruning_direction(pruning, metric, direction) != direction
    # The specs of this benchmark have no conditional (`when:`) dimensions.
    params_of = {path: param(dim) for path, dim in spec.space.items() if not isinstance(dim, Fixed)}
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(journal))
    study = optuna.create_study(
        study_name=study_name,
        storage=storage,
        sampler=optuna.samplers.TPESampler(seed=search.seed, **search.sampler_options()),
        pruner=make_pruner(pruning, flip=flip, epochs=max_epochs(spec)),
        direction="maximize" if direction in ("maximize", "max") else "minimize",
        load_if_exists=True,
    )
    base = spec.base_config()

    def objective(trial: optuna.Trial) -> float:
        params = {
            path: p.decode(suggest(trial, path, p.distribution)) for path, p in params_of.items()
        }
        seed = params.get("training.seed", base["training"].get("seed")) or 0
        config = TrialConfig.from_dict(spec.seeded_config(params, seed, base))
        state = {"stop": False, "epochs": 0}

        def on_epoch(epoch: int, row: dict[str, float]) -> None:
            state["epochs"] = epoch
            value = row.get(pruned_metric)
            if value is not None:
                trial.report(-float(value) if flip else float(value), epoch)
                state["stop"] = trial.should_prune()

        result = train(config, on_epoch=on_epoch, should_stop=lambda: bool(state["stop"]))
        trial.set_user_attr("epochs", state["epochs"])
        if state["stop"]:
            raise optuna.TrialPruned()
        value = objective_value(result, metric, direction)
        return float("nan") if value is None else value

    budget = optuna.study.MaxTrialsCallback(search.trials, states=None)
    # A trial whose loss became NaN is a failed trial, as the platform records it.
    study.optimize(objective, callbacks=[budget], catch=(TrainingError,))


def run_optuna(spec_path: Path, seed: int, workers: int, tmp: Path) -> SearchOutcome:
    """`workers` Optuna processes on one journal file, started together."""
    import optuna

    spec = seeded_spec(spec_path, seed, tmp)
    journal = str(tmp / "optuna.journal")
    env = _clean_env(tmp)
    env["OMP_NUM_THREADS"] = "1"
    cmd = [sys.executable, "-m", "bench.bench_peers", "--optuna-search-worker", str(spec)]
    cmd += ["--journal", journal, "--study", "peers"]
    started = time.time()
    procs = [subprocess.Popen(cmd, env=env, cwd=ROOT) for _ in range(workers)]
    codes = [proc.wait() for proc in procs]
    wall = time.time() - started
    if any(codes):
        raise RuntimeError(f"an Optuna process failed: exit codes {codes}")
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(journal))
    study = optuna.load_study(study_name="peers", storage=storage)
    trials = study.trials
    states = collections.Counter(t.state.name for t in trials)
    values = [t.value for t in trials if t.value is not None and t.value == t.value]
    best = None
    if values:
        best = max(values) if study.direction.name == "MAXIMIZE" else min(values)
    stopped = collections.Counter(
        int(t.user_attrs.get("epochs", 0)) for t in trials if t.state.name == "PRUNED"
    )
    return SearchOutcome(
        system=f"optuna {optuna.__version__}, {workers} processes",
        seed=seed,
        wall=wall,
        complete=states.get("COMPLETE", 0),
        pruned=states.get("PRUNED", 0),
        failed=states.get("FAIL", 0),
        epochs=sum(int(t.user_attrs.get("epochs", 0)) for t in trials),
        best=best,
        stopped_at=dict(stopped),
    )


def _histogram(stopped: dict[int, int]) -> str:
    return " ".join(f"{epoch}:{n}" for epoch, n in sorted(stopped.items())) or "-"


def print_search(runs: dict[str, list[SearchOutcome]], workers: int, spec: Path) -> None:
    """Every run, then each system's medians and the ratio of the wall times."""
    print(f"spec {spec}, {workers} workers each; noisy if the machine is shared")
    print(
        f"{'system':<28} {'seed':>4} {'wall s':>7} {'complete':>8} {'pruned':>6} "
        f"{'failed':>6} {'epochs':>6} {'best':>8}  pruned trials stopped at (epoch:n)"
    )
    for outcomes in runs.values():
        for o in outcomes:
            best = "-" if o.best is None else f"{o.best:.4f}"
            print(
                f"{o.system:<28} {o.seed:>4} {o.wall:>7.1f} {o.complete:>8} {o.pruned:>6} "
                f"{o.failed:>6} {o.epochs:>6} {best:>8}  {_histogram(o.stopped_at)}"
            )
    medians = {
        system: (
            statistics.median(o.wall for o in outcomes),
            statistics.median(o.epochs for o in outcomes),
            statistics.median(o.best for o in outcomes if o.best is not None)
            if any(o.best is not None for o in outcomes) else None,
        )
        for system, outcomes in runs.items() if outcomes
    }
    for system, (wall, epochs, best) in medians.items():
        shown = "-" if best is None else f"{best:.4f}"
        print(f"median {system}: wall {wall:.1f} s, epochs {epochs:.0f}, best {shown}")
    if "sweepstack" in medians and "optuna" in medians:
        ours, peer = medians["sweepstack"], medians["optuna"]
        print(f"sweepstack / optuna wall time (medians): {ours[0] / peer[0]:.2f}")
        if ours[2] is not None and peer[2] is not None:
            print(f"best, sweepstack - optuna (medians): {ours[2] - peer[2]:+.4f}")


def run_search(spec: Path, systems: list[str], workers: int, repeat: int, tmp_root: Path) -> None:
    """Each system once per sweep seed 0..repeat-1, in alternating order; then the table."""
    runs: dict[str, list[SearchOutcome]] = {system: [] for system in systems}
    for seed in range(repeat):
        for system in systems if seed % 2 == 0 else systems[::-1]:
            tmp = tmp_root / f"{system}-{seed}"
            tmp.mkdir(parents=True)
            run = run_optuna if system == "optuna" else run_sweepstack
            outcome = run(spec, seed, workers, tmp)
            runs[system].append(outcome)
            print(f"  done: {outcome.system}, seed {seed}, in {outcome.wall:.1f} s", flush=True)
    print_search(runs, workers, spec)
