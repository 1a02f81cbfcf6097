"""The Optuna adapter: every algorithm asks valid points, conditions hold, pruners stop bad
curves, and a restarted session asks nothing twice and replays a seeded sweep exactly."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import optuna
import pytest

from core.errors import SpecError
from core.spec.pruners import make_pruner
from core.spec.search import Pruning, Search
from core.spec.space import Categorical, IntRange, Uniform
from core.spec.sweep import SweepSpec, load_spec
from scheduler.expand import expand
from scheduler.samplers import distribution, make_sampler
from scheduler.search_session import Asked, Record, SearchSession

MIXED = """
name: mixed
dataset: {name: digits}
model:
  hidden_layers: {int: [1, 3]}
  hidden_units: [[64, 32], [128, 64], 16]
  activation: [relu, tanh]
training:
  lr: {loguniform: [0.001, 0.1]}
  optimizer: [sgd, adam]
  momentum: {uniform: [0.5, 0.99], when: {optimizer: sgd}}
search: {algorithm: random, trials: 30}
"""

NUMERIC = """
name: numeric
dataset: {name: digits}
model:
  hidden_layers: {int: [1, 4]}
  dropout: {uniform: [0.0, 0.5]}
training:
  lr: {loguniform: [0.001, 0.1]}
  batch_size: [32, 64, 128]
search: {algorithm: random, trials: 30}
"""


def _spec(text: str) -> SweepSpec:
    return load_spec(text)


def _loss(params: dict[str, Any]) -> float:
    """A made-up objective with a known optimum, so samplers have something to learn."""
    lr = params.get("training.lr", 0.01)
    return (math.log10(lr) + 2) ** 2 + 0.1 * params.get("model.hidden_layers", 1)


def _check_inside(spec: SweepSpec, params: dict[str, Any]) -> None:
    lookup = dict(params)
    for dim in spec.dimensions:
        if dim.when and not all(lookup.get(p) in ok for p, ok in dim.when.items()):
            assert dim.path not in params, f"{dim.path} asked while its condition fails"
            continue
        value = params[dim.path]
        if isinstance(dim, Categorical):
            assert value in dim.choices
        elif isinstance(dim, IntRange):
            assert dim.low <= value <= dim.high and (value - dim.low) % dim.step == 0
        elif isinstance(dim, Uniform):
            assert dim.low <= value <= dim.high


def _run(session: SearchSession, n: int, batch: int = 2) -> list[Asked]:
    out: list[Asked] = []
    while len(out) < n:
        asked = session.ask(min(batch, n - len(out)))
        if not asked:
            break
        for a in asked:
            session.tell(a.number, _loss(a.params))
        out.extend(asked)
    return out


@pytest.mark.parametrize(
    ("algorithm", "text"),
    [
        ("random", MIXED),
        ("tpe", MIXED),
        ("gp", MIXED),
        ("qmc", NUMERIC),
        ("cmaes", NUMERIC),
    ],
)
def test_every_algorithm_asks_distinct_points_inside_the_space(algorithm: str, text: str) -> None:
    spec = _spec(text)
    # GP fits a Gaussian process on every ask (seconds each): a smaller budget.
    budget = 7 if algorithm == "gp" else 14
    search = Search(algorithm=algorithm, trials=budget, seed=1, n_startup_trials=4)
    if algorithm in ("random", "qmc"):
        search = Search(algorithm=algorithm, trials=budget, seed=1)
    session = SearchSession(spec, search)
    asked = _run(session, 20, batch=3)
    assert len(asked) == budget, "the budget is search.trials, never more"
    assert session.ask(5) == []
    assert len({a.key for a in asked}) == budget
    for a in asked:
        _check_inside(spec, a.params)


def test_conditional_dimension_is_asked_only_when_its_condition_holds() -> None:
    spec = _spec(MIXED)
    session = SearchSession(spec, Search(algorithm="tpe", trials=40, seed=0, n_startup_trials=5))
    asked = _run(session, 40, batch=4)
    sgd = [a for a in asked if a.params["training.optimizer"] == "sgd"]
    adam = [a for a in asked if a.params["training.optimizer"] == "adam"]
    assert sgd and adam
    assert all("training.momentum" in a.params for a in sgd)
    assert all("training.momentum" not in a.params for a in adam)
    trials = {t.number: t for t in session.study.trials}
    assert all("training.momentum" not in trials[a.number].params for a in adam)


def test_list_valued_choices_come_back_as_lists() -> None:
    spec = _spec(MIXED)
    session = SearchSession(spec, Search(algorithm="random", trials=30, seed=2))
    widths = {repr(a.params["model.hidden_units"]) for a in _run(session, 30)}
    assert widths == {"[64, 32]", "[128, 64]", "16"}
    dist = distribution(spec.space["model.hidden_units"])
    assert isinstance(dist, optuna.distributions.CategoricalDistribution)
    assert dist.choices == ("[64, 32]", "[128, 64]", "16")


def test_grid_asks_expansions_points_in_order_with_the_same_ids_and_seeds() -> None:
    text = """
name: g
dataset: {name: digits}
model:
  hidden_layers: [1, 2]
  activation: [relu, tanh]
training:
  optimizer: [sgd, adam]
  momentum: {choice: [0.5, 0.9], when: {optimizer: sgd}}
search: {algorithm: grid}
"""
    spec = _spec(text)
    expected = expand(spec, with_config=True)
    session = SearchSession(spec)
    asked = []
    while batch := session.ask(5):
        asked.extend(batch)
    assert len(asked) == len(expected) == 12
    points = [session.point(a, i, with_config=True) for i, a in enumerate(asked)]
    assert points == expected
    assert [p.config for p in points] == [e.config for e in expected]
    assert [a.number for a in asked] == list(range(12))


def test_grid_rebuilt_mid_sweep_asks_the_rest_exactly_once() -> None:
    spec = _spec(
        "name: g\ndataset: {name: digits}\nmodel: {hidden_layers: [1, 2, 3], "
        "activation: [relu, tanh, elu]}\ntraining: {seed: [0, 1]}\n"
    )
    first = SearchSession(spec)
    head = first.ask(7)
    for a in head[:4]:
        first.tell(a.number, 1.0)
    records = [
        Record(a.number, a.params, "complete" if i < 4 else "running", 1.0 if i < 4 else None)
        for i, a in enumerate(head)
    ]
    second = SearchSession(spec)
    second.rebuild(records)
    rest = []
    while batch := second.ask(4):
        rest.extend(batch)
    keys = [a.key for a in head] + [a.key for a in rest]
    assert len(keys) == len(set(keys)) == 18
    assert [a.number for a in rest] == list(range(7, 18))
    assert [a.params for a in head + rest] == [p.params for p in expand(spec)]


def _records(asked: list[Asked], values: dict[int, float]) -> list[Record]:
    return [
        Record(
            a.number,
            a.params,
            "complete" if a.number in values else "running",
            values.get(a.number),
            system_attrs=a.system_attrs,
        )
        for a in asked
    ]


@pytest.mark.parametrize("running", [0, 2])
def test_seeded_tpe_rebuilt_from_the_same_results_asks_the_same_points(running: int) -> None:
    spec = _spec(MIXED)
    search = Search(algorithm="tpe", trials=30, seed=11, n_startup_trials=4)
    straight = SearchSession(spec, search)
    first = straight.ask(10)
    told = first[: 10 - running]
    values = {a.number: _loss(a.params) for a in told}
    for a in told:
        straight.tell(a.number, values[a.number])
    stored = straight.study_attrs()
    expected = straight.ask(5)

    restarted = SearchSession(spec, search)
    restarted.rebuild(_records(first, values), stored)
    again = restarted.ask(5)
    assert [a.params for a in again] == [a.params for a in expected]
    assert [a.number for a in again] == [a.number for a in expected]
    assert restarted.asked == 15


def test_repeated_points_are_never_returned_and_numbers_survive_a_rebuild() -> None:
    # Six points in all: random search keeps drawing repeats, which must not come back.
    spec = _spec(
        "name: s\ndataset: {name: digits}\nmodel: {hidden_layers: [1, 2, 3]}\n"
        "training: {optimizer: [sgd, adam]}\nsearch: {algorithm: random, trials: 6}\n"
    )
    search = Search(algorithm="random", trials=6, seed=5)
    session = SearchSession(spec, search)
    asked = _run(session, 4, batch=1)
    assert len({a.key for a in asked}) == 4
    gap = session.trials_in_study > 4  # repeats took numbers of their own
    values = {a.number: 1.0 for a in asked}
    restarted = SearchSession(spec, search)
    restarted.rebuild(_records(asked, values))
    rest = _run(restarted, 10, batch=2)
    assert len(rest) == 2
    assert {a.key for a in asked}.isdisjoint({a.key for a in rest})
    assert restarted.ask(1) == []
    if gap:
        assert min(a.number for a in rest) >= max(a.number for a in asked) + 1


def test_tpe_on_a_small_discrete_space_finds_every_point_with_trials_in_flight() -> None:
    """TPE told only that its repeats failed proposes its best point again and again; with
    the random draws (`RANDOM_AFTER_REPEATS`) and, last, the unasked points in expansion
    order, every one of the 24 points is asked, with 3 in flight as the feeding loop asks."""
    spec = _spec(
        "name: s\ndataset: {name: digits}\n"
        "model: {hidden_layers: [1, 2, 3, 4], hidden_units: [8, 16, 32],"
        " activation: [relu, tanh]}\n"
        "search: {algorithm: tpe, trials: 24, n_startup_trials: 2, seed: 1}\n"
    )
    session = SearchSession(spec)
    flying: list[Asked] = []
    asked: list[Asked] = []
    while len(asked) < 24:
        new = session.ask(3 - len(flying))
        assert new, f"ask gave nothing after {len(asked)} points"
        flying += new
        asked += new
        done = flying.pop(0)
        session.tell(done.number, -abs(done.params["model.hidden_layers"] - 2), "complete")
    assert len({a.key for a in asked}) == 24
    assert session.ask(1) == []


def test_cmaes_rebuild_keeps_its_optimizer() -> None:
    spec = _spec(NUMERIC.replace("  batch_size: [32, 64, 128]\n", ""))
    search = Search(algorithm="cmaes", trials=40, seed=3, popsize=4)
    straight = SearchSession(spec, search)
    first = _run(straight, 12, batch=1)
    assert any(k.startswith("cma:") for a in first for k in a.system_attrs)
    values = {a.number: _loss(a.params) for a in first}
    stored = straight.study_attrs()  # as the scheduler stores it after each ask
    expected = straight.ask(3)
    restarted = SearchSession(spec, search)
    restarted.rebuild(_records(first, values), stored)
    assert [a.params for a in restarted.ask(3)] == [a.params for a in expected]


def test_qmc_rebuild_goes_on_along_its_sequence() -> None:
    spec = _spec(NUMERIC)
    search = Search(algorithm="qmc", trials=40, seed=3)
    straight = SearchSession(spec, search)
    first = _run(straight, 8, batch=2)
    values = {a.number: _loss(a.params) for a in first}
    stored = straight.study_attrs()  # as the scheduler stores it after each ask
    expected = straight.ask(3)
    restarted = SearchSession(spec, search)
    restarted.rebuild(_records(first, values), stored)
    again = restarted.ask(3)
    assert [a.params for a in again] == [a.params for a in expected]
    assert {a.key for a in first}.isdisjoint({a.key for a in again})


# --- errors -----------------------------------------------------------------------------


def test_cmaes_refuses_a_list_valued_width_naming_it() -> None:
    spec = _spec(MIXED)
    with pytest.raises(SpecError) as info:
        make_sampler(Search(algorithm="cmaes", trials=10), spec.space)
    found = [str(p) for p in info.value.problems]
    assert any(
        p.startswith("model.hidden_units: search.algorithm cmaes cannot take a list-valued")
        for p in found
    )
    assert any(p.startswith("training.momentum.when: search.algorithm cmaes") for p in found)


def test_an_option_of_another_sampler_is_refused_naming_both() -> None:
    with pytest.raises(SpecError) as info:
        make_sampler(Search(algorithm="gp", trials=5, multivariate=True), _spec(NUMERIC).space)
    assert [str(p) for p in info.value.problems] == [
        "search.multivariate: is an option of tpe, but search.algorithm is gp"
    ]


def test_session_refuses_an_adaptive_search_without_a_budget() -> None:
    with pytest.raises(SpecError, match=r"search.trials: is required when search.algorithm is tpe"):
        SearchSession(_spec(NUMERIC), Search(algorithm="tpe"))


# --- pruning ----------------------------------------------------------------------------


def _pruning_session(pruning: Pruning, direction: str = "minimize") -> SearchSession:
    text = NUMERIC + f"objective: {{metric: val_loss, direction: {direction}}}\n"
    return SearchSession(_spec(text), Search(algorithm="random", trials=20, seed=0), pruning)


def _curve(session: SearchSession, number: int, curve: dict[int, float]) -> list[bool]:
    decisions = []
    for epoch, value in curve.items():
        session.report(number, epoch, value)
        decisions.append(session.should_prune(number))
    return decisions


def test_median_prunes_a_curve_worse_than_the_median_after_the_warm_up() -> None:
    session = _pruning_session(Pruning(algorithm="median", n_startup_trials=2, n_warmup_steps=2))
    a, b, bad, good = session.ask(4)
    for asked, curve in ((a, {1: 1.0, 2: 0.8, 3: 0.6}), (b, {1: 1.2, 2: 1.0, 3: 0.9})):
        assert _curve(session, asked.number, curve) == [False, False, False]
        session.tell(asked.number, curve[3])
    # Step 1 is within the warm-up; at step 2, 1.5 is worse than the median 0.9.
    assert _curve(session, bad.number, {0: 9.0, 1: 2.0, 2: 1.5}) == [False, False, True]
    assert _curve(session, good.number, {1: 2.0, 2: 0.85, 3: 0.5}) == [False, False, False]
    session.tell(bad.number, state="pruned")
    pruned = session.study.trials[bad.number]
    assert pruned.state == optuna.trial.TrialState.PRUNED and pruned.value == 1.5


def test_asha_keeps_the_top_half_of_each_rung() -> None:
    session = _pruning_session(
        Pruning(algorithm="asha", metric="val_accuracy", min_resource=1, reduction_factor=2),
    )
    first, second, third = session.ask(3)
    # val_accuracy against a val_loss objective: higher is better for the pruner.
    assert _curve(session, first.number, {1: 0.9}) == [False]
    assert _curve(session, second.number, {1: 0.8}) == [True]  # below 0.9, the best of two
    assert _curve(session, third.number, {1: 0.95}) == [False]
    assert "completed_rung_0" in session.system_attrs(third.number)


def test_threshold_bounds_are_in_the_metrics_own_units_when_flipped() -> None:
    pruning = Pruning(algorithm="threshold", metric="val_accuracy", lower=0.3)
    session = _pruning_session(pruning)
    low, high = session.ask(2)
    assert _curve(session, low.number, {1: 0.2}) == [True]
    assert _curve(session, high.number, {1: 0.5}) == [False]


@pytest.mark.parametrize(
    ("pruning", "kind"),
    [
        (Pruning(), optuna.pruners.NopPruner),
        (Pruning(algorithm="median", n_warmup_steps=3), optuna.pruners.MedianPruner),
        (Pruning(algorithm="percentile", percentile=25.0), optuna.pruners.PercentilePruner),
        (Pruning(algorithm="asha"), optuna.pruners.SuccessiveHalvingPruner),
        (Pruning(algorithm="hyperband", reduction_factor=3), optuna.pruners.HyperbandPruner),
        (Pruning(algorithm="threshold", upper=5.0), optuna.pruners.ThresholdPruner),
        (
            Pruning(algorithm="patient", patience=2, wrapped=Pruning(algorithm="median")),
            optuna.pruners.PatientPruner,
        ),
        (Pruning(algorithm="patient", patience=0), optuna.pruners.PatientPruner),
    ],
)
def test_every_pruner_builds(pruning: Pruning, kind: type) -> None:
    assert isinstance(make_pruner(pruning, epochs=20), kind)


def test_hyperband_takes_the_specs_epochs_as_its_largest_resource() -> None:
    pruner = make_pruner(Pruning(algorithm="hyperband"), epochs=27)
    assert pruner._max_resource == 27  # Optuna keeps it private


def test_a_pruner_option_of_another_pruner_is_refused() -> None:
    with pytest.raises(SpecError) as info:
        make_pruner(Pruning(algorithm="median", reduction_factor=3))
    assert [str(p) for p in info.value.problems] == [
        "pruning.reduction_factor: is an option of asha and hyperband, "
        "but pruning.algorithm is median"
    ]


#: The modules below the scheduler that may import Optuna: where the spec's pruner is built,
#: and where a worker runs it (`workers.pruning`).
PRUNER_MODULES = {"core/spec/pruners.py", "workers/pruning.py"}


def test_workers_dashboard_and_core_never_import_the_search_adapter_and_optuna_only_to_prune() -> (
    None
):
    root = Path(__file__).resolve().parents[2]
    adapter = re.compile(r"^\s*(from|import)\s+scheduler\b", re.MULTILINE)
    optuna = re.compile(r"^\s*(from|import)\s+optuna\b", re.MULTILINE)
    for package in ("workers", "dashboard", "core"):
        for path in (root / package).rglob("*.py"):
            text, name = path.read_text(encoding="utf-8"), str(path.relative_to(root))
            assert not adapter.findall(text), f"{name} imports the scheduler"
            if name not in PRUNER_MODULES:
                assert not optuna.findall(text), f"{name} imports optuna"


def test_fixed_dimensions_are_kept_and_the_others_sampled_and_never_repeated() -> None:
    session = SearchSession(load_spec(MIXED.replace("algorithm: random", "algorithm: tpe")))
    first = session.ask(1)[0]
    fixed = {p: first.params[p] for p in ("model.activation", "training.optimizer")}
    rest = session.ask(12, fixed)
    assert len(rest) == 12
    for asked in rest:
        assert {p: asked.params[p] for p in fixed} == fixed
    assert len({a.key for a in [first, *rest]}) == 13
    assert len({a.params["training.lr"] for a in rest}) == 12  # the free ones still vary
    # The fixed asks are ordinary trials of the study: a rebuilt session replays them.
    again = SearchSession(load_spec(MIXED.replace("algorithm: random", "algorithm: tpe")))
    again.rebuild(
        [Record(a.number, a.params, "running", system_attrs=a.system_attrs) for a in [first, *rest]]
    )
    assert again.asked == 13
    assert {a.key for a in again.ask(3)}.isdisjoint({a.key for a in [first, *rest]})
