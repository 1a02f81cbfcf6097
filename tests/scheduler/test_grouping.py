"""Grouping trials for fused training: compatibility, buckets, sizes, order, messages."""

from __future__ import annotations

from typing import Any

import pytest

from core.config import TrialConfig
from core.errors import SpecError
from core.spec import load_spec, load_spec_file
from scheduler import grouping
from scheduler.expand import expand
from scheduler.grouping import (
    AUTO_CAP,
    CPU_STEP_FLOPS,
    KEY_FIELDS,
    MAY_DIFFER,
    bucket,
    group_limit,
    group_trials,
    model_bytes,
    step_flops,
)
from scheduler.submit import messages
from tests.core.test_spec import CONFIGS


def config(**sections: dict[str, Any]) -> dict[str, Any]:
    """A resolved config as expansion makes it: only the fields a spec gave."""
    base: dict[str, dict[str, Any]] = {
        "dataset": {"name": "digits"},
        "model": {},
        "training": {"epochs": 5},
        "execution": {},
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
    assert len(sent) == 6 and all(isinstance(ids, str) for ids, _, _ in sent)


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


def test_auto_is_sized_from_memory_and_capped() -> None:
    small = config(model={"hidden_units": 64})
    huge = config(model={"hidden_layers": 5, "hidden_units": 2048})
    assert group_limit(small) == AUTO_CAP
    assert 1 <= group_limit(huge) < AUTO_CAP
    assert model_bytes(huge) * group_limit(huge) <= 2 * 1024**3
    assert model_bytes(config(execution={"dtype": "float64"})) > model_bytes(config())
    trials = [config(training={"seed": s, "epochs": 5}) for s in range(AUTO_CAP + 6)]
    assert [len(g) for g in groups_of(*trials)] == [35, 35]


def test_on_a_cpu_compute_bound_models_are_fused_less_or_not_at_all() -> None:
    def on(device: str, layers: int, width: int) -> dict[str, Any]:
        return config(
            model={"hidden_layers": layers, "hidden_units": width}, execution={"device": device}
        )

    assert group_limit(on("cpu", 2, 64)) == AUTO_CAP
    assert group_limit(on("cpu", 5, 256)) == 2
    assert group_limit(on("cpu", 5, 1024)) == 1
    assert step_flops(on("cpu", 5, 1024)) > CPU_STEP_FLOPS
    trials = [on("cpu", 5, 1024) for _ in range(3)]
    assert groups_of(*trials) == [[0], [1], [2]]
    # Where a GPU may train them, memory alone decides.
    assert group_limit(on("auto", 5, 1024)) == group_limit(on("cuda", 5, 1024)) > 1
    assert groups_of(*(on("auto", 5, 1024) for _ in range(3))) == [[0, 1, 2]]


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
    sent = messages("s1", trials)
    ids = [i for ids, _, _ in sent for i in ([ids] if isinstance(ids, str) else ids)]
    assert sorted(ids) == sorted(f"s1-{t.id}" for t in trials)
    # Seeds always fuse; widths 16-64 share a bucket: 5 depths x 3 activations x 6 buckets.
    assert len(sent) == 90
    assert sorted({len(ids) for ids, _, _ in sent}) == [3, 9]
    assert {limit for ids, limit, _ in sent} == {3 * 1800.0, 9 * 1800.0}


def test_fuse_off_sends_one_message_per_trial() -> None:
    spec = load_spec(
        "name: t\ndataset: {name: digits}\nmodel: {hidden_units: [16, 32]}\n"
        "training: {seed: [0, 1, 2]}\nexecution: {fuse: off, time_limit: 60}\n"
    )
    sent = messages("s1", expand(spec, with_config=True))
    assert len(sent) == 6 and all(isinstance(ids, str) and limit == 60 for ids, limit, _ in sent)


@pytest.mark.parametrize("value", ["sometimes", 0, 2000, 1.5, True])
def test_fuse_is_validated_naming_the_field(value: Any) -> None:
    with pytest.raises(SpecError) as caught:
        load_spec({"name": "t", "dataset": {"name": "digits"}, "execution": {"fuse": value}})
    (problem,) = caught.value.problems
    assert str(problem).startswith(
        "execution.fuse: must be off, auto or a group size from 1 to 1024, got "
    )
