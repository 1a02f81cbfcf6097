"""Sweepstack side by side with a plain two-process Optuna script, on the same spec.

Both call the same training function (`workers.training.train`) on the same trials, and
each system's wall time includes its processes' start (Python and the torch import), as a
user sees it:

- ``sweepstack run SPEC --workers N --json``, the real command as a subprocess, with the
  embedded defaults (no ``SWEEPSTACK_*`` variable: embedded SecantusDB and broker) in a
  fresh data folder, with the dashboard on (as a user runs it; ``--port 0``), once with
  ``execution.fuse: auto`` and once with ``off``. From the stored records it also reads
  when the first trial started and when the last one finished, relative to the command's
  start and end (start-up and shut-down), and the median time a worker process sat idle
  between two trials (the platform's cost per trial: broker, claim, finish).
- Optuna (`optuna.storages.JournalStorage` on a `JournalFileBackend` file), N processes
  started together, each ``study.optimize`` with a `GridSampler` over the trial indices of
  ``scheduler.expand.expand(spec, with_config=True)``; each Optuna trial trains that index's
  resolved config with one torch thread. Two processes sharing a GridSampler can run one
  point twice: the table shows the trials it ran, and how many distinct grid points.

Prints one table row per system (wall time, first trial start, shut-down, trials run, best
objective) and the ratio sweepstack (best of auto/off) / Optuna. A busy machine makes every
figure noisy; compare within one run.

    python -m bench.bench_peers configs/mcleod-demo.yaml [--workers 2] [--systems ...] [--repeat N]

With ``--search`` the spec is an adaptive one (a sampler and a pruner) and the comparison is
`bench.peers_search`'s: ``sweepstack run`` against a plain Optuna script that reports every
epoch, with trials complete / pruned, epochs trained, where pruned trials stopped and the
best objective; ``--repeat N`` runs sweep seeds 0..N-1.

    python -m bench.bench_peers configs/mcleod-search.yaml --search [--repeat 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench import peers_search

ROOT = Path(__file__).resolve().parents[1]
SYSTEMS = ("sweepstack-auto", "sweepstack-off", "optuna")


@dataclass
class Outcome:
    """What one system did with the spec."""

    system: str
    wall: float
    trials: int
    distinct: int
    best: float | None
    first_start: float | None = None
    first_epoch: float | None = None
    shutdown: float | None = None
    gap: float | None = None
    work: float | None = None


def clean_env() -> dict[str, str]:
    """The environment of a user with no settings: every service embedded."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWEEPSTACK_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def _seconds(value: Any) -> float:
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return float(value.timestamp())


def _stored_times(
    data: Path, sweep_id: str
) -> tuple[float, float, float | None, float, float | None]:
    """From the sweep's records in its data folder: (first started_at, last finished_at,
    median gap between one trial's end and the next start on the same worker process, sum
    of the trials' ``train_seconds``, the first epoch row's ``reported_at``: a worker writes
    a trial's first row at once, so this is when training first showed, whatever a worker
    still had to load after its first claim)."""
    import pymongo

    from tests.services import SecantusProcess

    server = SecantusProcess(data / "db")
    try:
        client = pymongo.MongoClient(server.url, serverSelectionTimeoutMS=10000)
        fields = {"started_at": 1, "finished_at": 1, "worker": 1, "train_seconds": 1}
        docs = list(client["sweepstack"]["trials"].find({"sweep_id": sweep_id}, fields))
        reported = [
            row["reported_at"]
            for row in client["sweepstack"]["metrics"].find(
                {"sweep_id": sweep_id}, {"reported_at": 1}
            )
        ]
        client.close()
    finally:
        server.stop()
    runs: dict[Any, set[tuple[float, float]]] = {}
    for doc in docs:
        if doc.get("started_at") and doc.get("finished_at"):
            pid = (doc.get("worker") or {}).get("pid")
            span = (_seconds(doc["started_at"]), _seconds(doc["finished_at"]))
            runs.setdefault(pid, set()).add(span)  # a fused group's members share a span
    spans = sorted(span for per_pid in runs.values() for span in per_pid)
    gaps = []
    for per_pid in runs.values():
        ordered = sorted(per_pid)
        gaps += [b[0] - a[1] for a, b in itertools.pairwise(ordered)]
    gap = statistics.median(gaps) if gaps else None
    work = sum(doc.get("train_seconds") or 0.0 for doc in docs)
    first_row = min((_seconds(at) for at in reported), default=None)
    return spans[0][0], max(end for _, end in spans), gap, work, first_row


def run_sweepstack(spec_path: Path, fuse: str, workers: int, tmp: Path) -> Outcome:
    """`sweepstack run` on the spec with `execution.fuse` set, in a fresh data folder."""
    raw = yaml.safe_load(spec_path.read_text())
    raw.setdefault("execution", {})["fuse"] = fuse
    raw["name"] = f"{raw.get('name', 'sweep')}-{fuse}"
    spec = tmp / f"spec-{fuse}.yaml"
    spec.write_text(yaml.safe_dump(raw, sort_keys=False))
    data = tmp / f"data-{fuse}"
    env = clean_env()
    env["HOME"] = str(tmp / "home")
    cmd = [sys.executable, "-m", "cli.main", "run", str(spec), "--workers", str(workers)]
    cmd += ["--json", "--data", str(data), "--port", "0"]
    started = time.time()
    out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    ended = time.time()
    if out.returncode != 0:
        raise RuntimeError(f"sweepstack run (fuse {fuse}) failed:\n{out.stderr[-3000:]}")
    summary = json.loads(out.stdout)
    first, last, gap, work, first_row = _stored_times(data, summary["sweep_id"])
    best = (summary.get("best") or {}).get("objective")
    count = sum(n for state, n in summary["counts"].items() if state not in ("queued", "running"))
    return Outcome(
        system=f"sweepstack run, fuse {fuse}",
        wall=ended - started,
        trials=count,
        distinct=count,
        best=best,
        first_start=first - started,
        first_epoch=None if first_row is None else first_row - started,
        shutdown=ended - last,
        gap=gap,
        work=work / workers,
    )


def optuna_worker(spec_path: str, journal: str, study_name: str) -> None:
    """One Optuna process: a GridSampler over the spec's trial indices, one torch thread."""
    import optuna
    import torch

    from cli.shared import load_spec
    from core.spec.config import TrialConfig
    from scheduler.expand import expand
    from workers.training import objective_value, train

    torch.set_num_threads(1)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec = load_spec(spec_path)
    points = expand(spec, with_config=True)
    indices = list(range(len(points)))
    metric, direction = spec.objective.metric, spec.objective.direction
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(journal))
    study = optuna.create_study(
        study_name=study_name,
        storage=storage,
        sampler=optuna.samplers.GridSampler({"index": indices}, seed=0),
        direction="maximize" if direction in ("maximize", "max") else "minimize",
        load_if_exists=True,
    )

    def objective(trial: optuna.Trial) -> float:
        index = trial.suggest_categorical("index", indices)
        result = train(TrialConfig.from_dict(points[index].config))
        value = objective_value(result, metric, direction)
        return float("nan") if value is None else value

    study.optimize(objective)


def run_optuna(spec_path: Path, workers: int, tmp: Path) -> Outcome:
    """`workers` Optuna processes on one journal file, started together."""
    import optuna

    journal = str(tmp / "optuna.journal")
    env = clean_env()
    env["OMP_NUM_THREADS"] = "1"
    cmd = [sys.executable, "-m", "bench.bench_peers", "--optuna-worker", str(spec_path)]
    cmd += ["--journal", journal, "--study", "peers"]
    started = time.time()
    procs = [subprocess.Popen(cmd, env=env, cwd=ROOT) for _ in range(workers)]
    codes = [proc.wait() for proc in procs]
    ended = time.time()
    if any(codes):
        raise RuntimeError(f"an Optuna process failed: exit codes {codes}")
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(journal))
    study = optuna.load_study(study_name="peers", storage=storage)
    done = [t for t in study.trials if t.state.is_finished()]
    best = study.best_value if any(t.value is not None for t in done) else None
    return Outcome(
        system=f"optuna {optuna.__version__}, {workers} processes, journal file",
        wall=ended - started,
        trials=len(done),
        distinct=len({t.params.get("index") for t in done}),
        best=best,
    )


def _fmt(value: float | None, pattern: str) -> str:
    return "-" if value is None else format(value, pattern)


def print_table(outcomes: list[Outcome], workers: int, spec: Path) -> None:
    print(f"spec {spec}, {workers} workers each; noisy if the machine is shared")
    header = f"{'system':<44} {'wall s':>7} {'1st start s':>11} {'1st epoch s':>11}"
    header += f" {'shut-down s':>11}"
    print(f"{header} {'gap ms':>7} {'trials (distinct)':>18} {'best':>8}")
    for o in outcomes:
        gap = None if o.gap is None else o.gap * 1000
        print(
            f"{o.system:<44} {o.wall:>7.1f} {_fmt(o.first_start, '.2f'):>11} "
            f"{_fmt(o.first_epoch, '.2f'):>11} {_fmt(o.shutdown, '.2f'):>11} {_fmt(gap, '.0f'):>7} "
            f"{f'{o.trials} ({o.distinct})':>18} {_fmt(o.best, '.4f'):>8}"
        )
    print(
        "1st start: command start to the first trial's claim; 1st epoch: to the first epoch "
        "row written; shut-down: last trial's end to the command's return; gap: median idle "
        "time of a worker process between trials"
    )
    ours = [o for o in outcomes if o.system.startswith("sweepstack")]
    peer = [o for o in outcomes if o.system.startswith("optuna")]
    if ours and peer:
        fastest = min(ours, key=lambda o: o.wall)
        print(
            f"sweepstack (best of fuse auto/off: {fastest.system}) / optuna wall time: "
            f"{fastest.wall / peer[0].wall:.2f}"
        )
    for o in ours:
        if o.work is not None and peer:
            # The floor of a platform that adds nothing: training alone, spread evenly.
            print(
                f"{o.system}: training alone (sum of train_seconds / {workers} workers) "
                f"{o.work:.1f} s = {o.work / peer[0].wall:.2f} x optuna's wall time"
            )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", type=Path)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--systems",
        default=None,
        help=f"comma-separated, of {', '.join(SYSTEMS)} (with --search: "
        f"{', '.join(peers_search.SYSTEMS)}); default all",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs of each system, in alternating order (a b c, c b a, ...); the median is shown",
    )
    parser.add_argument(
        "--search",
        action="store_true",
        help="an adaptive spec: sweepstack run vs a plain Optuna script with its pruner",
    )
    parser.add_argument("--optuna-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--optuna-search-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--journal", help=argparse.SUPPRESS)
    parser.add_argument("--study", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.optuna_worker:
        optuna_worker(str(args.spec), args.journal, args.study)
        return
    if args.optuna_search_worker:
        peers_search.optuna_search_worker(str(args.spec), args.journal, args.study)
        return
    known = peers_search.SYSTEMS if args.search else SYSTEMS
    chosen = args.systems if args.systems is not None else ",".join(known)
    systems = [s.strip() for s in chosen.split(",") if s.strip()]
    unknown = sorted(set(systems) - set(known))
    if unknown:
        parser.error(f"--systems: unknown {unknown}; choose from {', '.join(known)}")
    if args.repeat < 1:
        parser.error("--repeat: must be 1 or more")
    spec = args.spec.resolve()
    if args.search:
        with tempfile.TemporaryDirectory(prefix="bench-peers-search-") as tmp:
            peers_search.run_search(spec, systems, args.workers, args.repeat, Path(tmp))
        return
    runs: dict[str, list[Outcome]] = {system: [] for system in systems}
    for turn in range(args.repeat):
        for system in systems if turn % 2 == 0 else systems[::-1]:
            with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp:
                if system == "optuna":
                    outcome = run_optuna(spec, args.workers, Path(tmp))
                else:
                    fuse = system.removeprefix("sweepstack-")
                    outcome = run_sweepstack(spec, fuse, args.workers, Path(tmp))
            runs[system].append(outcome)
            print(f"  done: {outcome.system} in {outcome.wall:.1f} s", flush=True)
    # Each system's median run by wall time (the lower middle one of an even count).
    outcomes = [sorted(done, key=lambda o: o.wall)[(len(done) - 1) // 2] for done in runs.values()]
    if args.repeat > 1:
        print(f"median of {args.repeat} runs each, in alternating order")
    print_table(outcomes, args.workers, args.spec)


if __name__ == "__main__":
    main()
