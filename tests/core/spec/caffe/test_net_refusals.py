"""The layer graph's refusals: each names the layer, its type and what to change."""

from __future__ import annotations

import pytest

from core.errors import SpecError
from core.spec.caffe.layers import LAYER_TYPES
from core.spec.caffe.net import build_graph, check_shared
from core.spec.caffe.prototxt import parse
from tests.core.spec.caffe.texts import graph, layer, refusal


def test_unsupported_type_names_the_layer_its_type_and_the_supported_list() -> None:
    text = refusal('layer { name: "up" type: "Deconvolution" bottom: "data" top: "up" }')
    assert "layer 'up' (Deconvolution): the layer type 'Deconvolution' is not supported" in text
    assert "transposed convolution is not supported" in text and "[t.prototxt:2]" in text
    assert "supported types: " + ", ".join(LAYER_TYPES) in text
    assert "'Fancy' is not supported; supported types: Data," in refusal(
        'layer { name: "f" type: "Fancy" bottom: "data" top: "f" }'
    )


@pytest.mark.parametrize(
    ("kind", "likeliest"),
    [("Poolin", "Pooling"), ("ReLu", "ReLU"), ("InnerProdcut", "InnerProduct")],
)
def test_a_misspelt_type_says_which_supported_one_it_likely_means(
    kind: str, likeliest: str
) -> None:
    text = refusal(f'layer {{ name: "x" type: "{kind}" bottom: "data" top: "x" }}')
    assert f"the layer type {kind!r} is not supported; supported types: " in text
    assert text.endswith(f"; did you mean {likeliest!r}? [t.prototxt:2]")


def test_no_guess_for_an_unrelated_type_or_one_refused_with_its_own_advice() -> None:
    for kind in ("Fancy", "Deconvolution"):
        text = refusal(f'layer {{ name: "x" type: "{kind}" bottom: "data" top: "x" }}')
        assert "did you mean" not in text


_CONV = "convolution_param { num_output: 2 kernel_size: 3 %s }"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            layer("r", "ReLU", bottoms=("nowhere",)),
            "layer 'r' (ReLU): bottom 'nowhere' is not produced by any layer before it in the "
            "TRAIN net",
        ),
        (
            layer("c", "Convolution", "convolution_param { num_output: 2 kernel_size: 9 }"),
            "layer 'c' (Convolution): convolution_param: the kernel 9 is larger than its padded "
            "input 8 (8 + 2*pad 0)",
        ),
        (
            layer("c", "Convolution", _CONV % "dilation: 4"),
            "the kernel 3 (dilated to 9) is larger than its padded input 8",
        ),
        (
            layer("p", "Pooling", "pooling_param { kernel_size: 11 pad: 1 }"),
            "layer 'p' (Pooling): pooling_param: the kernel 11 is larger than its padded input 10",
        ),
        (
            layer("p", "Pooling", "pooling_param { kernel_size: 2 pad: 2 }"),
            "pooling_param: pad 2 must be smaller than the kernel 2",
        ),
        (
            layer("p", "Pooling", "pooling_param { kernel_size: 1 stride: 3 }"),
            "the last window (stride 3) would start past the input of size 8",
        ),
        (
            layer("c", "Convolution", "convolution_param { num_output: 2 kernel_sz: 3 }"),
            "layer 'c' (Convolution): convolution_param.kernel_sz is not a field of Caffe's "
            "ConvolutionParameter",
        ),
        (
            layer("r", "ReLU", "pooling_param { pool: MAX }"),
            "layer 'r' (ReLU): pooling_param is not a field a ReLU layer reads (it reads "
            "relu_param)",
        ),
        (
            layer("p", "Pooling", "pooling_param { pool: STOCHASTIC kernel_size: 2 }"),
            "layer 'p' (Pooling): pool: STOCHASTIC is not supported; use MAX or AVE",
        ),
        (
            layer("p", "Pooling", "pooling_param { pool: MIN kernel_size: 2 }"),
            "pooling_param.pool must be one of MAX, AVE, STOCHASTIC, not Ident('MIN')",
        ),
        (
            layer("p", "Pooling", 'pooling_param { pool: "AVE" kernel_size: 2 }'),
            "pooling_param.pool must be one of MAX, AVE, STOCHASTIC, not 'AVE' (write it unquoted)",
        ),
        (
            layer("c", "Convolution", "convolution_param { kernel_size: 3 }"),
            "convolution_param.num_output is required",
        ),
        (
            layer("c", "Convolution", "convolution_param { num_output: 2 }"),
            "convolution_param: kernel_size is required (or kernel_h and kernel_w)",
        ),
        (
            layer("c", "Convolution", _CONV % "kernel_h: 3 kernel_w: 3"),
            "give either kernel_size or kernel_h/kernel_w, not both",
        ),
        (
            layer("c", "Convolution", 'param { name: "shared" } ' + _CONV % ""),
            "param.name is not supported: sharing parameters between layers by name",
        ),
        (
            layer("c", "Convolution", "param {} param {} param {} " + _CONV % ""),
            "3 param { } blocks for 2 blobs",
        ),
        (
            layer("c", "Convolution", _CONV % "group: 2"),
            "group 2 must divide both the input's 3 channels and num_output 2",
        ),
        (
            layer("c", "Convolution", _CONV % 'weight_filler { type: "xavier" sparse: 3 }'),
            "convolution_param.weight_filler.sparse applies to the gaussian filler only",
        ),
        (
            layer("c", "Convolution", _CONV % 'weight_filler { type: "orthogonal" }'),
            "convolution_param.weight_filler.type must be one of constant, gaussian",
        ),
        (
            layer("r", "ReLU", tops=("data", "x")),
            "layer 'r' (ReLU): takes 1 top(s), not 2",
        ),
        (
            layer("r", "ReLU") + layer("s", "Sigmoid", tops=("r",)),
            "layer 's' (Sigmoid): top 'r' is already produced by layer 'r'",
        ),
        (
            layer("f", "Flatten", tops=("data",)),
            "top 'data' cannot be computed in place: the layer changes its shape",
        ),
        (
            layer("c", "InnerProduct", "inner_product_param { num_output: 2 }")
            + layer("c", "InnerProduct", "inner_product_param { num_output: 2 }", ("c",), ("d",)),
            "layer 'c' (InnerProduct): a second layer of this name with learnable blobs in the "
            "TRAIN net (after the InnerProduct layer); layers of one name share their blobs "
            "across phases, so rename one",
        ),
        (layer(None, "ReLU", tops=("r",)), "a layer has no name"),
        (
            layer("r", "ReLU", "phase: TRAIN"),
            "phase is not supported: a layer's phase is set by the net",
        ),
        (
            layer("r", "ReLU", "include { phase: TRAIN } exclude { phase: TEST }"),
            "give include rules or exclude rules, not both",
        ),
        (
            layer("d", "Input", "input_param { shape { dim: 1 dim: 3 dim: 8 dim: 8 } }", ()),
            "layer 'd' (Input): a second data layer in the TRAIN net (after 'in')",
        ),
        (
            layer("e", "Eltwise", "eltwise_param { operation: MAX coeff: 2 }", ("data", "data")),
            "eltwise_param.coeff applies to operation: SUM only",
        ),
        (
            layer("e", "Eltwise", "eltwise_param { coeff: 1 }", ("data", "data")),
            "eltwise_param.coeff has 1 values for 2 bottoms; give one per bottom",
        ),
        (
            layer("s", "Slice", "slice_param { slice_point: 5 }", tops=("a", "b")),
            "slice_param.slice_point [5] must increase strictly inside (0, 3)",
        ),
        (
            layer("s", "Slice", tops=("a", "b")),
            "axis 1 of size 3 does not split evenly into 2 tops; give slice_point",
        ),
        (
            layer("r", "Reshape", "reshape_param { shape { dim: 5 dim: -1 } }"),
            "reshape_param.shape [5, -1] cannot hold the input 2x3x8x8",
        ),
        (
            layer("c", "Concat", "concat_param { axis: 4 }", ("data", "data")),
            "concat_param.axis 4 is out of range for an input of 4 axes",
        ),
        (
            layer("l", "LRN", "lrn_param { local_size: 4 }"),
            "lrn_param.local_size must be odd, not 4",
        ),
        (
            layer("d", "Dropout", "dropout_param { dropout_ratio: 1.0 }"),
            "dropout_param.dropout_ratio must lie in [0, 1), not 1.0",
        ),
        (
            layer("x", "Exp", "exp_param { base: 0 }"),
            "exp_param.base must be positive or -1 (for e), not 0.0",
        ),
        (
            layer("b", "BatchNorm", "batch_norm_param { use_global_stats: 1 }"),
            "batch_norm_param.use_global_stats must be true or false, not 1",
        ),
        (
            layer("r", "ReLU", "loss_weight: 1 loss_weight: 2"),
            "loss_weight has 2 values for 1 tops",
        ),
        (
            layer("r", "ReLU", "propagate_down: true propagate_down: false"),
            "propagate_down has 2 values for 1 bottoms",
        ),
        (
            layer("e", "EuclideanLoss", "loss_param { normalize: true }", ("data", "data")),
            "loss_param is not a field a EuclideanLoss layer reads",
        ),
        (
            layer("e", "EuclideanLoss", "", ("data", "in")),
            "bottom 'in' is not produced",
        ),
        (
            layer("s", "Scale", "scale_param { num_axes: 4 }"),
            "scale_param.num_axes 4 does not fit an input of 4 axes from axis 1",
        ),
        (
            layer("p", "PReLU", 'prelu_param { filler { type: "msra" sparse: 1 } }'),
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
        (layer("d", "Data", 'data_param { source: "x" }', ()), "data_param.batch_size is required"),
        (
            layer("d", "Data", "transform_param { crop_size: 10 } " + _BATCH, ()),
            "crop_size 10 is larger than the data set's 8x8 images",
        ),
        (
            layer("d", "Data", "transform_param { mean_value: 1 mean_value: 2 } " + _BATCH, ()),
            "transform_param.mean_value has 2 values; give one, or one per channel (1)",
        ),
        (
            layer("d", "Data", "data_param { batch_size: 2 crop_size: 4 }", ()),
            "data_param.crop_size is not supported: crop_size is deprecated in Caffe",
        ),
        (
            layer("d", "Input", _SHAPE % (28, 28), ()),
            "input_param.shape declares samples of 1x28x28 but the data set gives 1x8x8; set "
            "caffe.resize: [28, 28]",
        ),
        (
            layer(
                "d",
                "MemoryData",
                "memory_data_param { batch_size: 2 channels: 3 height: 8 width: 8 }",
                (),
                ("data", "label"),
            ),
            "memory_data_param declares samples of 3x8x8 but the data set gives 1x8x8",
        ),
        (
            layer("d", "ImageData", "image_data_param { new_height: 16 new_width: 16 }", ()),
            "image_data_param new_height/new_width declares samples of 1x16x16 but the data set "
            "gives 1x8x8; set caffe.resize: [16, 16]",
        ),
        (
            layer("d", "Input", "transform_param { scale: 2 } " + _SHAPE % (8, 8), ()),
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
        layer("d", "HDF5Data", "hdf5_data_param { batch_size: 4 }", (), ("data", "label"))
        + layer("ip", "InnerProduct", "inner_product_param { num_output: 5 }")
        + layer("loss", "SoftmaxWithLoss", "", ("ip", "label"))
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
        layer("d", "Input", "input_param { shape { dim: 2 dim: 4 } }", (), ("data",))
        + layer("ip", "InnerProduct", ip % (3, "TRAIN"))
        + layer("ip", "InnerProduct", ip % (5, "TEST"))
    )
    train, test = (build_graph(net, phase, (4,), None) for phase in ("TRAIN", "TEST"))
    with pytest.raises(SpecError, match=r"layer 'ip' \(InnerProduct\): the TEST net's blobs"):
        check_shared(train, test)


def test_crop_and_mirror_need_images() -> None:
    net = parse(layer("d", "Data", "transform_param { mirror: true } " + _BATCH, ()))
    with pytest.raises(SpecError) as info:
        build_graph(net, "TRAIN", (64,), None)
    assert "crop_size/mirror need image samples (C, H, W); the data set's samples are 64" in str(
        info.value
    )


def test_a_misspelt_phase_rule_is_refused_in_every_phase() -> None:
    text = layer("r", "ReLU", "include { phase: TRIAN }")
    for phase in ("TRAIN", "TEST"):
        message = refusal(text, phase=phase)
        assert (
            "layer 'r' (ReLU): include.phase must be one of TRAIN, TEST, not Ident('TRIAN')"
            in message
        )
