"""Which layers a phase keeps: repeated layer names, and the solver's train/test states."""

from __future__ import annotations

import pytest

from core.errors import SpecError
from core.spec.caffe.net import build_graph, check_shared
from core.spec.caffe.phases import net_state
from core.spec.caffe.prototxt import parse
from core.spec.caffe.solver import parse_solver

_NET = """
name: "staged"
state { stage: "base" }
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 4 dim: 1 dim: 8 dim: 8 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
        inner_product_param { num_output: 10 } }
layer { name: "extra" type: "ReLU" bottom: "ip" top: "ip"
        include { stage: "relu" } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss"
        include { phase: TRAIN } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "test_loss"
        include { phase: TEST } }
layer { name: "acc" type: "Accuracy" bottom: "ip" bottom: "label" top: "acc"
        include { phase: TEST stage: "scored" min_level: 1 } }
layer { name: "noacc" type: "Sigmoid" bottom: "ip" top: "sig"
        exclude { not_stage: "scored" } }
"""
_SOLVER = 'base_lr: 0.1 lr_policy: "fixed" max_iter: 1 test_iter: 1 test_interval: 1 '


def _names(phase: str, solver_extra: str = "") -> list[str]:
    solver = parse_solver(parse(_SOLVER + solver_extra, "s.prototxt"))
    state = solver.train_state if phase == "TRAIN" else solver.test_state
    graph = build_graph(parse(_NET, "n.prototxt"), phase, (1, 8, 8), 10, "n", state)
    return [f"{layer.name}:{layer.tops[0]}" for layer in graph.layers]


def test_a_layer_name_may_repeat_across_phases_each_phase_building_its_own() -> None:
    assert _names("TRAIN")[-1] == "loss:loss"
    assert "loss:test_loss" in _names("TEST")
    assert "loss:loss" not in _names("TEST")


def test_two_layers_of_one_name_in_one_phase_are_kept_when_they_hold_no_blobs() -> None:
    body = _NET.replace('top: "test_loss"\n        include { phase: TEST }', 'top: "loss2"')
    graph = build_graph(parse(body, "n"), "TRAIN", (1, 8, 8), 10)
    assert [layer.tops[0] for layer in graph.layers if layer.name == "loss"] == ["loss", "loss2"]
    test = build_graph(parse(body, "n"), "TEST", (1, 8, 8), 10)
    check_shared(graph, test)


def test_the_solver_states_select_stages_and_levels_as_caffe_merges_them() -> None:
    assert "extra:ip" not in _names("TRAIN")
    assert "extra:ip" in _names("TRAIN", 'train_state { stage: "relu" }')
    assert "extra:ip" not in _names("TEST", 'train_state { stage: "relu" }')
    assert "acc:acc" not in _names("TEST", 'test_state { stage: "scored" }')  # level 0 < 1
    scored = _names("TEST", 'test_state { stage: "scored" level: 1 }')
    assert "acc:acc" in scored and "noacc:sig" in scored
    assert "noacc:sig" not in _names("TEST")  # exclude { not_stage: scored } met


def test_the_net_state_and_the_solver_state_merge_level_and_stages() -> None:
    net = parse('state { level: 2 stage: "a" } layer { name: "x" type: "Input" }')
    assert net_state(net) == (2, frozenset({"a"}))
    assert net_state(net, parse('stage: "b" level: 5')) == (5, frozenset({"a", "b"}))
    assert net_state(net, parse('stage: "b"')) == (2, frozenset({"a", "b"}))


def test_a_misspelt_state_field_names_the_solver_field() -> None:
    with pytest.raises(SpecError) as info:
        parse_solver(parse(_SOLVER + 'test_state { stages: "x" }', "s.prototxt"), "s.prototxt")
    (problem,) = info.value.problems
    assert problem.path == "caffe.solver.test_state"
    assert "test_state.stages is not a field of Caffe's NetState" in problem.message
