"""Chunks of cheap trials: which trials share a message, how many, and what is sent."""

from __future__ import annotations

from typing import Any

import pytest

from core.spec.sweep import load_spec
from scheduler import chunks
from scheduler.chunks import (
    CHEAP_SECONDS,
    CHUNK_SECONDS,
    CHUNK_TRIALS,
    UNITS_PER_WORKER,
    chunk_units,
    chunkable,
    training_seconds,
)
from scheduler.expand import expand
from scheduler.messages import messages


def config(**sections: dict[str, Any]) -> dict[str, Any]:
    """A resolved config as expansion makes it (only the fields a spec gave): a one-epoch
    iris trial, far below `CHEAP_SECONDS`, under the default ``fuse: auto``."""
    base: dict[str, dict[str, Any]] = {
        "dataset": {"name": "iris"},
        "model": {},
        "training": {"epochs": 1},
        "execution": {},
    }
    for name, values in sections.items():
        base[name] = {**base[name], **values}
    return base


def lone(configs: list[dict[str, Any]], workers: int = 2) -> list[tuple[list[str], bool]]:
    units = [[str(i)] for i in range(len(configs))]
    return chunk_units(units, {str(i): c for i, c in enumerate(configs)}, workers)


def test_cheap_lone_trials_share_messages_and_every_trial_goes_once_in_order() -> None:
    out = lone([config(training={"epochs": 1, "seed": i}) for i in range(400)], workers=2)
    ids = [trial for unit, _ in out for trial in unit]
    assert ids == [str(i) for i in range(400)]
    assert all(sequential == (len(unit) > 1) for unit, sequential in out)
    assert max(len(unit) for unit, _ in out) == CHUNK_TRIALS
    assert len(out) >= 2 * UNITS_PER_WORKER


def test_a_chunk_holds_at_most_chunk_seconds_of_estimated_training() -> None:
    slow = config(dataset={"name": "digits"}, model={"hidden_units": 32}, training={"epochs": 8})
    seconds = training_seconds(slow)
    assert 0.5 * CHEAP_SECONDS < seconds <= CHEAP_SECONDS
    out = lone([slow] * 100, workers=1)
    assert all(len(unit) * seconds <= CHUNK_SECONDS + 1e-9 for unit, _ in out)
    assert max(len(unit) for unit, _ in out) == int(CHUNK_SECONDS // seconds)


def test_few_trials_stay_one_per_message_so_that_no_worker_starves() -> None:
    few = [config(training={"epochs": 1, "seed": i}) for i in range(2 * UNITS_PER_WORKER)]
    assert lone(few, workers=2) == [([str(i)], False) for i in range(len(few))]
    # Twice as many: pairs, and never fewer units than the workers want.
    some = [config(training={"epochs": 1, "seed": i}) for i in range(4 * UNITS_PER_WORKER)]
    out = lone(some, workers=2)
    assert len(out) == 2 * UNITS_PER_WORKER and all(seq and len(u) == 2 for u, seq in out)


@pytest.mark.parametrize(
    "sections",
    [
        {"execution": {"fuse": "off"}},
        {"execution": {"fuse": 8}},
        {"execution": {"parallel": {"world_size": 2}}},
        {"model": {"hidden_units": 1024, "hidden_layers": 3}, "training": {"epochs": 20}},
    ],
    ids=["fuse off", "fuse 8", "data-parallel", "expensive"],
)
def test_trials_that_must_go_alone_are_never_chunked(sections: dict[str, Any]) -> None:
    out = lone([config(**sections) for _ in range(100)], workers=1)
    assert out == [([str(i)], False) for i in range(100)]


def test_a_users_function_or_a_caffe_net_is_never_chunked() -> None:
    assert not chunkable({"trainable": "digits_cnn", "params": {}, "execution": {}})
    assert not chunkable({"caffe": {"net_text": "", "solver_text": ""}, "execution": {}})
    assert chunkable(config())


def test_fused_groups_are_left_as_they_are_and_cheap_singles_around_them_are_chunked() -> None:
    configs = {str(i): config(training={"epochs": 1, "seed": i}) for i in range(60)}
    units = [["0", "1", "2"], *[[str(i)] for i in range(3, 60)]]
    out = chunk_units(units, configs, workers=1)
    assert out[0] == (["0", "1", "2"], False)
    assert [t for unit, _ in out[1:] for t in unit] == [str(i) for i in range(3, 60)]
    assert all(seq for unit, seq in out[1:] if len(unit) > 1)


def test_messages_mark_chunks_sequential_with_the_sum_of_their_time_limits() -> None:
    spec = load_spec(
        "name: tiny\ndataset: {name: iris}\nexecution: {time_limit: 10}\n"
        "training: {epochs: 0, seed: {int: [1, 100]}}\n"
    )
    out = messages("s1", expand(spec, with_config=True), workers=2)
    groups = [m for m in out if isinstance(m[0], list)]
    assert groups and sum(len(m[0]) for m in groups) + (len(out) - len(groups)) == 100
    for ids, limit, kwargs in groups:  # type: ignore[misc]
        assert kwargs["sequential"] is True and limit == 10 * len(ids)
        assert len(kwargs["configs"]) == len(ids) and kwargs["attempts"] == [0] * len(ids)
        assert all(i.startswith("s1-") for i in ids)


def test_a_fuse_off_sweep_sends_one_message_per_trial_as_before() -> None:
    spec = load_spec(
        "name: tiny-off\ndataset: {name: iris}\nexecution: {fuse: off}\n"
        "training: {epochs: 0, seed: {int: [1, 50]}}\n"
    )
    out = messages("s2", expand(spec, with_config=True), workers=2)
    assert len(out) == 50 and all(isinstance(m[0], str) for m in out)
    assert all("sequential" not in m[2] for m in out)  # type: ignore[misc]


def test_the_limits_are_sane() -> None:
    assert 0 < CHEAP_SECONDS <= CHUNK_SECONDS and CHUNK_TRIALS >= 2 and UNITS_PER_WORKER >= 2
    assert chunks.training_seconds(config(training={"epochs": 0})) <= CHEAP_SECONDS
