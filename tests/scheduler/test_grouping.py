"""Grouping trials for fused training: compatibility, buckets, sizes, order, messages."""

from __future__ import annotations

from typing import Any

import pytest

from core.errors import SpecError
from core.spec.config import TrialConfig
from core.spec.sweep import load_spec, load_spec_file
from scheduler import grouping
from scheduler.cost import (
    TRIAL_SECONDS,
    bucket,
    estimate_seconds,
    model_bytes,
    step_flops,
    step_seconds,
    widths,
)
from scheduler.expand import expand
from scheduler.grouping import (
    AUTO_CAP,
    KEY_FIELDS,
    MAY_DIFFER,
    MIN_GAIN,
    group_limit,
    group_trials,
)
from scheduler.messages import messages
from tests.core.spec.test_spec import CONFIGS


def config(**sections: dict[str, Any]) -> dict[str, Any]:
    """A resolved config as expansion makes it: only the fields a spec gave.

    Groups of at most 64 unless a test says otherwise, so that what may fuse is tested
    apart from `auto`'s choice of sizes."""
    base: dict[str, dict[str, Any]] = {
        "dataset": {"name": "digits"},
        "model": {},
        "training": {"epochs": 5},
        "execution": {"fuse": 64},
    }
    for name, values in sections.items():
        base[name] = {**base[name], **values}
    return base


def groups_of(*configs: dict[str, Any]) -> list[list[int]]:
    found = group_trials((str(i), c) for i, c in enumerate(configs))
    return [[int(t) for t in group] for group in found]


def test_buckets_pad_small_widths_together_and_large_ones_by_at_most_half() -> None:
    assert [bucket(w) for w in (1, 20, 64)] == [64, 64, 64]
    assert [bucket(w) for w in (65, 96, 97, 128, 129, 200)] == [96, 96, 128, 128, 192, 256]
    assert [bucket(w) for w in (512, 513, 768, 769, 1024)] == [512, 768, 768, 1024, 1024]
    for width in range(65, 5000, 7):
        assert width <= bucket(width) <= 1.5 * width


def test_what_may_differ_inside_a_group() -> None:
    varied = [
        config(model={"hidden_units": 20}, training={"lr": 0.1, "seed": 1, "epochs": 5}),
        config(model={"hidden_units": 32, "dropout": 0.3, "init": "orthogonal"}),
        config(training={"weight_decay": 0.1, "momentum": 0.5, "beta1": 0.8, "beta2": 0.9}),
        config(training={"lr_schedule": "step", "lr_gamma": 0.5}, execution={"time_limit": 9}),
        config(model={"hidden_units": [64, 17]}),
    ]
    # One group, members sorted by their widths (so a chunk pads as little as it can).
    assert groups_of(*varied) == [[0, 1, 4, 2, 3]]


@pytest.mark.parametrize(
    "change",
    [
        {"dataset": {"name": "digits", "split_seed": 1}},
        {"dataset": {"name": "wine"}},
        {"model": {"hidden_layers": 3}},
        {"model": {"hidden_units": 65}},
        {"model": {"activation": "tanh"}},
        {"model": {"batch_norm": True}},
        {"training": {"optimizer": "sgd", "epochs": 5}},
        {"training": {"batch_size": 32, "epochs": 5}},
        {"training": {"epochs": 6}},
        {"execution": {"dtype": "float64"}},
        {"execution": {"device": "cpu"}},
        {"execution": {"fuse": 8}},
    ],
)
def test_what_must_be_shared(change: dict[str, Any]) -> None:
    assert groups_of(config(), config(), config(**change), config(**change)) == [[0, 1], [2, 3]]


@pytest.mark.parametrize(
    "alone",
    [
        {"execution": {"fuse": "off"}},
        {"execution": {"fuse": 1}},
        {"training": {"epochs": 0}},
        {"execution": {"dtype": "float16"}},
    ],
)
def test_trials_never_fused(alone: dict[str, Any]) -> None:
    assert groups_of(config(**alone), config(**alone)) == [[0], [1]]
    assert group_limit(config(**alone)) == 1


def test_data_parallel_trials_are_never_fused() -> None:
    parallel = config(execution={"parallel": {"world_size": 2, "strategy": "local_sgd"}})
    assert group_limit(parallel) == 1
    assert groups_of(parallel, parallel, config(), config()) == [[0], [1], [2, 3]]
    spec = load_spec(
        "name: t\ndataset: {name: digits}\ntraining: {seed: [0, 1]}\n"
        "execution:\n  parallel:\n    world_size: 2\n    tau: [1, 5, 20]\n"
    )
    sent = messages("s1", expand(spec, with_config=True))
    assert len(sent) == 6 and all(isinstance(m[0], str) for m in sent)


def test_on_one_process_the_parallel_settings_do_nothing_to_grouping() -> None:
    one = [
        config(execution={"parallel": {"world_size": 1, "tau": tau, "strategy": strategy}})
        for tau, strategy in ((1, "local_sgd"), (50, "easgd"), (10, "allreduce"))
    ]
    assert groups_of(*one, config()) == [[0, 1, 2, 3]]


def test_every_field_named_exists() -> None:
    sections = {name: TrialConfig.model_fields[name].annotation for name in ("model", "training")}
    sections["execution"] = TrialConfig.model_fields["execution"].annotation
    for path in (*MAY_DIFFER, *KEY_FIELDS):
        section, key = path.split(".")
        assert key in sections[section].model_fields, path  # type: ignore[union-attr]


def test_a_field_added_later_keeps_trials_that_set_it_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As if model.dropout were new: grouping cannot know whether the fused trainer honours it.
    monkeypatch.setattr(grouping, "_UNKNOWN", ("model.dropout",))
    assert groups_of(config(), config()) == [[0, 1]]
    assert groups_of(config(model={"dropout": 0.5}), config(model={"dropout": 0.5})) == [[0], [1]]


def test_an_explicit_k_caps_groups_and_splits_evenly() -> None:
    trials = [config(execution={"fuse": 4}, training={"seed": s, "epochs": 5}) for s in range(10)]
    sizes = [len(g) for g in groups_of(*trials)]
    assert sizes == [4, 3, 3]
    assert sum(sizes) == 10


def auto(device: str, layers: int, width: int, **training: Any) -> dict[str, Any]:
    """A trial fused with ``auto`` on `device`, of `layers` x `width` units."""
    return config(
        model={"hidden_layers": layers, "hidden_units": width},
        training={"epochs": 20, **training},
        execution={"device": device, "fuse": "auto"},
    )


def test_auto_is_capped_from_memory_and_on_cuda_memory_alone_decides() -> None:
    small, huge = auto("cuda", 2, 64), auto("cuda", 5, 2048)
    assert group_limit(small) == AUTO_CAP
    assert 1 <= group_limit(huge) < AUTO_CAP
    assert model_bytes(huge) * group_limit(huge) <= 2 * 1024**3
    assert model_bytes(config(execution={"dtype": "float64"})) > model_bytes(config())
    trials = [auto("cuda", 2, 64, seed=s) for s in range(AUTO_CAP + 6)]
    assert [len(g) for g in groups_of(*trials)] == [35, 35]
    # Where a GPU trains them, compute-bound models are fused too.
    assert groups_of(*(auto("cuda", 5, 1024, seed=s) for s in range(3))) == [[0, 1, 2]]


@pytest.mark.parametrize("device", ["cpu", "auto"])
def test_compute_bound_members_are_never_fused_on_a_cpu(device: str) -> None:
    for layers, width in ((5, 1024), (2, 1024), (3, 256)):
        trials = [auto(device, layers, width, seed=s) for s in range(16)]
        assert groups_of(*trials) == [[i] for i in range(16)], (layers, width)
        flops = step_flops(trials[0], [width] * layers)
        # ... because the model says two of them fused take longer than both alone:
        assert step_seconds(layers, flops, 2) * MIN_GAIN > 2 * step_seconds(layers, flops, 1)


def test_small_members_are_fused_and_gain() -> None:
    trials = [auto("cpu", 2, width, lr=lr, seed=s) for width in (16, 64) for lr in (0.1, 0.01)
              for s in range(16)]  # fmt: skip
    groups = groups_of(*trials)
    assert sorted(i for g in groups for i in g) == list(range(64))
    assert min(len(g) for g in groups) >= 8
    configs = dict(enumerate(trials))
    fused = sum(estimate_seconds([configs[i] for i in g]) for g in groups)
    alone = sum(estimate_seconds([c]) for c in trials)
    assert alone >= 2.5 * fused


@pytest.mark.parametrize("workers", [1, 2, 4, 8])
def test_auto_makes_at_least_as_many_groups_as_workers_when_trials_allow(workers: int) -> None:
    trials = [auto("cpu", 2, 32, seed=s) for s in range(64)]
    groups = group_trials(((str(i), c) for i, c in enumerate(trials)), workers=workers)
    assert len(groups) >= workers
    sizes = [len(g) for g in groups]
    assert max(sizes) - min(sizes) <= 1
    if workers == 1:  # one worker: nothing to balance, the cheapest size wins
        assert len(groups) == 1


def test_a_group_too_small_to_gain_stays_apart() -> None:
    # Two narrow models whose padding (16 -> 64) and fused overhead eat the gain.
    pair = [auto("cpu", 1, 16), auto("cpu", 1, 64)]
    both = estimate_seconds(pair)
    alone = sum(estimate_seconds([c]) for c in pair)
    assert groups_of(*pair) == ([[0, 1]] if both * MIN_GAIN <= alone else [[0], [1]])


def test_the_estimate_grows_with_work() -> None:
    one = estimate_seconds([auto("cpu", 2, 64)])
    assert estimate_seconds([auto("cpu", 2, 64, epochs=40)]) > 1.9 * one - TRIAL_SECONDS
    assert estimate_seconds([auto("cpu", 4, 1024)]) > 10 * one
    group = [auto("cpu", 2, 64, seed=s) for s in range(8)]
    assert one < estimate_seconds(group) < 8 * one
    assert estimate_seconds([]) == 0


def test_groups_come_in_expansion_order_with_similar_widths_together() -> None:
    trials = [
        config(model={"activation": "tanh"}),
        config(model={"hidden_units": 64}, execution={"fuse": 2}),
        config(model={"hidden_units": 20}, execution={"fuse": 2}),
        config(model={"hidden_units": 60}, execution={"fuse": 2}),
        config(model={"hidden_units": 24}, execution={"fuse": 2}),
        config(model={"activation": "tanh"}),
    ]
    assert groups_of(*trials) == [[0, 5], [3, 1], [2, 4]]


def test_mcleod_groups_and_messages() -> None:
    spec = load_spec_file(CONFIGS / "mcleod-digits.yaml")
    trials = expand(spec, with_config=True)
    sent = messages("s1", trials, workers=2)
    ids = [i for m in sent for i in ([m[0]] if isinstance(m[0], str) else m[0])]
    assert sorted(ids) == sorted(f"s1-{t.id}" for t in trials)
    by_id = {f"s1-{t.id}": t.config for t in trials}
    # Wide models train alone; narrow ones of one depth and activation are fused.
    for ids, limit, *_ in sent:
        group = [ids] if isinstance(ids, str) else ids
        assert limit == len(group) * 1800.0
        if len(group) > 1:
            assert max(max(widths(by_id[i])) for i in group) <= 256
    assert all(
        isinstance(ids, str)
        for ids, *_ in sent
        if max(widths(by_id[ids if isinstance(ids, str) else ids[0]])) >= 512
    )
    assert 90 < len(sent) < 360


def test_the_demo_is_fused_only_where_the_model_says_it_gains() -> None:
    # One trial per depth, width and activation: the only candidates are pairs of 16 and
    # 64 units (one bucket), which the padding and the fused overhead leave without gain.
    trials = expand(load_spec_file(CONFIGS / "mcleod-demo.yaml"), with_config=True)
    configs = {f"s1-{t.id}": t.config for t in trials}
    groups = [[ids] if isinstance(ids, str) else ids for ids, *_ in messages("s1", trials, 2)]
    for group in groups:
        members = [configs[i] for i in group]
        alone = sum(estimate_seconds([c]) for c in members)
        assert len(group) == 1 or estimate_seconds(members) * MIN_GAIN <= alone


def test_fuse_off_sends_one_message_per_trial() -> None:
    spec = load_spec(
        "name: t\ndataset: {name: digits}\nmodel: {hidden_units: [16, 32]}\n"
        "training: {seed: [0, 1, 2]}\nexecution: {fuse: off, time_limit: 60}\n"
    )
    sent = messages("s1", expand(spec, with_config=True))
    assert len(sent) == 6 and all(isinstance(ids, str) and limit == 60 for ids, limit, *_ in sent)


@pytest.mark.parametrize("value", ["sometimes", 0, 2000, 1.5, True])
def test_fuse_is_validated_naming_the_field(value: Any) -> None:
    with pytest.raises(SpecError) as caught:
        load_spec({"name": "t", "dataset": {"name": "digits"}, "execution": {"fuse": value}})
    (problem,) = caught.value.problems
    assert str(problem).startswith(
        "execution.fuse: must be off, auto or a group size from 1 to 1024, got "
    )


def test_an_adaptive_group_shares_every_key_dimension_and_widths_across_buckets() -> None:
    small = load_spec_file("configs/small-nets-search.yaml")
    assert grouping.shared_dimensions(small.space) == {"model.activation", "training.batch_size"}
    mcleod = load_spec_file("configs/mcleod-search.yaml")
    assert grouping.shared_dimensions(mcleod.space) == {
        "model.activation",
        "model.hidden_layers",
        "model.hidden_units",  # 16 ... 1024: five buckets
        "training.batch_size",
    }


def _config(changes: dict[str, Any] | None = None) -> dict[str, Any]:
    spec = load_spec_file("configs/small-nets-search.yaml")
    params = {
        "model.hidden_units": 32,
        "model.activation": "relu",
        "training.lr": 0.01,
        "training.batch_size": 64,
    }
    config = spec.seeded_config(params, 0, spec.base_config())
    for path, value in (changes or {}).items():
        section, key = path.split(".")
        config[section][key] = value
    return config


def test_an_adaptive_group_is_as_large_as_fusing_gains() -> None:
    assert grouping.fused_size(_config(), 8) == 8  # 2 x 32 on a CPU: fusing gains most
    assert grouping.fused_size(_config(), 3) == 3  # the cap
    wide = _config({"model.hidden_layers": 4, "model.hidden_units": 1024})
    assert grouping.fused_size(wide, 8) == 1  # compute-bound: alone
    assert grouping.fused_size(_config({"execution.fuse": "off"}), 8) == 1
    assert grouping.fused_size(_config({"execution.fuse": 4}), 8) == 4  # taken as it is
    assert grouping.fused_size(_config({"training.epochs": 0}), 8) == 1


@pytest.mark.parametrize(
    ("sections", "fused"),
    [
        ({"model": {"hidden_units": 32}}, True),  # a small net on a CPU: a group of one
        ({"model": {"hidden_units": 1024}}, False),  # compute-bound: trains alone
        ({"model": {"hidden_units": 32}, "execution": {"fuse": "off"}}, False),
        ({"model": {"hidden_units": 32}, "execution": {"parallel": {"world_size": 2}}}, False),
    ],
)
def test_a_lone_small_net_goes_as_a_fused_group_of_one(
    sections: dict[str, Any], fused: bool
) -> None:
    from scheduler.expand import TrialPoint

    base = config(
        execution={"fuse": "auto", "device": "cpu"},
        **{k: v for k, v in sections.items() if k != "execution"},
    )
    base["execution"].update(sections.get("execution", {}))
    point = TrialPoint(index=0, id="a", params={}, seed=0, config=base)
    (sent,) = messages("s1", [point], workers=2)
    assert isinstance(sent[0], list) is fused
    assert sent[0] == (["s1-a"] if fused else "s1-a")
    if fused:
        assert sent[2]["configs"] == [base] and "sequential" not in sent[2]
