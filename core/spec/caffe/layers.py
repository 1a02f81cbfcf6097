"""The layer types Sweepstack builds from a Caffe net: the fields each reads, its shapes.

`LAYER_TYPES` maps a Caffe type name to a `LayerType`: the ``*_param`` messages it reads
(with their schema in `core.spec.caffe.fields`), how many bottoms and tops it takes, whether it
is a loss layer (its first top weighted 1 by default) or a data layer (where the spec's data
set plugs in, `core.spec.caffe.data`), and its shape rule (`core.spec.caffe.shapes`).
`REFUSED_TYPES` names Caffe types that are known but not built, with what to use instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from core.spec.caffe import shapes
from core.spec.caffe.data import data_shapes
from core.spec.caffe.shapes import Ctx, Shaped

Rule = Callable[[Ctx], Shaped]


@dataclass(frozen=True)
class LayerType:
    """What Sweepstack knows of one Caffe layer type."""

    params: dict[str, str]  # LayerParameter field -> schema name in core.spec.caffe.fields
    bottoms: tuple[int, int | None]  # fewest, most (None: no limit)
    tops: tuple[int, int | None]
    rule: Rule
    loss: bool = False
    data: bool = False


_ONE = (1, 1)
_LOSS = {"loss_param": "LossParameter"}


def _unary(param: str | None, schema: str | None, rule: Rule = shapes.same) -> LayerType:
    return LayerType({param: schema} if param and schema else {}, _ONE, _ONE, rule)


_DATA_TRANSFORM = {"transform_param": "TransformationParameter"}

#: Every layer type Sweepstack builds, by Caffe's type name.
LAYER_TYPES: dict[str, LayerType] = {
    "Data": LayerType(
        {"data_param": "DataParameter", **_DATA_TRANSFORM}, (0, 0), (1, 2), data_shapes, data=True
    ),
    "ImageData": LayerType(
        {"image_data_param": "ImageDataParameter", **_DATA_TRANSFORM},
        (0, 0),
        (1, 2),
        data_shapes,
        data=True,
    ),
    "MemoryData": LayerType(
        {"memory_data_param": "MemoryDataParameter", **_DATA_TRANSFORM},
        (0, 0),
        (1, 2),
        data_shapes,
        data=True,
    ),
    "HDF5Data": LayerType(
        {"hdf5_data_param": "HDF5DataParameter", **_DATA_TRANSFORM},
        (0, 0),
        (1, 2),
        data_shapes,
        data=True,
    ),
    "Input": LayerType({"input_param": "InputParameter"}, (0, 0), (1, 2), data_shapes, data=True),
    "Convolution": _unary("convolution_param", "ConvolutionParameter", shapes.convolution),
    "Pooling": LayerType({"pooling_param": "PoolingParameter"}, _ONE, (1, 1), shapes.pooling),
    "InnerProduct": _unary("inner_product_param", "InnerProductParameter", shapes.inner_product),
    "ReLU": _unary("relu_param", "ReLUParameter"),
    "PReLU": _unary("prelu_param", "PReLUParameter", shapes.prelu),
    "ELU": _unary("elu_param", "ELUParameter"),
    "Sigmoid": _unary("sigmoid_param", "SigmoidParameter"),
    "TanH": _unary("tanh_param", "TanHParameter"),
    "AbsVal": _unary(None, None),
    "Power": _unary("power_param", "PowerParameter"),
    "Exp": _unary("exp_param", "ExpParameter", shapes.exp),
    "Log": _unary("log_param", "LogParameter", shapes.log),
    "Dropout": _unary("dropout_param", "DropoutParameter", shapes.dropout),
    "BatchNorm": _unary("batch_norm_param", "BatchNormParameter", shapes.batch_norm),
    "Scale": LayerType({"scale_param": "ScaleParameter"}, (1, 2), _ONE, shapes.scale),
    "LRN": _unary("lrn_param", "LRNParameter", shapes.lrn),
    "Flatten": _unary("flatten_param", "FlattenParameter", shapes.flatten),
    "Reshape": _unary("reshape_param", "ReshapeParameter", shapes.reshape),
    "Concat": LayerType({"concat_param": "ConcatParameter"}, (1, None), _ONE, shapes.concat),
    "Slice": LayerType({"slice_param": "SliceParameter"}, _ONE, (1, None), shapes.slice),
    "Split": LayerType({}, _ONE, (1, None), shapes.split),
    "Eltwise": LayerType({"eltwise_param": "EltwiseParameter"}, (2, None), _ONE, shapes.eltwise),
    "Softmax": _unary("softmax_param", "SoftmaxParameter", shapes.softmax),
    "SoftmaxWithLoss": LayerType(
        {"softmax_param": "SoftmaxParameter", **_LOSS},
        (2, 2),
        (1, 2),
        shapes.softmax_loss,
        loss=True,
    ),
    "SigmoidCrossEntropyLoss": LayerType(_LOSS, (2, 2), _ONE, shapes.pairwise_loss, loss=True),
    "EuclideanLoss": LayerType({}, (2, 2), _ONE, shapes.pairwise_loss, loss=True),
    "Accuracy": LayerType({"accuracy_param": "AccuracyParameter"}, (2, 2), (1, 2), shapes.accuracy),
}

#: Caffe layer types that are known but not built, with what to use instead.
REFUSED_TYPES: dict[str, str] = {
    "Deconvolution": "transposed convolution is not supported",
    "Im2col": "use Convolution",
    "Bias": "use Scale with bias_term: true",
    "Embed": "use InnerProduct on one-hot inputs",
    "LSTM": "recurrent layers are not supported",
    "RNN": "recurrent layers are not supported",
    "BNLL": "use Softmax/Sigmoid layers of the list",
    "Threshold": "it has no gradient",
    "ArgMax": "it has no gradient; use Accuracy",
    "Crop": "cropping layers are not supported",
    "Tile": "tiling is not supported",
    "Reduction": "use Pooling (global) or InnerProduct",
    "MVN": "use BatchNorm",
    "Silence": "remove the layer (unused tops are fine)",
    "SPP": "use Pooling",
    "HingeLoss": "use SoftmaxWithLoss",
    "InfogainLoss": "use SoftmaxWithLoss",
    "MultinomialLogisticLoss": "use SoftmaxWithLoss",
    "ContrastiveLoss": "use EuclideanLoss",
    "DummyData": "the spec's dataset feeds the net: use Data or Input",
    "WindowData": "the spec's dataset feeds the net: use Data or Input",
    "Python": "Python layers run user code inside Caffe; write the layer in PyTorch instead",
}
