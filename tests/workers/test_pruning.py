"""`workers.pruning`: the pruner a worker runs itself decides as Optuna's pruner does in one
process, on the same reports, as trials complete one after another (the store of the
`mongo_url` fixture holds the complete trials, as it does for a real sweep).

The reference is a plain Optuna study: ``study.ask()``, ``trial.report`` after every
epoch, ``study.tell`` at the end, ``trial.should_prune()`` for the running one: what a
user's own Optuna script decides.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import optuna
import pytest

from core.spec.pruners import make_pruner
from core.spec.search import IN_WORKER, Pruning, decision_epochs, judged_in_worker
from core.states import TrialState
from core.store.store import Store
from tests import loaded_after
from tests.core import finish, make_sweep, open_store, report, run, small_spec, trial_ids
from workers.claims import asks_at, decide_at_of
from workers.pruning import SweepPruner, TrialReports

PRUNERS = [
    {"algorithm": "median", "n_startup_trials": 2},
    {"algorithm": "median", "n_startup_trials": 1, "n_warmup_steps": 2, "interval_steps": 2},
    {"algorithm": "percentile", "percentile": 25.0, "n_min_trials": 2, "n_startup_trials": 1},
    {"algorithm": "threshold", "lower": 0.3},
    {"algorithm": "patient", "patience": 1, "wrapped": {"algorithm": "median"}},
    # The pruned metric improves the other way than the objective: reported negated.
    {"algorithm": "median", "n_startup_trials": 1, "metric": "val_loss"},
]


@pytest.fixture
def store(mongo_url: str, db_name: str) -> Iterator[Store]:
    from datetime import UTC, datetime

    yield from open_store(mongo_url, db_name, lambda: datetime.now(UTC))  # type: ignore[arg-type]


def _curve(rng: random.Random, epochs: int) -> dict[int, dict[str, float]]:
    rows = {}
    for epoch in range(1, epochs + 1):
        accuracy = rng.random()
        rows[epoch] = {"val_accuracy": accuracy, "val_loss": 2.0 - accuracy + rng.random() / 5}
    return rows


@pytest.mark.parametrize("section", PRUNERS, ids=lambda s: s["algorithm"] + str(len(s)))
def test_the_workers_pruner_decides_as_optuna_does_in_one_process(
    store: Store, section: dict[str, Any]
) -> None:
    rng = random.Random(7)
    pruning = Pruning.model_validate(section)
    assert judged_in_worker(pruning)
    sweep_id, points = make_sweep(store, small_spec(pruning=section))
    objective = {"metric": "val_accuracy", "direction": "maximize"}
    metric = pruning.metric or "val_accuracy"
    flip = metric == "val_loss"  # lower is better: negated, as the scheduler reports it
    ours = SweepPruner(store.lifecycle, sweep_id, pruning, objective)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    reference = optuna.create_study(direction="maximize", pruner=make_pruner(pruning, flip=flip))
    decisions = pruned = 0
    for tid in trial_ids(sweep_id, points)[:10]:
        # Ask about a few running trials' reports against the trials complete so far.
        for _ in range(6):
            rows = _curve(rng, rng.randint(1, 6))
            own = TrialReports(ours)
            trial = reference.ask()
            for epoch, row in rows.items():
                own.add(epoch, row)
                trial.report(-row[metric] if flip else row[metric], epoch)
            expected = bool(trial.should_prune())
            assert own.judge() is expected, (rows, section)
            decisions += 1
            pruned += expected
            reference.tell(trial, state=optuna.trial.TrialState.FAIL)  # never complete
        # Then one more trial completes, in the store and in the reference.
        rows = _curve(rng, rng.randint(1, 6))
        run(store, tid)
        done = reference.ask()
        for epoch, row in rows.items():
            report(store, tid, 1, epoch, row)
            done.report(-row[metric] if flip else row[metric], epoch)
        value = rows[max(rows)]["val_accuracy"]
        assert finish(store, tid, 1, TrialState.COMPLETE, result={"objective": value})
        reference.tell(done, value)
    assert 0 < pruned < decisions, "the scenarios must hold prunes and go-ons"


def test_a_trial_is_judged_only_on_a_new_finite_value_and_never_on_epoch_0_alone(
    store: Store,
) -> None:
    section = {"algorithm": "threshold", "lower": 0.5}
    sweep_id, _ = make_sweep(store, small_spec(pruning=section))
    pruner = SweepPruner(store.lifecycle, sweep_id, Pruning.model_validate(section),
                         {"metric": "val_accuracy", "direction": "maximize"})  # fmt: skip
    own = TrialReports(pruner)
    own.add(0, {"val_accuracy": 0.1})
    assert own.judge() is False  # the untrained evaluation alone
    own.add(1, {"val_accuracy": float("nan")})
    own.add(1, {"loss": 0.3})
    assert own.judge() is False  # no new finite value: nothing to judge
    own.add(1, {"val_accuracy": 0.2})
    assert own.judge() is True
    assert own.judge() is False  # judged already


def test_which_pruners_the_worker_runs_and_what_the_message_says() -> None:
    assert decision_epochs(Pruning(algorithm="median"), 20) == IN_WORKER
    assert decision_epochs(Pruning(algorithm="threshold", lower=0.1), 9) == IN_WORKER
    assert decision_epochs(Pruning(algorithm="percentile", percentile=30.0), 9) == IN_WORKER
    patient = Pruning.model_validate({"algorithm": "patient", "patience": 2})
    assert decision_epochs(patient, 9) == IN_WORKER
    around_asha = Pruning.model_validate(
        {"algorithm": "patient", "patience": 2, "wrapped": {"algorithm": "asha"}}
    )
    assert not judged_in_worker(around_asha)
    assert decision_epochs(Pruning(algorithm="asha", min_resource=2), 9) == [2, 8]
    # The worker reads it from its message, and asks the store nothing for it.
    assert decide_at_of(IN_WORKER) == IN_WORKER
    assert not any(asks_at(True, IN_WORKER, epoch) for epoch in range(10))
    assert asks_at(True, decide_at_of([2, 8]), 2) and not asks_at(True, decide_at_of([2]), 3)


def test_a_worker_process_loads_optuna_only_when_it_runs_a_pruner() -> None:
    code = "import workers.tasks, workers.runner, workers.group_runner, workers.pruning"
    assert loaded_after(code, ["optuna"]) == []
