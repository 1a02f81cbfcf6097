"""The Caffe layer graph: phases, wiring, shapes, parameter counts (refusals: their own file)."""

from __future__ import annotations

import pytest

from core.spec.caffe.net import build_graph, check_shared
from core.spec.caffe.phases import included
from core.spec.caffe.prototxt import parse
from tests.core.spec.caffe.texts import HEAD, graph, layer

LENET = """
name: "LeNet"
layer { name: "mnist" type: "Data" top: "data" top: "label" include { phase: TRAIN }
  transform_param { scale: 0.00390625 }
  data_param { source: "train_lmdb" batch_size: 64 backend: LMDB } }
layer { name: "mnist" type: "Data" top: "data" top: "label" include { phase: TEST }
  transform_param { scale: 0.00390625 } data_param { source: "test_lmdb" batch_size: 100 } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  param { lr_mult: 1 } param { lr_mult: 2 }
  convolution_param { num_output: 20 kernel_size: 5 stride: 1 weight_filler { type: "xavier" } } }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2"
  convolution_param { num_output: 50 kernel_size: 5 } }
layer { name: "pool2" type: "Pooling" bottom: "conv2" top: "pool2"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "ip1" type: "InnerProduct" bottom: "pool2" top: "ip1"
  inner_product_param { num_output: 500 } }
layer { name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
  inner_product_param { num_output: 10 } }
layer { name: "accuracy" type: "Accuracy" bottom: "ip2" bottom: "label" top: "accuracy"
  include { phase: TEST } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }
"""


def test_lenet_shapes_parameters_and_phases() -> None:
    net = parse(LENET, "lenet.prototxt")
    train = build_graph(net, "TRAIN", (1, 28, 28), 10, "lenet.prototxt")
    test = build_graph(net, "TEST", (1, 28, 28), 10, "lenet.prototxt")
    assert train.param_count == test.param_count == 431080  # Caffe's LeNet
    assert train.shapes["pool2"] == (64, 50, 4, 4) and test.shapes["pool2"] == (100, 50, 4, 4)
    assert [layer.name for layer in train.layers if layer.type == "Accuracy"] == []
    assert test.outputs() == ["accuracy", "loss"] and train.outputs() == ["loss"]
    assert (train.data.batch_size, test.data.batch_size) == (64, 100)
    assert train.data.tops == ("data", "label") and train.data.label_top == "label"
    assert train.data.transform is not None and train.data.transform.get("scale") == 0.00390625
    conv1 = train.layer("conv1")
    assert conv1.param_shapes == ((20, 1, 5, 5), (20,))
    assert (conv1.lr_mults, conv1.decay_mults) == ((1.0, 2.0), (1.0, 1.0))
    assert train.layer("loss").loss_weights == (1.0,)
    row = train.layer_table()[1]
    assert row == {
        "name": "conv1",
        "type": "Convolution",
        "bottoms": ["data"],
        "tops": ["conv1"],
        "output": [[64, 20, 24, 24]],
        "params": 520,
    }
    check_shared(train, test)


@pytest.mark.parametrize(
    ("pooling", "size", "out"),
    [
        ("kernel_size: 2 stride: 2", 3, 2),  # ceil((3-2)/2)+1: PyTorch's floor gives 1
        ("kernel_size: 3 stride: 2 pad: 1", 4, 3),
        ("kernel_size: 2 stride: 2 pad: 1", 5, 3),  # 4 windows, the last starting in the pad: 3
        ("kernel_size: 2 stride: 2 round_mode: FLOOR", 3, 1),
        ("kernel_h: 3 kernel_w: 1 stride_h: 2 stride_w: 1", 7, 3),
        ("global_pooling: true pool: AVE", 5, 1),
    ],
)
def test_pooling_rounds_up_and_drops_a_window_that_starts_in_the_padding(
    pooling: str, size: int, out: int
) -> None:
    body = layer("p", "Pooling", f"pooling_param {{ {pooling} }}")
    g = graph(body, f"dim: 3 dim: {size} dim: {size}", shape=(3, size, size))
    h = g.shapes["p"][2]
    assert h == out
    assert g.layer("p").param_count == 0


def test_convolution_output_with_pad_stride_dilation_and_group() -> None:
    body = """layer { name: "c" type: "Convolution" bottom: "data" top: "c"
      convolution_param { num_output: 6 kernel_size: 3 dilation: 2 pad: 1 stride: 2 group: 3 } }
    layer { name: "d" type: "Convolution" bottom: "data" top: "d"
      convolution_param { num_output: 4 kernel_h: 3 kernel_w: 1 pad_h: 1 bias_term: false } }"""
    g = graph(body, "dim: 3 dim: 10 dim: 10", shape=(3, 10, 10))
    assert g.shapes["c"] == (2, 6, 4, 4)  # (10 + 2 - 5) // 2 + 1
    assert g.layer("c").param_shapes == ((6, 1, 3, 3), (6,))
    assert g.shapes["d"] == (2, 4, 10, 10) and g.layer("d").param_shapes == ((4, 3, 3, 1),)
    assert g.param_count == 6 * 9 + 6 + 4 * 9


def test_inner_product_flattens_from_its_axis() -> None:
    body = """layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
      inner_product_param { num_output: 5 axis: 2 } }
    layer { name: "t" type: "InnerProduct" bottom: "data" top: "t"
      inner_product_param { num_output: 7 transpose: true bias_term: false } }"""
    g = graph(body, "dim: 2 dim: 3 dim: 4", shape=(2, 3, 4))
    assert g.shapes["ip"] == (2, 2, 5) and g.layer("ip").param_shapes == ((5, 12), (5,))
    assert g.shapes["t"] == (2, 7) and g.layer("t").param_shapes == ((24, 7),)


def test_blob_layers_shapes() -> None:
    body = """
    layer { name: "bn" type: "BatchNorm" bottom: "data" top: "data" }
    layer { name: "sc" type: "Scale" bottom: "data" top: "data" scale_param { bias_term: true } }
    layer { name: "pr" type: "PReLU" bottom: "data" top: "pr" }
    layer { name: "ps" type: "PReLU" bottom: "data" top: "ps" prelu_param { channel_shared: true } }
    layer { name: "lrn" type: "LRN" bottom: "data" top: "lrn" lrn_param { local_size: 3 } }
    layer { name: "sl" type: "Slice" bottom: "data" top: "a" top: "b"
      slice_param { slice_point: 1 } }
    layer { name: "cat" type: "Concat" bottom: "b" bottom: "a" bottom: "b" top: "cat" }
    layer { name: "el" type: "Eltwise" bottom: "a" bottom: "a" top: "el"
      eltwise_param { operation: SUM coeff: 1 coeff: -1 } }
    layer { name: "sp" type: "Split" bottom: "cat" top: "s1" top: "s2" }
    layer { name: "fl" type: "Flatten" bottom: "s1" top: "fl" }
    layer { name: "rs" type: "Reshape" bottom: "s2" top: "rs"
      reshape_param { shape { dim: 0 dim: -1 dim: 4 } } }
    layer { name: "sm" type: "Softmax" bottom: "fl" top: "sm" }
    """
    g = graph(body, "dim: 3 dim: 4 dim: 4", shape=(3, 4, 4))
    bn = g.layer("bn")
    assert bn.param_shapes == () and bn.stat_shapes == ((3,), (3,), (1,))
    assert g.layer("sc").param_shapes == ((3,), (3,))
    assert g.layer("pr").param_shapes == ((3,),) and g.layer("ps").param_shapes == ((),)
    assert g.param_count == 3 + 3 + 3 + 1
    assert (g.shapes["a"], g.shapes["b"]) == ((2, 1, 4, 4), (2, 2, 4, 4))
    assert g.shapes["cat"] == (2, 5, 4, 4)
    assert g.shapes["fl"] == (2, 80) and g.shapes["rs"] == (2, 20, 4)
    assert g.shapes["s1"] == g.shapes["s2"] == (2, 5, 4, 4) and g.shapes["el"] == (2, 1, 4, 4)


def test_losses_weights_and_outputs() -> None:
    body = """
    layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
      inner_product_param { num_output: 4 } }
    layer { name: "sig" type: "Sigmoid" bottom: "ip" top: "sig" }
    layer { name: "eu" type: "EuclideanLoss" bottom: "sig" bottom: "ip" top: "eu" loss_weight: 0.5 }
    layer { name: "xe" type: "SigmoidCrossEntropyLoss" bottom: "ip" bottom: "sig" top: "xe" }
    layer { name: "aux" type: "ReLU" bottom: "ip" top: "aux" loss_weight: 2 }
    """
    g = graph(body, "dim: 6", shape=(6,))
    assert g.layer("eu").loss_weights == (0.5,) and g.layer("xe").loss_weights == (1.0,)
    assert g.layer("aux").loss_weights == (2.0,) and g.layer("sig").loss_weights == (0.0,)
    assert g.outputs() == ["eu", "xe", "aux"] and g.shapes["eu"] == ()


def test_phase_rules_follow_caffe() -> None:
    layer = parse('include { phase: TEST } include { stage: "deploy" }')
    assert included(layer, "TEST") and not included(layer, "TRAIN")
    assert included(layer, "TRAIN", stages=frozenset({"deploy"}))
    levels = parse("include { min_level: 1 max_level: 2 }")
    assert not included(levels, "TRAIN") and included(levels, "TRAIN", level=2)
    excluded = parse('exclude { phase: TRAIN not_stage: "x" }')
    assert not included(excluded, "TRAIN") and included(excluded, "TEST")
    assert included(excluded, "TRAIN", stages=frozenset({"x"}))
    net = parse(
        'state { level: 1 stage: "s" }\n'
        + HEAD % "dim: 3"
        + """
    layer { name: "a" type: "ReLU" bottom: "data" top: "a" include { min_level: 1 stage: "s" } }
    layer { name: "b" type: "ReLU" bottom: "data" top: "b" exclude { stage: "s" } }"""
    )
    g = build_graph(net, "TEST", (3,), None)
    assert [layer.name for layer in g.layers] == ["in", "a"]


def test_net_level_input_is_an_input_layer() -> None:
    net = parse(
        'input: "data" input_dim: 5 input_dim: 1 input_dim: 8 input_dim: 8\n'
        'layer { name: "r" type: "ReLU" bottom: "data" top: "r" }'
    )
    g = build_graph(net, "TRAIN", (1, 8, 8), None)
    assert g.data.type == "Input" and g.data.batch_size == 5 and g.shapes["r"] == (5, 1, 8, 8)


def test_crop_size_shrinks_the_samples() -> None:
    net = parse("""layer { name: "d" type: "ImageData" top: "data" top: "label"
      transform_param { crop_size: 6 mirror: true mean_value: 1 mean_value: 2 mean_value: 3 }
      image_data_param { source: "list.txt" batch_size: 4 } }""")
    g = build_graph(net, "TRAIN", (3, 8, 8), 10)
    assert g.shapes["data"] == (4, 3, 6, 6) and g.shapes["label"] == (4,)
    assert g.data.sample_shape == (3, 6, 6)
