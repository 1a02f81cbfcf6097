"""Caffe specs (`core.spec.caffe.spec`): the files the CLI reads, the dimensions over a net and a
solver in every form, what each trial's texts hold, and every refusal with where it points."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cli.main import main
from core.errors import Problem, SpecError
from core.settings import Settings
from core.spec.caffe.prototxt import Ident, parse
from core.spec.caffe.spec import CaffeSpec
from core.spec.limits import spec_limit_problems
from core.spec.sweep import load_spec
from core.store.query import is_param, param_filters
from scheduler.expand import expand
from scheduler.grouping import group_limit

ROOT = Path(__file__).resolve().parents[4]
CONFIGS = ROOT / "configs"
NET = """name: "Small"
layer { name: "data" type: "Input" top: "data" top: "label"
  input_param { shape { dim: 16 dim: 1 dim: 8 dim: 8 } shape { dim: 16 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 4 kernel_size: 3 weight_filler { type: "xavier" } } }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "ip1" type: "InnerProduct" bottom: "pool1" top: "ip1"
  inner_product_param { num_output: 10 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip1" bottom: "label" top: "loss" }
"""
SOLVER = """base_lr: 0.01
lr_policy: "fixed"
max_iter: 20
test_iter: 1
test_interval: 10
"""


def _spec(caffe: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    """A spec document as the API takes it: the texts inline."""
    section = {"net_text": NET, "solver_text": SOLVER, **(caffe or {})}
    return {"name": "small", "caffe": section, "dataset": {"name": "digits"}, **top}


def _problems(document: dict[str, Any]) -> list[Problem]:
    with pytest.raises(SpecError) as info:
        load_spec(document)
    return info.value.problems


def _net(config: dict[str, Any]) -> Any:
    return parse(config["caffe"]["net_text"])


def _layer(net: Any, name: str) -> Any:
    return next(m for m in net.getall("layer") if m.get("name") == name)


def test_the_cli_reads_the_files_and_stores_their_texts() -> None:
    spec = load_spec(CONFIGS / "caffe-lenet.yaml")
    assert isinstance(spec, CaffeSpec)
    caffe = spec.document["caffe"]
    assert "net" not in caffe and "solver" not in caffe  # the solver named the net
    assert caffe["solver_text"] == (CONFIGS / "caffe" / "lenet_solver.prototxt").read_text()
    assert caffe["net_text"] == (CONFIGS / "caffe" / "lenet_train_test.prototxt").read_text()
    assert caffe["net_source"].endswith("configs/caffe/lenet_train_test.prototxt")
    (trial,) = expand(spec, with_config=True)
    assert trial.config["caffe"]["resize"] == [28, 28]
    assert trial.config["caffe"]["net_source"] == caffe["net_source"]  # for a worker's errors
    assert trial.config["training"]["seed"] == 1
    assert _layer(_net(trial.config), "ip1").get("inner_product_param").get("num_output") == 500
    # What is stored loads again as it is, on a host without the files (the scheduler).
    again = load_spec(spec.document)
    assert again.net_text == spec.net_text and again.net_source == spec.net_source


def test_an_explicit_net_path_is_read_relative_to_the_spec(tmp_path: Path) -> None:
    (tmp_path / "nets").mkdir()
    (tmp_path / "nets" / "small.prototxt").write_text(NET)
    (tmp_path / "solver.prototxt").write_text(SOLVER)
    path = tmp_path / "spec.yaml"
    path.write_text(
        "name: s\ncaffe: {net: nets/small.prototxt, solver: solver.prototxt}\n"
        "dataset: {name: digits}\n"
    )
    spec = load_spec(path)
    assert spec.net_text == NET and spec.solver_text == SOLVER


def test_the_sweep_config_lists_its_parameters_in_generate() -> None:
    path = str(CONFIGS / "caffe-sweep.yaml")
    result = CliRunner().invoke(main, ["generate", path, "--format", "csv"])
    assert result.exit_code == 0, result.output
    header, *rows = result.output.strip().splitlines()
    assert header == "id,index,seed,caffe.layers.ip1.num_output,caffe.solver_params.base_lr"
    assert [row.split(",")[3:] for row in rows] == [
        ["50", "0.01"], ["50", "0.03"], ["200", "0.01"], ["200", "0.03"]
    ]  # fmt: skip


def test_each_trial_carries_the_texts_with_its_values() -> None:
    spec = load_spec(
        _spec({
            "layers": {"ip1": {"num_output": [10, 20]},
                       "conv1": {"convolution_param": {"num_output": 8}}},
            "solver_params": {"base_lr": [0.1, 0.01], "type": "Adam"},
        })
    )  # fmt: skip
    trials = expand(spec, with_config=True)
    assert [t.params for t in trials] == [
        {"caffe.layers.ip1.num_output": n, "caffe.solver_params.base_lr": lr}
        for n in (10, 20) for lr in (0.1, 0.01)
    ]  # fmt: skip
    last = trials[-1].config
    net, solver = _net(last), parse(last["caffe"]["solver_text"])
    assert _layer(net, "ip1").get("inner_product_param").get("num_output") == 20
    assert _layer(net, "conv1").get("convolution_param").get("num_output") == 8  # fixed value
    assert solver.get("base_lr") == 0.01 and solver.get("type") == "Adam"
    assert solver.get("max_iter") == 20  # the rest as written
    # The spec itself is left as it was: the next trial starts from the texts again.
    assert spec.net_text == NET and "num_output: 20" not in trials[0].config["caffe"]["net_text"]


def test_short_and_full_forms_reach_the_same_field() -> None:
    short = load_spec(_spec({"layers": {"conv1": {"num_output": [6]}}}))
    full = load_spec(_spec({"layers": {"conv1": {"convolution_param": {"num_output": [6]}}}}))
    assert list(short.targets) == ["caffe.layers.conv1.num_output"]
    assert list(full.targets) == ["caffe.layers.conv1.convolution_param.num_output"]
    assert short.targets["caffe.layers.conv1.num_output"] == next(iter(full.targets.values()))
    texts = [expand(s, with_config=True)[0].config["caffe"]["net_text"] for s in (short, full)]
    assert texts[0] == texts[1]


def test_nested_messages_enums_and_repeated_fields() -> None:
    spec = load_spec(
        _spec({"layers": {
            "conv1": {"weight_filler": {"type": ["gaussian"], "std": {"loguniform": [0.01, 0.1]}},
                      "kernel_size": {"value": [3, 3]}},
            "pool1": {"pool": [AVE := "AVE"]},
        }}, search={"algorithm": "random", "trials": 3, "seed": 0})
    )  # fmt: skip
    for trial in expand(spec, with_config=True):
        net = _net(trial.config)
        conv = _layer(net, "conv1").get("convolution_param")
        assert conv.get("weight_filler").get("type") == "gaussian"
        assert 0.01 <= conv.get("weight_filler").get("std") <= 0.1
        assert conv.getall("kernel_size") == [3, 3]
        pool = _layer(net, "pool1").get("pooling_param").get("pool")
        assert pool == AVE and isinstance(pool, Ident)  # written bare, as Caffe's enums are
        assert "pool: AVE" in trial.config["caffe"]["net_text"]


def test_a_layer_name_shared_by_phases_sets_every_layer_of_that_name() -> None:
    spec = load_spec(CONFIGS / "caffe-lenet.yaml")
    doc = dict(spec.document)
    doc["caffe"] = {**doc["caffe"], "layers": {"mnist": {"batch_size": [32]}}}
    config = expand(load_spec(doc), with_config=True)[0].config
    data = [m for m in _net(config).getall("layer") if m.get("name") == "mnist"]
    assert [m.get("data_param").get("batch_size") for m in data] == [32, 32]


def test_conditions_and_int_ranges_work_as_elsewhere() -> None:
    spec = load_spec(
        _spec({"solver_params": {
            "lr_policy": ["fixed", "step"],
            "gamma": {"value": 0.5, "when": {"lr_policy": "step"}},
            "stepsize": {"int": [5, 10], "step": 5, "when": {"lr_policy": "step"}},
        }})
    )  # fmt: skip
    trials = expand(spec, with_config=True)
    assert [t.params for t in trials] == [
        {"caffe.solver_params.lr_policy": "fixed"},
        {"caffe.solver_params.lr_policy": "step", "caffe.solver_params.gamma": 0.5,
         "caffe.solver_params.stepsize": 5},
        {"caffe.solver_params.lr_policy": "step", "caffe.solver_params.gamma": 0.5,
         "caffe.solver_params.stepsize": 10},
    ]  # fmt: skip
    solver = parse(trials[2].config["caffe"]["solver_text"])
    assert (solver.get("lr_policy"), solver.get("stepsize")) == ("step", 10)


def test_an_unknown_layer_names_the_layers_there_are() -> None:
    (problem,) = _problems(_spec({"layers": {"ip2": {"num_output": [1, 2]}}}))
    assert problem.path == "caffe.layers.ip2"
    assert (
        "no layer 'ip2' in the net (its layers: data, conv1, pool1, ip1, loss)" in problem.message
    )
    assert problem.message.endswith("did you mean 'ip1'?")


def test_an_unknown_field_names_the_layer_and_lists_its_fields() -> None:
    (problem,) = _problems(_spec({"layers": {"ip1": {"num_ouptut": [1, 2]}}}))
    assert problem.path == "caffe.layers.ip1.num_ouptut"
    assert problem.message.startswith("layer 'ip1' (InnerProduct) has no field 'num_ouptut'")
    assert "inner_product_param.num_output" in problem.message
    assert problem.message.endswith("did you mean 'num_output'?")
    (problem,) = _problems(_spec({"layers": {"ip1": {"convolution_param": {"num_output": 3}}}}))
    assert problem.path == "caffe.layers.ip1.convolution_param.num_output"
    assert "has no field 'convolution_param'" in problem.message


def test_a_path_is_refused_where_only_texts_are_read() -> None:
    """The API: it never reads a server's files, and says what to send instead."""
    problems = _problems({"name": "x", "caffe": {"net": "lenet.prototxt", "solver_text": SOLVER},
                          "dataset": {"name": "digits"}})  # fmt: skip
    assert problems[0] == Problem(
        "caffe.net",
        "is a file path, which only the CLI reads (relative to the spec file); send the "
        "file's text as caffe.net_text",
    )


def test_a_malformed_prototxt_names_its_file_line_and_column(tmp_path: Path) -> None:
    (tmp_path / "net.prototxt").write_text('name: "x"\nlayer {\n  name: "a" type "Input"\n}\n')
    (tmp_path / "solver.prototxt").write_text(SOLVER)
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: s\ncaffe: {net: net.prototxt, solver: solver.prototxt}\n"
                    "dataset: {name: digits}\n")  # fmt: skip
    result = CliRunner().invoke(main, ["validate", str(spec)])
    assert result.exit_code == 2
    assert (
        f"error: caffe.net: {tmp_path}/net.prototxt:3:18: expected ':' or '{{' after field 'type'"
        in result.output
    )
    problems = _problems(_spec({"solver_text": "base_lr: 0.1\nmax_iter 3\n"}))
    assert problems == [
        Problem("caffe.solver_text", "caffe.solver_text:2:10: expected ':' or '{' after field "
                "'max_iter', found '3'")
    ]  # fmt: skip
    (tmp_path / "solver.prototxt").unlink()
    result = CliRunner().invoke(main, ["validate", str(spec)])
    assert result.exit_code == 2 and "caffe.solver: " in result.output
    assert "solver.prototxt: cannot read: No such file or directory" in result.output


@pytest.mark.parametrize(
    ("top", "path", "words"),
    [
        ({"execution": {"parallel": {"world_size": 2}}}, "execution.parallel", "data-parallel"),
        ({"execution": {"fuse": "auto"}}, "execution.fuse", "trains alone"),
        ({"training": {"epochs": 3}}, "training.epochs", "caffe.solver_params"),
        ({"model": {"hidden_units": 3}}, "model", "the net is the model"),
        ({"dataset": {"name": "iris"}}, "dataset.name", "a Caffe net reads images"),
        ({"execution": {"dtype": "bfloat16"}}, "execution.dtype", "float32, float64"),
        ({"caffe": {"net_text": NET, "solver_text": SOLVER, "resize": [0, 28]}},
         "caffe.resize", "[height, width]"),
        ({"caffe": {"net_text": NET, "solver_text": SOLVER, "layers": {"a.b": {"x": 1}}}},
         "caffe.layers.a.b", "no dot"),
        ({"caffe": {"net_text": NET, "solver_text": SOLVER, "netz": 1}}, "caffe.netz",
         "did you mean 'net'?"),
    ],
)  # fmt: skip
def test_what_does_not_apply_is_refused_naming_the_field(
    top: dict[str, Any], path: str, words: str
) -> None:
    problems = _problems({**_spec(), **top})
    assert any(p.path == path and words in p.message for p in problems), problems


def test_the_dataset_is_required() -> None:
    document = _spec()
    del document["dataset"]
    (problem,) = _problems(document)
    assert problem.path == "dataset" and "LMDB/LevelDB source is not read" in problem.message


def test_caffe_trials_never_fuse_and_their_paths_are_parameters() -> None:
    spec = load_spec(_spec({"layers": {"ip1": {"num_output": [10, 20]}}}))
    assert all(group_limit(t.config) == 1 for t in expand(spec, with_config=True))
    assert is_param("caffe.layers.ip1.num_output") and is_param("caffe.solver_params.base_lr")
    assert is_param("caffe.layers.inception_3a/1x1.convolution_param.num_output")
    assert not is_param("caffe.layers.$x.num_output") and not is_param("caffe.other.x")
    assert param_filters({"caffe.layers.ip1.num_output": 10}) == {
        "params.caffe.layers.ip1.num_output": 10
    }


def test_the_texts_are_held_to_the_servers_ceiling() -> None:
    spec = load_spec(_spec())
    small = dataclasses.replace(Settings(), max_prototxt_bytes=100)
    (problem,) = spec_limit_problems(spec, small)
    assert problem.path == "caffe.net_text"
    assert problem.message == (
        f"its UTF-8 bytes must be <= 100 on this server (SWEEPSTACK_MAX_PROTOTXT_BYTES), "
        f"got {len(NET.encode()):,}"
    )
    assert spec_limit_problems(spec, Settings()) == []


def test_every_distinct_solver_is_parsed_when_the_sweep_expands() -> None:
    spec = load_spec(_spec({"solver_params": {"base_lr": [0.1, -1]}}))  # the first one is fine
    with pytest.raises(SpecError) as info:
        expand(spec)
    (problem,) = info.value.problems
    assert problem.path == "caffe.solver.base_lr"
    assert problem.message.endswith("got -1.0 (when caffe.solver_params.base_lr=-1)")
    spec = load_spec(_spec({"solver_params": {"lr_policy": ["fixed", "step"]}}))
    with pytest.raises(SpecError) as info:
        expand(spec)
    assert [p.path for p in info.value.problems] == ["caffe.solver.gamma", "caffe.solver.stepsize"]


def test_the_first_trials_solver_is_parsed_when_the_spec_loads() -> None:
    (problem,) = _problems(_spec({"solver_text": "base_lr: 0.1\nlr_policy: 'fixed'\n"}))
    assert problem == Problem("caffe.solver.max_iter", "is required (Caffe has no default for it)")
    # A value the sweep gives is the first trial's: no problem then.
    spec = load_spec(_spec({"solver_text": "base_lr: 0.1\nlr_policy: 'fixed'\n",
                            "solver_params": {"max_iter": {"int": [10, 20]}}}))  # fmt: skip
    assert spec.first_param_count() is None or spec.first_param_count() > 0


def test_an_unknown_solver_field_lists_the_known_ones() -> None:
    (problem,) = _problems(_spec({"solver_params": {"base_lrr": [0.1]}}))
    assert problem.path == "caffe.solver_params.base_lrr"
    assert problem.message.startswith("no solver field 'base_lrr' (known: base_lr, lr_policy,")
    assert problem.message.endswith("did you mean 'base_lr'?")


def test_a_net_that_cannot_be_built_is_refused_at_validation_naming_the_layer() -> None:
    (problem,) = _problems(_spec({"layers": {"conv1": {"kernel_size": [9]}}}))
    assert problem.path == "caffe.net"
    assert problem.message.startswith(
        "layer 'conv1' (Convolution): convolution_param: the kernel 9 is larger than its "
        "padded input 8"
    )
    assert "caffe.resize" in problem.message  # what to change
    spec = load_spec(_spec({"layers": {"conv1": {"kernel_size": [3, 9]}}}))  # the first builds
    with pytest.raises(SpecError) as info:
        expand(spec)
    (problem,) = info.value.problems
    assert problem.message.endswith("(when caffe.layers.conv1.kernel_size=9)")
    # An Input layer's declared shape must agree with the images (resized or not).
    (problem,) = _problems(_spec({"resize": [16, 16]}))
    assert "declares samples of 1x8x8 but the data set gives 1x16x16" in problem.message


def test_an_unsupported_layer_type_is_refused_with_the_supported_ones() -> None:
    net = NET.replace('type: "Pooling"', 'type: "Deconvolution"')
    (problem,) = _problems(_spec({"net_text": net}))
    assert problem.path == "caffe.net"
    assert problem.message.startswith("layer 'pool1' (Deconvolution): the layer type")
    assert "supported types: Data, " in problem.message


def test_the_worst_nets_parameters_are_held_to_the_ceiling() -> None:
    spec = load_spec(_spec({"layers": {"ip1": {"num_output": [10, 1000]}}}))
    assert spec.first_param_count() == (4 * 9 + 4) + (4 * 3 * 3 * 10 + 10)
    small = dataclasses.replace(Settings(), max_model_parameters=1000)
    (problem,) = spec_limit_problems(spec, small)  # the first trial's 410 are within it
    assert problem.path == "caffe.layers.ip1.num_output"
    assert problem.message.startswith("the net's parameters must be <= 1,000 on this server")
    assert "got 37,040 (the net of the trial with caffe.layers.ip1.num_output=1000" in (
        problem.message
    )


def test_a_pruners_largest_resource_is_the_solvers_evaluations() -> None:
    from scheduler.samplers import max_epochs

    assert max_epochs(load_spec(CONFIGS / "caffe-lenet.yaml")) == 3  # 300 iterations, every 100
    assert max_epochs(load_spec(CONFIGS / "caffe-sweep.yaml")) == 2  # 100, every 50
    assert load_spec(_spec({"solver_params": {"test_interval": 7}})).planned_epochs() == 3


@pytest.mark.parametrize(
    ("field", "words"),
    [("test_net: \"test.prototxt\"", "a separate test net"),
     ("net_param { name: \"inline\" }", "an inline net is not read")],
)  # fmt: skip
def test_nets_the_trial_would_not_train_are_refused(field: str, words: str) -> None:
    (problem,) = _problems(_spec({"solver_text": SOLVER + field + "\n"}))
    assert problem.path == f"caffe.solver.{field.split()[0].rstrip(':')}"
    assert problem.message.startswith(words)


def test_the_caffe_page_lists_every_layer_type_and_solver_field() -> None:
    from core.spec.caffe.layers import LAYER_TYPES, REFUSED_TYPES
    from core.spec.caffe.section import solver_fields

    section = (ROOT / "docs" / "caffe.md").read_text()
    table = section[section.index("| type | fields |") : section.index("Refused, each with")]
    rows = [line.split("|")[1] for line in table.splitlines()[2:] if line.startswith("|")]
    listed = {name.strip() for row in rows for name in row.split(",")}
    assert listed == set(LAYER_TYPES)
    refused = section[section.index("Refused, each with") : section.index("**Solver fields**")]
    assert all(name in refused for name in REFUSED_TYPES)
    solver = section[section.index("**Solver fields**") :]
    assert [f for f in solver_fields() if f"`{f}`" not in solver] == []


def test_adaptive_search_and_pruning_take_caffe_dimensions() -> None:
    from scheduler.messages import messages
    from scheduler.search_session import SearchSession

    spec = load_spec(
        _spec({"layers": {"conv1": {"num_output": {"int": [8, 64]}}},
               "solver_params": {"base_lr": {"loguniform": [0.001, 0.1]}}},
              search={"algorithm": "tpe", "trials": 4, "seed": 1},
              pruning={"algorithm": "hyperband", "min_resource": 1},
              objective={"metric": "val_loss", "direction": "minimize"})
    )  # fmt: skip
    session = SearchSession(spec)
    asked = session.ask(2)
    assert len(asked) == 2
    for point in asked:
        assert 8 <= point.params["caffe.layers.conv1.num_output"] <= 64
        config = spec.seeded_config(point.params, 5)
        solver = parse(config["caffe"]["solver_text"])
        assert solver.get("base_lr") == point.params["caffe.solver_params.base_lr"]
    grid = load_spec(_spec({"layers": {"conv1": {"num_output": [10, 20]}}},
                           pruning={"algorithm": "median"}))  # fmt: skip
    sent = messages("s", expand(grid, with_config=True), watch=True)
    assert [len(ids) for ids, _, _ in sent if isinstance(ids, list)] == []  # one trial each
    assert all(kw["watch"] for _, _, kw in sent)


def test_a_solver_net_that_cannot_be_read_says_caffe_net_overrides_it(tmp_path: Path) -> None:
    """Caffe's own solvers name their net from Caffe's root (``examples/mnist/...``)."""
    (tmp_path / "solver.prototxt").write_text('net: "examples/mnist/net.prototxt"\n' + SOLVER)
    (tmp_path / "mine.prototxt").write_text(NET)
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: s\ncaffe: {solver: solver.prototxt}\ndataset: {name: digits}\n")
    result = CliRunner().invoke(main, ["validate", str(spec)])
    assert result.exit_code == 2
    assert "examples/mnist/net.prototxt: cannot read: No such file or directory" in result.output
    assert "give the net's file as caffe.net: in the spec" in result.output
    assert "it overrides the solver's net:" in result.output
    spec.write_text("name: s\ncaffe: {solver: solver.prototxt, net: mine.prototxt}\n"
                    "dataset: {name: digits}\n")  # fmt: skip
    assert CliRunner().invoke(main, ["validate", str(spec)]).exit_code == 0
