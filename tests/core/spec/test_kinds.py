"""The trial kinds behind one interface (`core.spec.kind`, `core.spec.kinds`): `kind_of`
picks the kind of a document, a spec and a trial's config; each kind's answers (validation,
cost, grouping, trainer, description) are what the scheduler, the limits and the worker used
to work out from a config's keys; and no module but a kind's own reads those keys."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.errors import SpecError
from core.settings import Settings
from core.spec.caffe.cost import config_work
from core.spec.caffe.spec import CaffeSpec
from core.spec.caffe.trial import CaffeTrialConfig
from core.spec.config import TrialConfig
from core.spec.kind import TrialKind
from core.spec.kinds import CAFFE, KINDS, MLP, PARAMETER_ROOTS, TRAINABLE, kind_of
from core.spec.spec import SweepSpec
from core.spec.sweep import load_spec
from core.spec.trainable import TrainableConfig, TrainableSpec
from scheduler.chunks import chunkable
from scheduler.cost import (
    FLOPS_PER_SECOND,
    LAYER_STEP_SECONDS,
    TRIAL_SECONDS,
    UnitCost,
    estimate_seconds,
    step_flops,
    widths,
)
from scheduler.expand import expand
from scheduler.grouping import group_limit
from scheduler.order import STEP_OVERHEAD_FLOPS, steps, trial_cost

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = ROOT / "configs"
BUILTIN = "name: b\ndataset: {name: iris}\nmodel: {hidden_units: [8, 16]}\ntraining: {epochs: 2}\n"
FUNCTION = "name: f\ntrainable: digits_cnn\ndataset: {name: digits}\nparams: {lr: [0.1, 0.01]}\n"


def _configs(spec: SweepSpec) -> list[dict[str, Any]]:
    return [t.config for t in expand(spec, with_config=True)]


@pytest.fixture(scope="module")
def lenet() -> SweepSpec:
    return load_spec(CONFIGS / "caffe-lenet.yaml")


def test_every_kind_answers_the_interface_once() -> None:
    assert all(isinstance(kind, TrialKind) for kind in KINDS)
    assert [kind.name for kind in KINDS] == ["trainable", "caffe", "mlp"]
    assert KINDS[-1] is MLP  # the built-in network claims what the others leave
    assert len({kind.trainer for kind in KINDS}) == len(KINDS)
    assert repr(CAFFE) == "<CaffeKind 'caffe'>"


def test_kind_of_a_document_a_spec_and_a_trial_config(lenet: SweepSpec) -> None:
    assert kind_of({"name": "x", "trainable": "digits_cnn"}) is TRAINABLE
    assert kind_of({"name": "x", "caffe": {}}) is CAFFE
    assert kind_of({"name": "x", "dataset": {"name": "iris"}}) is MLP
    assert kind_of({}) is MLP
    assert kind_of(lenet) is CAFFE
    assert kind_of(load_spec(FUNCTION)) is TRAINABLE
    assert kind_of(load_spec(BUILTIN)) is MLP
    assert {kind_of(c) for c in _configs(lenet)} == {CAFFE}
    assert {kind_of(c) for c in _configs(load_spec(FUNCTION))} == {TRAINABLE}
    assert {kind_of(c) for c in _configs(load_spec(BUILTIN))} == {MLP}
    assert kind_of(None) is MLP  # type: ignore[arg-type]  # no mapping: the built-in rules refuse it


def test_each_kind_loads_its_own_spec_and_validates_its_own_configs(lenet: SweepSpec) -> None:
    assert isinstance(lenet, CaffeSpec)
    assert isinstance(load_spec(FUNCTION), TrainableSpec)
    builtin = load_spec(BUILTIN)
    assert type(builtin) is SweepSpec
    assert (MLP.config_model, CAFFE.config_model, TRAINABLE.config_model) == (
        TrialConfig, CaffeTrialConfig, TrainableConfig,
    )  # fmt: skip
    for spec in (lenet, load_spec(FUNCTION), builtin):
        kind = kind_of(spec)
        for config in _configs(spec):
            kind.config_model.model_validate(config)
    # The kind's loader is what `load_spec` runs: the same problems either way.
    document = {"name": "b", "dataset": {"name": "iris"}, "model": {"hidden_units": -1}}
    with pytest.raises(SpecError) as direct:
        MLP.load_spec(document)
    with pytest.raises(SpecError) as front:
        load_spec(document)
    assert direct.value.problems == front.value.problems


def test_a_caffe_spec_file_reads_its_net_through_its_kind() -> None:
    path = CONFIGS / "caffe-lenet.yaml"
    document = yaml.safe_load(path.read_text())
    spec = CAFFE.load_spec(document, path)
    assert isinstance(spec, CaffeSpec) and spec.net_source.endswith("lenet_train_test.prototxt")
    assert spec.net_text == (CONFIGS / "caffe" / "lenet_train_test.prototxt").read_text()
    with pytest.raises(SpecError) as caught:
        CAFFE.load_spec(document)  # from no file, as the API: no path is read
    assert "caffe.solver" in {p.path for p in caught.value.problems}


def test_only_the_built_in_network_fuses_and_shares_messages(lenet: SweepSpec) -> None:
    assert (MLP.fuses, MLP.chunks) == (True, True)
    for kind in (CAFFE, TRAINABLE):
        assert (kind.fuses, kind.chunks) == (False, False)
    # What grouping and chunking made of the keys before: a trainable or a Caffe config
    # trains alone, in its own message; the built-in config is theirs to decide.
    for config in _configs(lenet) + _configs(load_spec(FUNCTION)):
        assert group_limit(config) == 1 and not chunkable(config)
    (config, *_) = _configs(load_spec(BUILTIN))
    assert group_limit(config) > 1 and chunkable(config)


def test_a_caffe_trial_costs_its_graph_as_the_scheduler_counted_it(lenet: SweepSpec) -> None:
    (config,) = _configs(lenet)
    work = CAFFE.work(config)
    assert work == config_work(config)
    assert trial_cost(config) == float(work.steps * STEP_OVERHEAD_FLOPS + 2 * work.macs)
    seconds = (
        work.steps * work.layers * LAYER_STEP_SECONDS
        + 2 * work.macs / FLOPS_PER_SECOND
        + TRIAL_SECONDS
    )
    assert estimate_seconds([config]) == seconds


@pytest.mark.parametrize("text", [BUILTIN, FUNCTION])
def test_other_trials_cost_the_built_in_networks_model(text: str) -> None:
    """A built-in trial, and a training function's (the scheduler's one guess without
    running it), are priced from widths, data and epochs, as before the kinds."""
    for config in _configs(load_spec(text)):
        assert kind_of(config).work(config) is None
        flops = STEP_OVERHEAD_FLOPS + step_flops(config)
        assert trial_cost(config) == float(steps(config) * flops)
        assert estimate_seconds([config]) == UnitCost(config).seconds([widths(config)])


def test_what_each_kind_says_of_itself() -> None:
    assert PARAMETER_ROOTS == ("params", "caffe.layers", "caffe.solver_params")
    assert MLP.parameter_roots == ()
    assert (MLP.counts_parameters, CAFFE.counts_parameters) == (True, True)
    assert not TRAINABLE.counts_parameters  # the function's model is its own
    assert [kind.name for kind in KINDS if kind.image_folders] == ["caffe"]


def test_each_kind_says_what_this_host_and_server_refuse(lenet: SweepSpec) -> None:
    (problem,) = TRAINABLE.host_problems(load_spec("name: t\ntrainable: nope\n"))
    assert problem.path == "trainable" and "no training function 'nope'" in problem.message
    assert MLP.host_problems(load_spec(BUILTIN)) == CAFFE.host_problems(lenet) == []
    small = dataclasses.replace(Settings(), max_model_parameters=10, max_prototxt_bytes=10)
    (problem,) = MLP.limit_problems(load_spec(BUILTIN), small)
    assert problem.path == "model.hidden_units"
    assert problem.message.startswith("the model's parameters must be <= 10 on this server")
    assert [p.path for p in CAFFE.limit_problems(lenet, small)] == [
        "caffe.net_text", "caffe.solver_text", "caffe.net_text",
    ]  # fmt: skip
    (problem,) = TRAINABLE.limit_problems(load_spec(FUNCTION), small)  # digits_cnn declares it
    assert problem.path == "params"  # no parameter of the spec lowers it
    assert "got 17,258 (as sweepstack_examples.digits_cnn declares it" in problem.message
    assert TRAINABLE.limit_problems(load_spec(FUNCTION), Settings()) == []
    assert MLP.limit_problems(load_spec(BUILTIN), Settings()) == []


#: What tells a document's kind by its keys; only a kind's own module may say it.
_KIND_CHECK = re.compile(r'"caffe" in|"trainable" in|is_caffe|is_trainable')
_KIND_MODULES = {"core/spec/caffe/kind.py", "core/spec/trainable.py", "core/spec/mlp.py"}


def test_only_the_kinds_modules_tell_kinds_apart_by_their_keys() -> None:
    found = {
        str(path.relative_to(ROOT))
        for package in ("core", "scheduler", "workers", "web", "api", "dashboard", "cli")
        for path in (ROOT / package).rglob("*.py")
        if _KIND_CHECK.search(path.read_text())
    }
    assert found <= _KIND_MODULES, sorted(found - _KIND_MODULES)
