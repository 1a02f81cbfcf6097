"""A Caffe sweep against the server's ceilings (`core.spec.caffe.ceilings`): the worst trial's
net, found by one bound net or net by net, each problem naming the field and its values."""

from __future__ import annotations

import dataclasses

from core.settings import Settings
from core.spec.caffe.ceilings import layer_count
from core.spec.limits import spec_limit_problems
from core.spec.sweep import load_spec
from tests.core.spec.caffe.test_spec import NET, SOLVER


def _spec(layers: dict, net: str = NET) -> object:
    return load_spec({"name": "c", "caffe": {"net_text": net, "solver_text": SOLVER,
                      "layers": layers}, "dataset": {"name": "digits"}})  # fmt: skip


def _limits(spec: object, **settings: int) -> dict[str, str]:
    small = dataclasses.replace(Settings(), **settings)
    return {p.path: p.message for p in spec_limit_problems(spec, small)}  # type: ignore[arg-type]


def test_the_bound_net_answers_for_a_grid_of_any_size() -> None:
    spec = _spec({"ip1": {"num_output": list(range(10, 2010))}})
    assert _limits(spec) == {}
    (message,) = _limits(spec, max_model_parameters=50_000).values()
    assert "got 74,373 (the net of the trial with caffe.layers.ip1.num_output=2009" in message


def test_a_swept_kernel_is_scaled_and_then_built_net_by_net() -> None:
    spec = _spec({"conv1": {"kernel_size": [1, 3, 5]}})
    # the bound (kernel 1 for the blobs, 658, its weights x 25: 754) goes past 700; the real
    # nets (658, 410, 274) do not
    assert _limits(spec, max_model_parameters=700) == {}
    problems = _limits(spec, max_model_parameters=500)
    assert "caffe.layers.conv1.kernel_size=1" in problems["caffe.layers.conv1.kernel_size"]


def test_fields_past_their_own_ceiling_and_the_layers_of_a_net() -> None:
    assert _limits(_spec({"conv1": {"pad": [0, 1025]}})) == {
        "caffe.layers.conv1.pad": "must be <= 1,024 (a ceiling of the field itself), got 1,025"
    }
    spec = _spec({"ip1": {"num_output": [10, 20]}})
    assert _limits(spec, max_caffe_layers=4) == {
        "caffe.net_text": "the net's layers must be <= 4 on this server "
        "(SWEEPSTACK_MAX_CAFFE_LAYERS), got 5"
    }
    assert layer_count(spec.messages({})[0]) == 5  # type: ignore[attr-defined]
