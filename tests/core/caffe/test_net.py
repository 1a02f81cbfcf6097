"""The Caffe layer graph: phases, wiring, shapes, parameter counts and every refusal."""

from __future__ import annotations

import pytest

from core.caffe.layers import LAYER_TYPES
from core.caffe.net import NetGraph, build_graph, check_shared
from core.caffe.phases import included
from core.caffe.prototxt import parse
from core.errors import SpecError

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

HEAD = 'layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 2 %s } } }\n'


def _l(
    name: str | None,
    kind: str,
    rest: str = "",
    bottoms: tuple[str, ...] = ("data",),
    tops: tuple[str, ...] | None = None,
) -> str:
    """One layer's text: its bottoms the input by default, its top named after it."""
    wires = [f'bottom: "{b}"' for b in bottoms] + [f'top: "{t}"' for t in (tops or (name,))]
    named = f'name: "{name}" ' if name else ""
    return f'layer {{ {named}type: "{kind}" {" ".join(wires)} {rest} }}\n'


def graph(body: str, dims: str = "dim: 3 dim: 8 dim: 8", phase: str = "TRAIN",
          shape: tuple[int, ...] = (3, 8, 8), classes: int | None = None) -> NetGraph:  # fmt: skip
    return build_graph(parse(HEAD % dims + body, "t.prototxt"), phase, shape, classes, "t.prototxt")


def refusal(body: str, **kw: object) -> str:
    with pytest.raises(SpecError) as info:
        graph(body, **kw)  # type: ignore[arg-type]
    assert all(p.path == "caffe.net" for p in info.value.problems)
    return str(info.value)


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
    assert row == {"name": "conv1", "type": "Convolution", "bottoms": ["data"],
                   "tops": ["conv1"], "output": [[64, 20, 24, 24]], "params": 520}  # fmt: skip
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
    body = _l("p", "Pooling", f"pooling_param {{ {pooling} }}")
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
    net = parse('input: "data" input_dim: 5 input_dim: 1 input_dim: 8 input_dim: 8\n'
                'layer { name: "r" type: "ReLU" bottom: "data" top: "r" }')  # fmt: skip
    g = build_graph(net, "TRAIN", (1, 8, 8), None)
    assert g.data.type == "Input" and g.data.batch_size == 5 and g.shapes["r"] == (5, 1, 8, 8)


def test_crop_size_shrinks_the_samples() -> None:
    net = parse("""layer { name: "d" type: "ImageData" top: "data" top: "label"
      transform_param { crop_size: 6 mirror: true mean_value: 1 mean_value: 2 mean_value: 3 }
      image_data_param { source: "list.txt" batch_size: 4 } }""")
    g = build_graph(net, "TRAIN", (3, 8, 8), 10)
    assert g.shapes["data"] == (4, 3, 6, 6) and g.shapes["label"] == (4,)
    assert g.data.sample_shape == (3, 6, 6)


def test_unsupported_type_names_the_layer_its_type_and_the_supported_list() -> None:
    text = refusal('layer { name: "up" type: "Deconvolution" bottom: "data" top: "up" }')
    assert "layer 'up' (Deconvolution): the layer type 'Deconvolution' is not supported" in text
    assert "transposed convolution is not supported" in text and "[t.prototxt:2]" in text
    assert "supported types: " + ", ".join(LAYER_TYPES) in text
    assert "'Fancy' is not supported; supported types: Data," in refusal(
        'layer { name: "f" type: "Fancy" bottom: "data" top: "f" }'
    )


_CONV = "convolution_param { num_output: 2 kernel_size: 3 %s }"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            _l("r", "ReLU", bottoms=("nowhere",)),
            "layer 'r' (ReLU): bottom 'nowhere' is not produced by any layer before it in the "
            "TRAIN net",
        ),
        (
            _l("c", "Convolution", "convolution_param { num_output: 2 kernel_size: 9 }"),
            "layer 'c' (Convolution): convolution_param: the kernel 9 is larger than its padded "
            "input 8 (8 + 2*pad 0)",
        ),
        (
            _l("c", "Convolution", _CONV % "dilation: 4"),
            "the kernel 3 (dilated to 9) is larger than its padded input 8",
        ),
        (
            _l("p", "Pooling", "pooling_param { kernel_size: 11 pad: 1 }"),
            "layer 'p' (Pooling): pooling_param: the kernel 11 is larger than its padded input 10",
        ),
        (
            _l("p", "Pooling", "pooling_param { kernel_size: 2 pad: 2 }"),
            "pooling_param: pad 2 must be smaller than the kernel 2",
        ),
        (
            _l("p", "Pooling", "pooling_param { kernel_size: 1 stride: 3 }"),
            "the last window (stride 3) would start past the input of size 8",
        ),
        (
            _l("c", "Convolution", "convolution_param { num_output: 2 kernel_sz: 3 }"),
            "layer 'c' (Convolution): convolution_param.kernel_sz is not a field of Caffe's "
            "ConvolutionParameter",
        ),
        (
            _l("r", "ReLU", "pooling_param { pool: MAX }"),
            "layer 'r' (ReLU): pooling_param is not a field a ReLU layer reads (it reads "
            "relu_param)",
        ),
        (
            _l("p", "Pooling", "pooling_param { pool: STOCHASTIC kernel_size: 2 }"),
            "layer 'p' (Pooling): pool: STOCHASTIC is not supported; use MAX or AVE",
        ),
        (
            _l("p", "Pooling", "pooling_param { pool: MIN kernel_size: 2 }"),
            "pooling_param.pool must be one of MAX, AVE, STOCHASTIC, not Ident('MIN')",
        ),
        (
            _l("c", "Convolution", "convolution_param { kernel_size: 3 }"),
            "convolution_param.num_output is required",
        ),
        (
            _l("c", "Convolution", "convolution_param { num_output: 2 }"),
            "convolution_param: kernel_size is required (or kernel_h and kernel_w)",
        ),
        (
            _l("c", "Convolution", _CONV % "kernel_h: 3 kernel_w: 3"),
            "give either kernel_size or kernel_h/kernel_w, not both",
        ),
        (
            _l("c", "Convolution", 'param { name: "shared" } ' + _CONV % ""),
            "param.name is not supported: sharing parameters between layers by name",
        ),
        (
            _l("c", "Convolution", "param {} param {} param {} " + _CONV % ""),
            "3 param { } blocks for 2 blobs",
        ),
        (
            _l("c", "Convolution", _CONV % "group: 2"),
            "group 2 must divide both the input's 3 channels and num_output 2",
        ),
        (
            _l("c", "Convolution", _CONV % 'weight_filler { type: "xavier" sparse: 3 }'),
            "convolution_param.weight_filler.sparse applies to the gaussian filler only",
        ),
        (
            _l("c", "Convolution", _CONV % 'weight_filler { type: "orthogonal" }'),
            "convolution_param.weight_filler.type must be one of constant, gaussian",
        ),
        (
            _l("r", "ReLU", tops=("data", "x")),
            "layer 'r' (ReLU): takes 1 top(s), not 2",
        ),
        (
            _l("r", "ReLU") + _l("s", "Sigmoid", tops=("r",)),
            "layer 's' (Sigmoid): top 'r' is already produced by layer 'r'",
        ),
        (
            _l("f", "Flatten", tops=("data",)),
            "top 'data' cannot be computed in place: the layer changes its shape",
        ),
        (
            _l("r", "ReLU") + _l("r", "TanH", tops=("t",)),
            "layer 'r' (TanH): a second layer of this name; rename one",
        ),
        (_l(None, "ReLU", tops=("r",)), "a layer has no name"),
        (
            _l("r", "ReLU", "phase: TRAIN"),
            "phase is not supported: a layer's phase is set by the net",
        ),
        (
            _l("r", "ReLU", "include { phase: TRAIN } exclude { phase: TEST }"),
            "give include rules or exclude rules, not both",
        ),
        (
            _l("d", "Input", "input_param { shape { dim: 1 dim: 3 dim: 8 dim: 8 } }", ()),
            "layer 'd' (Input): a second data layer in the TRAIN net (after 'in')",
        ),
        (
            _l("e", "Eltwise", "eltwise_param { operation: MAX coeff: 2 }", ("data", "data")),
            "eltwise_param.coeff applies to operation: SUM only",
        ),
        (
            _l("e", "Eltwise", "eltwise_param { coeff: 1 }", ("data", "data")),
            "eltwise_param.coeff has 1 values for 2 bottoms; give one per bottom",
        ),
        (
            _l("s", "Slice", "slice_param { slice_point: 5 }", tops=("a", "b")),
            "slice_param.slice_point [5] must increase strictly inside (0, 3)",
        ),
        (
            _l("s", "Slice", tops=("a", "b")),
            "axis 1 of size 3 does not split evenly into 2 tops; give slice_point",
        ),
        (
            _l("r", "Reshape", "reshape_param { shape { dim: 5 dim: -1 } }"),
            "reshape_param.shape [5, -1] cannot hold the input 2x3x8x8",
        ),
        (
            _l("c", "Concat", "concat_param { axis: 4 }", ("data", "data")),
            "concat_param.axis 4 is out of range for an input of 4 axes",
        ),
        (
            _l("l", "LRN", "lrn_param { local_size: 4 }"),
            "lrn_param.local_size must be odd, not 4",
        ),
        (
            _l("d", "Dropout", "dropout_param { dropout_ratio: 1.0 }"),
            "dropout_param.dropout_ratio must lie in [0, 1), not 1.0",
        ),
        (
            _l("x", "Exp", "exp_param { base: 0 }"),
            "exp_param.base must be positive or -1 (for e), not 0.0",
        ),
        (
            _l("b", "BatchNorm", "batch_norm_param { use_global_stats: 1 }"),
            "batch_norm_param.use_global_stats must be true or false, not 1",
        ),
        (
            _l("r", "ReLU", "loss_weight: 1 loss_weight: 2"),
            "loss_weight has 2 values for 1 tops",
        ),
        (
            _l("r", "ReLU", "propagate_down: true propagate_down: false"),
            "propagate_down has 2 values for 1 bottoms",
        ),
        (
            _l("e", "EuclideanLoss", "loss_param { normalize: true }", ("data", "data")),
            "loss_param is not a field a EuclideanLoss layer reads",
        ),
        (
            _l("e", "EuclideanLoss", "", ("data", "in")),
            "bottom 'in' is not produced",
        ),
        (
            _l("s", "Scale", "scale_param { num_axes: 4 }"),
            "scale_param.num_axes 4 does not fit an input of 4 axes from axis 1",
        ),
        (
            _l("p", "PReLU", 'prelu_param { filler { type: "msra" sparse: 1 } }'),
            "prelu_param.filler.sparse applies to the gaussian filler only",
        ),
    ],
)
def test_refusals_name_the_layer_and_what_to_change(body: str, expected: str) -> None:
    assert expected in refusal(body)


def test_field_problems_of_every_layer_come_together() -> None:
    body = """layer { name: "a" type: "ReLU" bottom: "data" top: "a" relu_param { slope: 1 } }
    layer { name: "b" type: "TanH" bottom: "a" top: "b" tanh_param { engine: CUDNN } blobs { } }"""
    with pytest.raises(SpecError) as info:
        graph(body)
    messages = [p.message for p in info.value.problems]
    assert len(messages) == 2
    assert messages[0].startswith("layer 'a' (ReLU): relu_param.slope is not a field")
    assert messages[1].startswith("layer 'b' (TanH): blobs is not supported")


_BATCH = "data_param { batch_size: 2 }"
_SHAPE = "input_param { shape { dim: 2 dim: 1 dim: %s dim: %s } }"


@pytest.mark.parametrize(
    ("layers", "expected"),
    [
        (_l("d", "Data", 'data_param { source: "x" }', ()), "data_param.batch_size is required"),
        (
            _l("d", "Data", "transform_param { crop_size: 10 } " + _BATCH, ()),
            "crop_size 10 is larger than the data set's 8x8 images",
        ),
        (
            _l("d", "Data", 'transform_param { mean_file: "m.binaryproto" } ' + _BATCH, ()),
            "mean_file is not supported: mean files are not read; give mean_value",
        ),
        (
            _l("d", "Data", "transform_param { mean_value: 1 mean_value: 2 } " + _BATCH, ()),
            "transform_param.mean_value has 2 values; give one, or one per channel (1)",
        ),
        (
            _l("d", "Data", "data_param { batch_size: 2 crop_size: 4 }", ()),
            "data_param.crop_size is not supported: crop_size is deprecated in Caffe",
        ),
        (
            _l("d", "Input", _SHAPE % (28, 28), ()),
            "input_param.shape declares samples of 1x28x28 but the data set gives 1x8x8; set "
            "caffe.resize: [28, 28]",
        ),
        (
            _l(
                "d",
                "MemoryData",
                "memory_data_param { batch_size: 2 channels: 3 height: 8 width: 8 }",
                (),
                ("data", "label"),
            ),
            "memory_data_param declares samples of 3x8x8 but the data set gives 1x8x8",
        ),
        (
            _l("d", "ImageData", "image_data_param { new_height: 16 new_width: 16 }", ()),
            "image_data_param new_height/new_width declares samples of 1x16x16 but the data set "
            "gives 1x8x8; set caffe.resize: [16, 16]",
        ),
        (
            _l("d", "Input", "transform_param { scale: 2 } " + _SHAPE % (8, 8), ()),
            "transform_param is not a field a Input layer reads",
        ),
        ("", "the TRAIN net has no data layer"),
        ('layers { name: "x" type: RELU }', "old 'layers' (V1) format"),
        (
            'layer { name: "x" type: "ReLU" }\nsolver: 1',
            "solver is not a field of a Caffe NetParameter",
        ),
    ],
)
def test_data_layer_refusals(layers: str, expected: str) -> None:
    with pytest.raises(SpecError) as info:
        build_graph(parse(layers), "TRAIN", (1, 8, 8), 10, "d.prototxt")
    assert expected in str(info.value)


def test_classifiers_need_as_many_scores_as_classes() -> None:
    net = parse(
        _l("d", "HDF5Data", "hdf5_data_param { batch_size: 4 }", (), ("data", "label"))
        + _l("ip", "InnerProduct", "inner_product_param { num_output: 5 }")
        + _l("loss", "SoftmaxWithLoss", "", ("ip", "label"))
    )
    with pytest.raises(SpecError) as info:
        build_graph(net, "TRAIN", (64,), 10)
    assert (
        "layer 'loss' (SoftmaxWithLoss): the scores have 5 classes along axis 1 but the data "
        "set has 10; give the layer feeding it num_output 10" in str(info.value)
    )
    assert build_graph(net, "TRAIN", (64,), 5).param_count == 64 * 5 + 5


def test_shared_layers_must_agree_across_phases() -> None:
    ip = "inner_product_param { num_output: %d } include { phase: %s }"
    net = parse(
        _l("d", "Input", "input_param { shape { dim: 2 dim: 4 } }", (), ("data",))
        + _l("ip", "InnerProduct", ip % (3, "TRAIN"))
        + _l("ip", "InnerProduct", ip % (5, "TEST"))
    )
    train, test = (build_graph(net, phase, (4,), None) for phase in ("TRAIN", "TEST"))
    with pytest.raises(SpecError, match=r"layer 'ip' \(InnerProduct\): the TEST net's blobs"):
        check_shared(train, test)
