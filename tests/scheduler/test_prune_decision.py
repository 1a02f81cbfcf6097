"""The pruning decision, as pure logic: epoch rows in, {trial id: (attempt, epoch)} out,
with Optuna's median pruner behind a real SearchSession (no store, no broker)."""

from __future__ import annotations

from core.spec.sweep import load_spec
from scheduler.prune_decision import decide
from scheduler.search_session import SearchSession

SPEC = (
    "name: prune\ndataset: {name: digits}\nmodel: {hidden_units: [8, 16, 32, 64, 128]}\n"
    "training: {epochs: 4}\nobjective: {metric: val_accuracy, direction: max}\n"
    "search: {algorithm: grid}\npruning: {algorithm: median, n_startup_trials: 2}\n"
)


def test_a_trial_below_the_median_is_stopped_at_the_epoch_judged() -> None:
    session = SearchSession(load_spec(SPEC))
    numbers = [session.add_point({"model.hidden_units": w}).number for w in (8, 16, 32, 64)]
    good = {e: {"val_accuracy": 0.5 + e / 10} for e in range(1, 5)}
    for n in numbers[:2]:
        decide(session, {"t": (n, 1)}, {"t": good}, "val_accuracy")
        session.tell(n, 0.9)
    running = {"bad": (numbers[2], 3), "fine": (numbers[3], 1)}
    rows = {
        "bad": {1: {"val_accuracy": 0.1}, 2: {"val_accuracy": 0.12}},
        "fine": {1: {"val_accuracy": 0.7}, 2: {"val_loss": 0.3}},  # epoch 2 lacks the metric
        "gone": {1: {"val_accuracy": 0.0}},  # not running: never judged
    }
    assert decide(session, running, rows, "val_accuracy") == {"bad": (3, 2)}
    assert decide(session, running, {"bad": {}, "fine": {}}, "val_accuracy") == {}
