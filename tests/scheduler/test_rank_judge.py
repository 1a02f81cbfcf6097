"""The scheduler's Pareto-rank pruner (`scheduler.rank_judge`, #31): rows in, prunes out,
each trial judged once per attempt at a decision epoch, against those that reached the
rung before it, with costs known before training."""

from __future__ import annotations

from core.spec.search import Pruning
from scheduler.rank_judge import RankJudge

GOALS = [("val_accuracy", "maximize"), ("param_count", "minimize")]


def _judge(**pruning: object) -> RankJudge:
    return RankJudge(Pruning.model_validate(pruning), GOALS, max_epochs=9)


def test_asha_judges_at_rungs_against_earlier_arrivals() -> None:
    judge = _judge(algorithm="asha", min_resource=1, reduction_factor=3)  # rungs 1, 3, 9
    for tid, params in (("a", 100), ("b", 100), ("c", 100), ("d", 100)):
        judge.set_costs(tid, {"param_count": params})
    running = {t: (i, 0) for i, t in enumerate("abcd")}
    # a first at rung 1: kept; b worse, second of two (one place): stopped at 1.
    assert judge.decide(running, {"a": {1: {"val_accuracy": 0.5}}}) == {}
    assert judge.decide(running, {"b": {1: {"val_accuracy": 0.4}}}) == {"b": (0, 1)}
    # Epoch 2 is no rung: nothing judged.
    assert judge.decide(running, {"a": {2: {"val_accuracy": 0.6}}}) == {}
    # c better than both: kept; d the worst of four (one place): stopped.
    assert judge.decide(running, {"c": {1: {"val_accuracy": 0.7}}}) == {}
    assert judge.decide(running, {"d": {1: {"val_accuracy": 0.45}}}) == {"d": (0, 1)}
    # Judged once per attempt: the same rung again decides nothing; a new attempt does.
    assert judge.decide(running, {"d": {1: {"val_accuracy": 0.45}}}) == {}
    assert judge.decide({"d": (3, 1)}, {"d": {1: {"val_accuracy": 0.45}}}) == {"d": (1, 1)}


def test_a_row_without_an_objective_and_no_cost_is_not_judged() -> None:
    judge = _judge(algorithm="asha", min_resource=1, reduction_factor=3)
    running = {"a": (0, 0), "b": (1, 0)}
    judge.set_costs("a", {"param_count": 10})
    assert judge.decide(running, {"a": {1: {"val_accuracy": 0.9}}}) == {}
    assert judge.decide(running, {"b": {1: {"val_accuracy": 0.1}}}) == {}  # no param_count
    assert set(judge.at[1]) == {"a"}


def test_median_compares_with_complete_trials_only() -> None:
    judge = _judge(algorithm="median", n_startup_trials=2)
    for tid in "abcx":
        judge.set_costs(tid, {"param_count": 50})
    for tid, acc in (("a", 0.9), ("b", 0.8)):
        judge.observe(tid, 1, {"val_accuracy": acc})
    # Neither complete yet: no startup, no decision.
    assert judge.decide({"x": (9, 0)}, {"x": {1: {"val_accuracy": 0.1}}}) == {}
    judge.complete("a")
    judge.complete("b")
    assert judge.decide({"x": (9, 0)}, {"x": {2: {"val_accuracy": 0.1}}}) == {}  # none at 2
    assert judge.decide({"c": (10, 0)}, {"c": {1: {"val_accuracy": 0.2}}}) == {"c": (0, 1)}
    judge.forget("a")
    judge.forget("b")
    assert judge.decide({"c": (10, 1)}, {"c": {1: {"val_accuracy": 0.2}}}) == {}


def test_a_train_seconds_objective_is_ranked_by_the_seconds_each_trial_took_to_the_rung() -> None:
    """Every epoch row carries the seconds trained so far (`workers.training.epochs`), so a
    ``train_seconds`` objective ranks trials at a rung on the time each took to get there;
    the spec no longer refuses it with a Pareto-rank pruner."""
    from core.spec.sweep import load_spec

    spec = load_spec(
        {
            "name": "fast-and-right",
            "dataset": {"name": "digits"},
            "training": {"epochs": 9},
            "objectives": [{"metric": "val_accuracy", "direction": "maximize"},
                           {"metric": "train_seconds"}],
            "pruning": {"algorithm": "asha", "min_resource": 1, "reduction_factor": 3},
        }
    )  # fmt: skip
    goals = [(o.metric, o.direction) for o in spec.objectives]
    judge = RankJudge(spec.pruning, goals, spec.planned_epochs())
    running = {t: (i, 0) for i, t in enumerate("abc")}
    assert judge.decide(running, {"a": {1: {"val_accuracy": 0.8, "train_seconds": 2.0}}}) == {}
    # As accurate as a, but slower to the rung: dominated, not in the best 1 of 2.
    assert judge.decide(running, {"b": {1: {"val_accuracy": 0.8, "train_seconds": 3.0}}}) == {
        "b": (0, 1)
    }
    # Faster than a, less accurate: on the front with it (rank 0), an end of it (infinite
    # crowding distance), so kept as one of the best 1 of 3.
    assert judge.decide(running, {"c": {1: {"val_accuracy": 0.7, "train_seconds": 1.0}}}) == {}
