"""The analysis of a finished 50,000-trial sweep: seconds from the store to the findings.

    python -m bench.bench_analysis [--url mongodb://...] [--seeds 10]

Seeds a store with the finished grid sweep of `bench.bench_dashboard` (5 depths x 50
widths x 5 activations x 4 learning rates x `--seeds` seeds: 50,000 trials with 10) and
its summaries (what the lifecycle keeps as trials finish), then times, in one run:

- the analysis as ``sweepstack report``, the API and the dashboard's panel compute it the
  first time (`core.analysis.sweep_analysis` with Optuna's importance; nothing kept yet),
  against the 5 s budget, and each of its parts: reading the rows (the finish log), the
  plateaus, laws and fronts, and the importances; loading Optuna's evaluators and
  scikit-learn, once per process, is timed apart before;
- the same call again: the finished sweep's analysis is stored with it, so it is read back;
- Optuna's fANOVA with its default forest (64 trees of depth 64) on the same trials, the
  peer of the smaller forest `scheduler.importance` uses, with both rankings.

Without --url (or SWEEPSTACK_BENCH_MONGO_URL) it starts its own SecantusDB.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid

from optuna.importance import FanovaImportanceEvaluator, get_param_importances

from bench import store_url
from bench.bench_expand import GRID
from core.analysis import FIELDS, analyse, sweep_analysis
from core.analysis.report import jsonable
from core.analysis.rows import complete_trials
from core.spec.sweep import load_spec
from core.store.store import Store
from scheduler import importance
from tests.dashboard.seeding import seed_sweep

BUDGET_S = 5.0


def _timed(label: str, call, budget: float | None = None):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    value = call()
    seconds = time.perf_counter() - start
    verdict = ""
    if budget is not None:
        verdict = f" ({'within' if seconds <= budget else 'OVER'} the {budget:.0f} s budget)"
    print(f"{label:<58} {seconds:6.2f} s{verdict}")
    return value


def _ranking(shares: dict[str, float]) -> str:
    ranked = sorted(shares.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{p.split('.')[-1]} {100 * s:.0f}%" for p, s in ranked)


def seeded_rows(store: Store, sweep_id: str) -> list[dict]:
    """A few complete trials' rows, to load the evaluators before anything is timed."""
    docs, _ = store.reads.trials(sweep_id, state="complete", limit=50)
    return docs


def run(url: str, seeds: int) -> None:
    db_name = f"bench_analysis_{uuid.uuid4().hex[:8]}"
    store = Store.connect(url, db_name)
    try:
        seed_list = ", ".join(str(s) for s in range(seeds))
        text = GRID.replace("seed: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]", f"seed: [{seed_list}]")
        spec = load_spec(text + "objective: {metric: val_accuracy, direction: maximize}\n")
        start = time.perf_counter()
        seeded = seed_sweep(store, spec, failed=25 * seeds, curves=0, spacing=0.05)
        sweep_id = seeded.sweep_id
        print(f"seeded {len(seeded.points):,} finished trials ({seeded.count('complete'):,} "
              f"complete) in {time.perf_counter() - start:.1f} s")  # fmt: skip
        store.reads.best(sweep_id, 1)  # its first read builds the sweep's summaries
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"{os.cpu_count()} CPUs, load average {load}")

        few = complete_trials(seeded_rows(store, sweep_id)[:50])
        _timed("loading Optuna's importance and scikit-learn (once per process)",
               lambda: importance.param_importances(
                   {}, few.params, few.objective.tolist(), "maximize"))  # fmt: skip
        found = _timed(
            "analysis, first time (rows, plateaus, laws, fronts, importance)",
            lambda: sweep_analysis(store.reads, sweep_id, importance=importance.param_importances),
            BUDGET_S,
        )
        _timed(
            "analysis again (stored with the finished sweep)",
            lambda: sweep_analysis(store.reads, sweep_id, importance=importance.param_importances),
        )
        sweep = store.reads.get_sweep(sweep_id)
        docs, _ = _timed("  of which: reading the rows (finish log)",
                         lambda: store.reads.sweep_rows(sweep_id, FIELDS))  # fmt: skip
        _timed("  of which: plateaus, cost laws, fronts", lambda: analyse(sweep, docs))
        trials = complete_trials(docs)
        _timed(
            f"  of which: importance (fANOVA {importance.FANOVA_TREES}x{importance.FANOVA_DEPTH}"
            ", PED-ANOVA)",
            lambda: importance.param_importances(
                sweep["spec"], trials.params, trials.objective.tolist(), "maximize"
            ),
        )
        chosen = importance._sample(len(trials))
        study = importance.study_of(sweep["spec"], [trials.params[i] for i in chosen],
                                    trials.objective[chosen].tolist(), "maximize",
                                    evaluator="fanova")  # fmt: skip
        default = _timed(
            f"peer: Optuna's default fANOVA (64x64) on the same {chosen.size:,} trials",
            lambda: get_param_importances(study, evaluator=FanovaImportanceEvaluator(seed=0)),
        )
        print(f"ranking, fANOVA {importance.FANOVA_TREES}x{importance.FANOVA_DEPTH}: "
              f"{_ranking(found['importance']['fanova'])}")  # fmt: skip
        print(f"ranking, fANOVA 64x64: {_ranking(jsonable(dict(default)))}")
        print("findings:")
        for line in found["findings"]:
            print(f"  - {line}")
    finally:
        store.client.drop_database(db_name)
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("SWEEPSTACK_BENCH_MONGO_URL"))
    parser.add_argument(
        "--seeds",
        type=int,
        default=10,
        help="seeds per setting: 5,000 trials each (default 10: 50,000)",
    )
    args = parser.parse_args()
    with store_url(args.url) as url:
        run(url, args.seeds)


if __name__ == "__main__":
    sys.exit(main())
