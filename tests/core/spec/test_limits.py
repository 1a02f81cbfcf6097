"""The server's limits on a spec (`core.spec.limits`): the datasets folder and the ceilings."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from core.errors import SpecError
from core.settings import Settings
from core.spec.limits import OutsideDatasets, check_spec_limits, confine, spec_limit_problems
from core.spec.strings import string_problems
from core.spec.sweep import load_spec

BASE = "name: t\ndataset: {name: digits}\n"


def limits(text: str, **settings: object) -> list[str]:
    chosen = dataclasses.replace(Settings(), **settings)
    return [str(p) for p in spec_limit_problems(load_spec(text), chosen)]


def test_shipped_configs_are_within_the_default_limits() -> None:
    configs = Path(__file__).resolve().parents[3] / "configs"
    for path in configs.glob("*.yaml"):
        check_spec_limits(load_spec(path), Settings())


def test_confine_follows_symlinks_both_ways(tmp_path: Path) -> None:
    root, other = tmp_path / "root", tmp_path / "other"
    root.mkdir()
    other.mkdir()
    (root / "in.csv").write_text("")
    (root / "link-in.csv").symlink_to(root / "in.csv")
    (root / "link-out.csv").symlink_to(other / "x.csv")
    (tmp_path / "alias").symlink_to(root)  # the folder itself behind a link
    assert confine("in.csv", root) == (root / "in.csv").resolve()
    assert confine("link-in.csv", tmp_path / "alias") == (root / "in.csv").resolve()
    assert confine(str(tmp_path / "alias" / "in.csv"), root) == (root / "in.csv").resolve()
    assert confine("not-yet.csv", root) == (root / "not-yet.csv").resolve()
    for bad in ("link-out.csv", str(other / "x.csv"), "../other/x.csv", "~/x.csv", "a\x00.csv"):
        with pytest.raises(OutsideDatasets):
            confine(bad, root)


def test_the_parameter_estimate_uses_the_largest_model_and_data() -> None:
    # digits: 64 features, 10 classes; 3 layers of 2000: 64*2000 + 2*2000*2000 + 2000*10 + b.
    text = BASE + "model:\n  hidden_layers: [1, 3]\n  hidden_units: [10, 2000]\n"
    assert limits(text, max_model_parameters=8_154_010) == []
    (problem,) = limits(text, max_model_parameters=8_154_009)
    assert problem.startswith("model.hidden_units: the model's parameters must be <= 8,154,009")
    assert "(hidden_layers 3 x hidden_units 2000, 64 features, 10 outputs)" in problem


def test_a_conditional_dimension_counts_the_default_too() -> None:
    # world_size is 1 when the condition fails, 16 when it holds: the largest is 16.
    text = BASE + (
        "training:\n  optimizer: [sgd, adam]\n"
        "execution:\n  parallel:\n    world_size: {value: 16, when: {training.optimizer: sgd}}\n"
    )
    assert limits(text) == [
        "execution.parallel.world_size: processes per trial must be <= 8 on this server "
        "(SWEEPSTACK_MAX_WORLD_SIZE), got 16"
    ]


def test_files_skip_what_only_the_worker_knows(tmp_path: Path) -> None:
    text = f"name: t\ndataset: {{path: {tmp_path}/d.csv}}\ntraining: {{epochs: 100000}}\n"
    assert limits(text, datasets_dir=tmp_path, max_epoch_samples=1) == []


def test_every_problem_is_listed_at_once() -> None:
    text = (
        "name: t\ndescription: long\n"
        "dataset: {name: synthetic_classification, samples: 1000000, features: 1000}\n"
        "execution: {parallel: {world_size: 64}}\n"
    )
    small = dataclasses.replace(Settings(), max_description_bytes=3, max_epoch_samples=10**6)
    with pytest.raises(SpecError) as info:
        check_spec_limits(load_spec(text), small)
    assert [p.path for p in info.value.problems] == [
        "description",
        "execution.parallel.world_size",
        "dataset.samples",
        "training.epochs",
    ]


def test_free_strings_are_held_to_the_string_ceiling() -> None:
    # Every string and key but the description and the prototxt texts (which have their own).
    text = (
        "name: t\ndescription: " + "d" * 50 + "\n"
        "dataset: {path: d.csv, target: [y, " + "t" * 41 + "]}\n"
    )
    assert limits(text, max_string_bytes=40, max_description_bytes=100) == [
        "dataset.target: the UTF-8 bytes of one of its values must be <= 40 on this server "
        "(SWEEPSTACK_MAX_STRING_BYTES), got 41",
    ]
    assert limits(text, max_string_bytes=41, max_description_bytes=100) == []


def test_string_problems_name_the_parameter_not_the_dimension_form() -> None:
    document = {
        "params": {
            "a": {"choice": ["x", "y" * 13]},
            "b": {"value": "z" * 13, "when": {"p": ["w" * 13]}},
        },
        "caffe": {"net_text": "n" * 99, "solver_text": "s" * 99},
        "k" * 13: 1,
    }
    paths = [p.path for p in string_problems(document, 12)]
    assert paths == ["params.a", "params.b", "params.b.when.p", "(document)"]
