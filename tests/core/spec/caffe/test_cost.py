"""A Caffe trial's arithmetic from its graph (`core.spec.caffe.cost`), for the scheduler's order."""

from __future__ import annotations

from pathlib import Path

from core.spec.caffe.cost import (
    GUESSED_SAMPLE,
    config_work,
    layer_macs,
    macs_per_sample,
    sample_shape,
    trial_work,
)
from core.spec.caffe.net import build_graph
from core.spec.caffe.prototxt import parse
from core.spec.kinds import kind_of
from core.spec.sweep import load_spec
from scheduler.expand import expand
from tests.core.spec.caffe.texts import graph, layer

CONFIGS = Path(__file__).resolve().parents[4] / "configs"
SOLVER = 'base_lr: 0.01\nlr_policy: "fixed"\nmax_iter: 100\ntest_iter: 2\ntest_interval: 30\n'


def test_lenet_costs_its_known_multiply_accumulates() -> None:
    (trial,) = expand(load_spec(CONFIGS / "caffe-lenet.yaml"), with_config=True)
    net = build_graph(parse(trial.config["caffe"]["net_text"]), "TRAIN", (1, 28, 28), 10)
    # conv1 20x(1x5x5) at 24x24, conv2 50x(20x5x5) at 8x8, ip1 800->500, ip2 500->10.
    expected = 20 * 25 * 24 * 24 + 50 * 500 * 8 * 8 + 800 * 500 + 500 * 10
    assert macs_per_sample(net) == expected == 2_293_000
    work = config_work(trial.config)
    assert (work.train_macs, work.test_macs) == (expected, expected)
    # 300 iterations of 64; tests at 100, 200 and 300, each 5 batches of 100.
    assert (work.steps, work.train_samples, work.test_samples) == (300, 300 * 64, 3 * 4 * 100)
    assert work.macs == 3 * expected * 300 * 64 + expected * 1200


def test_group_stride_dilation_and_axis_come_through_the_shapes() -> None:
    conv = "convolution_param { num_output: 4 kernel_size: 3 group: 2 stride: 2 dilation: 2 }"
    g = graph(layer("c", "Convolution", conv), dims="dim: 4 dim: 9 dim: 9", shape=(4, 9, 9))
    # 4 filters of 2 (grouped) x 3 x 3; a dilated 3-kernel spans 5: (9 - 5) / 2 + 1 = 3.
    assert layer_macs(g.layer("c")) == 2 * (4 * 2 * 3 * 3) * 3 * 3  # batch 2
    ip = "inner_product_param { num_output: 5 axis: 2 }"
    g = graph(layer("ip", "InnerProduct", ip), dims="dim: 3 dim: 7", shape=(3, 7))
    # axis 2: each of a sample's 3 rows of 7 goes through 7 x 5 weights.
    assert macs_per_sample(g) == 3 * 7 * 5
    assert layer_macs(g.layer("in")) == 0  # no arithmetic counted outside the two types


def _config(conv: int, ip: int, dataset: dict | None = None, **caffe: object) -> dict:
    net = (
        'layer { name: "d" type: "Data" top: "data" top: "label" '
        'data_param { source: "x" batch_size: 8 } }\n'
        'layer { name: "c" type: "Convolution" bottom: "data" top: "c" '
        f"convolution_param {{ num_output: {conv} kernel_size: 3 }} }}\n"
        'layer { name: "ip" type: "InnerProduct" bottom: "c" top: "ip" '
        f"inner_product_param {{ num_output: {ip} }} }}\n"
    )
    return {"caffe": {"net_text": net, "solver_text": SOLVER, **caffe},
            "dataset": dataset or {"name": "digits"}}  # fmt: skip


def test_a_bigger_net_costs_more_and_the_sample_shape_is_guessed_from_the_config() -> None:
    small, wide = config_work(_config(4, 10)), config_work(_config(16, 10))
    assert wide.macs > small.macs > 0
    assert config_work(_config(4, 100)).macs > small.macs
    assert sample_shape(_config(4, 10)) == (1, 8, 8)
    assert sample_shape(_config(4, 10, resize=[28, 28])) == (1, 28, 28)
    folder = {"path": "shapes"}  # the scheduler reads no files: a guess
    assert sample_shape(_config(4, 10, folder)) == GUESSED_SAMPLE
    assert sample_shape(_config(4, 10, folder, resize=[16, 12])) == (3, 16, 12)
    declared = (
        'layer { name: "in" type: "Input" top: "data" '
        "input_param { shape { dim: 2 dim: 1 dim: 5 dim: 6 } } }"
    )
    assert sample_shape({"caffe": {"net_text": declared}, "dataset": folder}) == (1, 5, 6)


def test_costs_before_training_are_counted_where_the_config_says_the_sample_shape() -> None:
    """#31: a Pareto-rank pruner ranks a Caffe trial's ``param_count`` and ``macs`` at a
    rung from its config, as the worker will record them; where only the data could say the
    shape (an image folder), nothing is guessed."""
    kind = kind_of(_config(4, 10))
    costs = kind.costs_before_training(_config(4, 10))
    # conv: 4 x (1 x 3 x 3) + 4; ip: 10 x (4 x 6 x 6) + 10, on the digits' 1 x 8 x 8.
    assert costs["param_count"] == (4 * 9 + 4) + (10 * 4 * 6 * 6 + 10)
    assert costs["macs"] == config_work(_config(4, 10)).train_macs > 0
    assert kind.costs_before_training(_config(16, 10))["param_count"] > costs["param_count"]
    assert kind.costs_before_training(_config(4, 10, {"path": "shapes"})) == {}
    assert kind.costs_before_training(_config(4, 10, resize=[2, 2])) == {}  # does not build


def test_a_net_that_does_not_build_counts_its_steps_only() -> None:
    broken = config_work(_config(4, 10, resize=[2, 2]))  # a 3-kernel on 2x2 images
    assert broken.macs == 0 and broken.steps == 100
    assert trial_work("not { prototxt", SOLVER, (1, 8, 8)).macs == 0


def test_each_distinct_net_is_built_once() -> None:
    trial_work.cache_clear()
    configs = [_config(4 + i % 3, 10) for i in range(3000)]
    works = [config_work(c) for c in configs]
    info = trial_work.cache_info()
    assert (info.misses, info.hits) == (3, 2997)
    assert works[0] is works[3]
