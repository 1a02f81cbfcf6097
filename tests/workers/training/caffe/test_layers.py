"""Caffe's layer semantics in PyTorch, each against a value worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from core.errors import TrainingError
from core.spec.caffe.net import build_graph
from core.spec.caffe.prototxt import parse
from workers.training.caffe.model import CaffeNet

F64 = torch.float64


def t(values: object) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


def layer(name: str, kind: str, rest: str = "", bottoms: str = "data", tops: str = "") -> str:
    """One layer's text; `bottoms` and `tops` are space-separated names (tops: the name)."""
    wires = [f'bottom: "{b}"' for b in bottoms.split()]
    wires += [f'top: "{top}"' for top in (tops or name).split()]
    return f'layer {{ name: "{name}" type: "{kind}" {" ".join(wires)} {rest} }}\n'


def net(body: str, shape: tuple[int, ...], label: bool = False, phase: str = "TRAIN") -> CaffeNet:
    """A CaffeNet of an Input (`shape`, batch first) feeding `body`, in float64."""
    dims = " ".join(f"dim: {d}" for d in shape)
    tops = 'top: "data" top: "label"' if label else 'top: "data"'
    text = f'layer {{ name: "in" type: "Input" {tops} input_param {{ shape {{ {dims} }} }} }}\n'
    graph = build_graph(parse(text + body), phase, shape[1:], None)
    return CaffeNet(graph, None, torch.Generator().manual_seed(0), F64)


def run(body: str, x: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    model = net(body, tuple(x.shape), labels is not None)
    inputs = {"data": x} if labels is None else {"data": x, "label": labels}
    return model(inputs)


def pool(params: str, x: torch.Tensor) -> torch.Tensor:
    return run(layer("p", "Pooling", f"pooling_param {{ {params} }}"), x)["p"]


ROW = t([[[[1.0, 2.0, 3.0, 4.0]]]])  # (1, 1, 1, 4)


def test_pooling_rounds_up_and_clips_the_last_window() -> None:
    x = torch.arange(1.0, 10.0, dtype=F64).reshape(1, 1, 3, 3)
    assert torch.equal(pool("pool: MAX kernel_size: 2 stride: 2", x), t([[[[5, 6], [8, 9]]]]))
    # the last window holds one value, and AVE divides by 1 (clipped to the input)
    assert torch.equal(pool("pool: AVE kernel_size: 2 stride: 2", x), t([[[[3, 4.5], [7.5, 9]]]]))


def test_pooling_windows_in_the_padding() -> None:
    one_row = "kernel_h: 1 kernel_w: 2 stride_h: 1 stride_w: 2 pad_h: 0 pad_w: 1"
    # windows [-1, 1), [1, 3), [3, 5): the last ends in the padding; AVE counts the pad cell
    assert torch.equal(pool(f"pool: MAX {one_row}", ROW), t([[[[1, 3, 4]]]]))
    assert torch.equal(pool(f"pool: AVE {one_row}", ROW), t([[[[0.5, 2.5, 2.0]]]]))
    # pad 2 with kernel 3 (PyTorch refuses pad > kernel / 2): windows [-2, 1), [0, 3), [2, 5)
    wide = "kernel_h: 1 kernel_w: 3 stride_h: 1 stride_w: 2 pad_h: 0 pad_w: 2"
    assert torch.equal(pool(f"pool: MAX {wide}", ROW), t([[[[1, 3, 4]]]]))
    assert torch.allclose(pool(f"pool: AVE {wide}", ROW), t([[[[1 / 3, 2, 7 / 3]]]]))
    glob = pool("pool: AVE global_pooling: true", torch.arange(8.0, dtype=F64).reshape(1, 2, 2, 2))
    assert torch.equal(glob, t([[[[1.5]], [[5.5]]]]))


def test_max_pooling_gradient_goes_to_the_real_maximum() -> None:
    x = t([[[[1.0, 5.0, 2.0]]]]).requires_grad_()
    pool("pool: MAX kernel_h: 1 kernel_w: 2 stride_h: 1 stride_w: 2", x).sum().backward()
    assert torch.equal(x.grad, t([[[[0.0, 1.0, 1.0]]]]))  # type: ignore[arg-type]


def test_lrn_across_and_within_channels() -> None:
    lrn = layer("l", "LRN", "lrn_param { ARGS }")
    x = t([1.0, 2.0, 3.0]).reshape(1, 3, 1, 1)
    # k + alpha/n * (sum of squares of the 3 channels around): 1 + 5, 1 + 14, 1 + 13
    across = run(lrn.replace("ARGS", "local_size: 3 alpha: 3 beta: 1 k: 1"), x)["l"]
    assert torch.allclose(across.flatten(), t([1 / 6, 2 / 15, 3 / 14]))
    # 1 + alpha * mean over the 3x3 window (pad 1, divisor 9) of x^2 = 4; k is not used
    args = "local_size: 3 alpha: 9 beta: 1 k: 5 norm_region: WITHIN_CHANNEL"
    twos = torch.full((1, 1, 3, 3), 2.0, dtype=F64)
    within = run(lrn.replace("ARGS", args), twos)["l"][0, 0]
    assert torch.allclose(within[0], t([2 / 17, 2 / 25, 2 / 17]))  # corners see 4 cells, edges 6
    assert torch.allclose(within[1, 1], t(2 / 37))


def test_batch_norm_keeps_caffes_running_sums() -> None:
    body = """layer { name: "bn" type: "BatchNorm" bottom: "data" top: "data"
      batch_norm_param { moving_average_fraction: 0.5 eps: 0 } }"""
    model = net(body, (4, 1))
    x = t([[1.0], [2.0], [3.0], [4.0]])
    y = model({"data": x})["data"]
    assert torch.allclose(y, (x - 2.5) / math.sqrt(1.25))  # the batch's biased variance
    mean, var, factor = model.held[0].blobs()[1]
    assert torch.allclose(torch.cat([mean, var, factor]), t([2.5, 1.25 * 4 / 3, 1.0]))
    model({"data": torch.zeros(4, 1, dtype=F64)})  # factor 0.5 + 1, sums halved
    assert torch.allclose(torch.cat([mean, var, factor]), t([1.25, 5 / 6, 1.5]))
    test = model({"data": x}, "TRAIN")  # still batch statistics in TRAIN
    assert torch.allclose(test["data"], (x - 2.5) / math.sqrt(1.25))
    fixed = net(body.replace("eps: 0", "eps: 0 use_global_stats: true"), (4, 1))
    fixed.held[0].blobs()[1][0].fill_(2.0)
    fixed.held[0].blobs()[1][1].fill_(8.0)
    fixed.held[0].blobs()[1][2].fill_(2.0)  # mean 1, variance 4
    assert torch.allclose(fixed({"data": x})["data"], (x - 1) / 2)


def test_scale_with_bias_and_prelu() -> None:
    body = (
        layer("s", "Scale", "scale_param { bias_term: true }")
        + layer("p", "PReLU")
        + layer("q", "PReLU", "prelu_param { channel_shared: true }")
    )
    model = net(body, (1, 2, 1))
    scale, bias = model.held[0].params
    assert torch.equal(scale.data, t([1.0, 1.0])) and torch.equal(bias.data, t([0.0, 0.0]))
    assert torch.equal(model.held[1].params[0].data, t([0.25, 0.25]))
    with torch.no_grad():
        scale.copy_(t([2.0, 3.0]))
        bias.copy_(t([1.0, -1.0]))
        model.held[1].params[0].copy_(t([0.1, 0.5]))
    blobs = model({"data": t([[[-1.0], [-2.0]]])})
    assert torch.equal(blobs["s"], t([[[-1.0], [-7.0]]]))
    assert torch.allclose(blobs["p"], t([[[-0.1], [-1.0]]]))
    assert torch.allclose(blobs["q"], t([[[-0.25], [-0.5]]]))


def test_inner_product_flattens_from_its_axis() -> None:
    body = """layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
      inner_product_param { num_output: 1 axis: 2 weight_filler { type: "constant" value: 1 } } }
    layer { name: "all" type: "InnerProduct" bottom: "data" top: "all"
      inner_product_param { num_output: 1 bias_filler { type: "constant" value: 0.5 }
        weight_filler { type: "constant" value: 1 } transpose: true } }"""
    x = torch.arange(24.0, dtype=F64).reshape(2, 3, 4)
    blobs = run(body, x)
    assert torch.equal(blobs["ip"], x.sum(2, keepdim=True))  # (2, 3, 1)
    assert torch.equal(blobs["all"], x.reshape(2, -1).sum(1, keepdim=True) + 0.5)


def test_eltwise_coefficients_and_max_gradient() -> None:
    body = layer("sl", "Slice", "slice_param { slice_point: 1 slice_point: 2 }", tops="a b c")
    body += layer("sum", "Eltwise", "eltwise_param { coeff: 1 coeff: -2 }", "a b")
    body += layer("prod", "Eltwise", "eltwise_param { operation: PROD }", "a b c")
    body += layer("max", "Eltwise", "eltwise_param { operation: MAX }", "a c")
    body += layer("cat", "Concat", "concat_param { axis: 1 }", "c a")
    x = t([[3.0, 2.0, 3.0]]).requires_grad_()
    blobs = run(body, x)
    assert blobs["sum"].item() == -1.0 and blobs["prod"].item() == 18.0
    assert torch.equal(blobs["cat"], t([[3.0, 3.0]]))
    blobs["max"].sum().backward()
    assert torch.equal(x.grad, t([[1.0, 0.0, 0.0]]))  # type: ignore[arg-type]  # the first max


def test_power_exp_log_relu_elu_and_dropout() -> None:
    body = (
        layer("pow", "Power", "power_param { power: 2 scale: 3 shift: 1 }")
        + layer("exp", "Exp", "exp_param { base: 2 shift: 1 }")
        + layer("e", "Exp")
        + layer("log", "Log", "log_param { base: 10 scale: 50 }")
        + layer("relu", "ReLU", "relu_param { negative_slope: 0.1 }")
        + layer("elu", "ELU", "elu_param { alpha: 2 }")
        + layer("abs", "AbsVal")
    )
    blobs = run(body, t([[2.0, -1.0]]))
    assert torch.equal(blobs["pow"], t([[49.0, 4.0]]))
    assert torch.allclose(blobs["exp"], t([[8.0, 1.0]]))
    assert torch.allclose(blobs["e"], t([[math.e**2, math.e**-1]]))
    assert torch.allclose(blobs["log"][0, 0], t(2.0))
    assert torch.allclose(blobs["relu"], t([[2.0, -0.1]]))
    assert torch.allclose(blobs["elu"], t([[2.0, 2 * (math.exp(-1) - 1)]]))
    assert torch.equal(blobs["abs"], t([[2.0, 1.0]]))
    dropout = layer("d", "Dropout", "dropout_param { dropout_ratio: 0.75 }", tops="data")
    drop = net(dropout, (1, 1000))
    torch.manual_seed(0)
    ones = torch.ones(1, 1000, dtype=F64)
    dropped = drop({"data": ones})["data"]
    assert set(dropped.unique().tolist()) == {0.0, 4.0}  # kept values scaled by 1 / (1 - 0.75)
    assert torch.equal(drop({"data": ones}, "TRAIN")["data"].ne(0).sum() > 0, torch.tensor(True))
    feed = layer("in", "Input", "input_param { shape { dim: 1 dim: 1000 } }", "", "data")
    graph = build_graph(parse(feed + dropout), "TEST", (1000,), None)
    test_model = CaffeNet(graph, graph, torch.Generator(), F64)
    assert torch.equal(test_model({"data": ones}, "TEST")["data"], ones)  # the identity in TEST


def test_softmax_with_loss_ignore_label_and_normalization() -> None:
    scores, labels = torch.zeros(4, 2, dtype=F64), t([0, 1, 1, 0])
    body = layer("loss", "SoftmaxWithLoss", "ARGS", "data label")
    log2 = math.log(2)
    cases = {
        "": log2,  # 4 log 2 / 4 labels
        "loss_param { ignore_label: 1 }": log2,  # 2 log 2 / 2 valid labels
        "loss_param { ignore_label: 1 normalize: false }": log2 / 2,  # / batch 4
        "loss_param { ignore_label: 1 normalization: FULL }": log2 / 2,
        "loss_param { ignore_label: 1 normalization: NONE }": 2 * log2,
        "loss_param { ignore_label: 1 normalization: VALID normalize: false }": log2,
    }
    for extra, expected in cases.items():
        loss = run(body.replace("ARGS", extra), scores, labels)["loss"]
        assert math.isclose(loss.item(), expected), extra


def test_softmax_with_loss_clamps_at_flt_min_but_keeps_the_gradient() -> None:
    scores = t([[0.0, -200.0]]).requires_grad_()
    body = layer("loss", "SoftmaxWithLoss", "", "data label", "loss prob")
    blobs = run(body, scores, t([1]))
    assert math.isclose(blobs["loss"].item(), -math.log(1.17549435e-38), rel_tol=1e-9)
    blobs["loss"].backward()
    assert torch.allclose(scores.grad, t([[1.0, -1.0]]))  # type: ignore[arg-type]  # p - 1[label]
    assert torch.allclose(blobs["prob"].sum(), t(1.0))


def test_accuracy_counts_ties_against_and_honours_top_k() -> None:
    scores = t([[1.0, 1.0, 0.0], [0.0, 2.0, 1.0], [3.0, 2.0, 1.0], [0.0, 5.0, 1.0]])
    labels = t([0, 2, 1, 1])
    body = layer("acc", "Accuracy", "ARGS", "data label", "acc per")
    top1 = run(body.replace("ARGS", ""), scores, labels)
    assert top1["acc"].item() == 0.25  # only the last; the first ties with class 1
    assert torch.equal(top1["per"], t([0.0, 0.5, 0.0]))
    assert (
        run(body.replace("ARGS", "accuracy_param { top_k: 2 }"), scores, labels)["acc"].item()
        == 1.0
    )
    ignored = run(body.replace("ARGS", "accuracy_param { ignore_label: 0 }"), scores, labels)
    assert ignored["acc"].item() == 1 / 3


def test_sigmoid_cross_entropy_and_euclidean_losses() -> None:
    body = (
        layer("sl", "Slice", "slice_param { axis: 1 }", tops="x y")
        + layer("xe", "SigmoidCrossEntropyLoss", "", "x y")
        + layer("eu", "EuclideanLoss", "loss_weight: 0.5", "x y")
    )
    data = t([[0.0, 1.0], [0.0, 0.0], [100.0, 1.0], [-100.0, 1.0]])  # (x, target) rows
    model = net(body, (4, 2))
    blobs = model({"data": data})
    # log 2 + log 2 + 0 + 100, divided by the batch size (Caffe's default for this loss)
    assert math.isclose(blobs["xe"].item(), (2 * math.log(2) + 100) / 4, rel_tol=1e-12)
    assert math.isclose(blobs["eu"].item(), (1 + 0 + 99**2 + 101**2) / (2 * 4))
    assert math.isclose(model.loss(blobs).item(), blobs["xe"].item() + 0.5 * blobs["eu"].item())
    assert model.outputs(blobs) == {"xe": blobs["xe"].item(), "eu": blobs["eu"].item()}


def test_labels_outside_the_classes_fail_the_trial() -> None:
    body = layer("loss", "SoftmaxWithLoss", "", "data label")
    with pytest.raises(TrainingError, match=r"a label lies outside \[0, 2\)"):
        run(body, torch.zeros(2, 2, dtype=F64), t([0, 2]))


def test_convolution_pad_stride_dilation_and_group() -> None:
    ones = 'weight_filler { type: "constant" value: 1 } bias_term: false'
    conv = (
        "convolution_param { num_output: 2 kernel_h: 1 kernel_w: 2 dilation: 2 stride_h: 1 "
        f"stride_w: 2 pad_h: 0 pad_w: 1 group: 2 {ones} }}"
    )
    x = torch.cat([ROW, 10 * ROW], dim=1)  # channels [1 2 3 4] and [10 20 30 40]
    x = torch.cat([x, t([[[[5.0]], [[50.0]]]])], dim=3)  # widths of 5
    out = run(layer("c", "Convolution", conv), x)["c"]
    # padded [0 1 2 3 4 5 0], taps i and i + 2 from i = 0, 2, 4; each group sees its channel
    assert torch.equal(out, t([[[[2.0, 6.0, 4.0]], [[20.0, 60.0, 40.0]]]]))


def test_softmax_along_its_axis() -> None:
    x = torch.arange(6.0, dtype=F64).reshape(1, 2, 3)
    out = run(layer("s", "Softmax", "softmax_param { axis: 2 }"), x)["s"]
    assert torch.allclose(out.sum(2), torch.ones(1, 2, dtype=F64))
    assert torch.allclose(out[0, 0], torch.softmax(t([0.0, 1.0, 2.0]), 0))
