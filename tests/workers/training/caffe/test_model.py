"""CaffeNet: every layer type forward and backward, blobs shared across phases, the solver's
view of the parameters, and equality with the same net written by hand in PyTorch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from core.errors import TrainingError
from core.spec.caffe.layers import LAYER_TYPES
from core.spec.caffe.net import build_graph
from core.spec.caffe.prototxt import parse
from workers.training.caffe.model import CaffeNet

# Every layer type that computes (the data layers are fed), wired into one net.
EVERY_LAYER = """
name: "every"
layer { name: "data" type: "Data" top: "data" top: "label" data_param { batch_size: 4 } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
  convolution_param { num_output: 4 kernel_size: 3 pad: 1 group: 2
    weight_filler { type: "msra" } } }
layer { name: "bn" type: "BatchNorm" bottom: "conv" top: "conv" }
layer { name: "scale" type: "Scale" bottom: "conv" top: "conv" scale_param { bias_term: true } }
layer { name: "prelu" type: "PReLU" bottom: "conv" top: "conv" }
layer { name: "lrn" type: "LRN" bottom: "conv" top: "lrn" lrn_param { local_size: 3 } }
layer { name: "pool" type: "Pooling" bottom: "lrn" top: "pool"
  pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 } }
layer { name: "split" type: "Split" bottom: "pool" top: "p1" top: "p2" }
layer { name: "slice" type: "Slice" bottom: "p1" top: "s1" top: "s2" }
layer { name: "concat" type: "Concat" bottom: "s2" bottom: "s1" top: "cat" }
layer { name: "eltwise" type: "Eltwise" bottom: "cat" bottom: "p2" top: "elt"
  eltwise_param { operation: MAX } }
layer { name: "relu" type: "ReLU" bottom: "elt" top: "elt" relu_param { negative_slope: 0.1 } }
layer { name: "elu" type: "ELU" bottom: "elt" top: "elu" }
layer { name: "tanh" type: "TanH" bottom: "elu" top: "tanh" }
layer { name: "abs" type: "AbsVal" bottom: "tanh" top: "abs" }
layer { name: "power" type: "Power" bottom: "abs" top: "power" power_param { shift: 1 power: 2 } }
layer { name: "log" type: "Log" bottom: "power" top: "log" }
layer { name: "exp" type: "Exp" bottom: "log" top: "exp" exp_param { scale: 0.1 } }
layer { name: "flatten" type: "Flatten" bottom: "exp" top: "flat" }
layer { name: "reshape" type: "Reshape" bottom: "flat" top: "re"
  reshape_param { shape { dim: 0 dim: -1 } } }
layer { name: "dropout" type: "Dropout" bottom: "re" top: "re" }
layer { name: "ip" type: "InnerProduct" bottom: "re" top: "ip"
  inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.1 sparse: 2 } } }
layer { name: "sigmoid" type: "Sigmoid" bottom: "ip" top: "sig" }
layer { name: "softmax" type: "Softmax" bottom: "ip" top: "prob" }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
layer { name: "xent" type: "SigmoidCrossEntropyLoss" bottom: "ip" bottom: "prob" top: "xent" }
layer { name: "euclid" type: "EuclideanLoss" bottom: "sig" bottom: "prob" top: "euclid" }
layer { name: "accuracy" type: "Accuracy" bottom: "ip" bottom: "label" top: "accuracy" }
"""


def build(
    text: str,
    shape: tuple[int, ...],
    classes: int | None,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
) -> CaffeNet:
    net = parse(text, "net.prototxt")
    train = build_graph(net, "TRAIN", shape, classes)
    test = build_graph(net, "TEST", shape, classes)
    return CaffeNet(train, test, torch.Generator().manual_seed(seed), dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_every_layer_runs_forward_and_backward(dtype: torch.dtype) -> None:
    kinds = {m.get("type") for m in parse(EVERY_LAYER).getall("layer")}  # type: ignore[union-attr]
    assert kinds >= {k for k, spec in LAYER_TYPES.items() if not spec.data}
    model = build(EVERY_LAYER, (2, 6, 6), 3, dtype=dtype)
    graph = model.graphs["TRAIN"]
    x = torch.randn(4, 2, 6, 6, generator=torch.Generator().manual_seed(1), dtype=dtype)
    for phase in ("TRAIN", "TEST"):
        model.zero_grad()
        blobs = model({"data": x, "label": torch.tensor([0, 1, 2, 1])}, phase)
        assert {name: tuple(b.shape) for name, b in blobs.items()} == graph.shapes
        loss = model.loss(blobs, phase)
        assert loss.dtype == dtype and torch.isfinite(loss)
        loss.backward()
        for info in model.param_infos():
            assert info.param.dtype == dtype and info.param.grad is not None, info.layer
        outputs = model.outputs(blobs, phase)
        assert set(outputs) == {"loss", "xent", "euclid", "accuracy"}
    assert model.training is False  # TEST ran last


def test_layers_of_one_name_share_blobs_across_phases() -> None:
    text = """
    layer { name: "in" type: "Input" top: "data" top: "label"
      input_param { shape { dim: 3 dim: 4 } } }
    layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
      param { lr_mult: 1 decay_mult: 1 } param { lr_mult: 2 decay_mult: 0 }
      inner_product_param { num_output: 2 weight_filler { type: "xavier" } } }
    layer { name: "bn" type: "BatchNorm" bottom: "ip" top: "ip" param { lr_mult: 0 } }
    layer { name: "probe" type: "InnerProduct" bottom: "ip" top: "probe" include { phase: TEST }
      inner_product_param { num_output: 1 } }
    layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
    """
    model = build(text, (4,), 2)
    train_ip = model._steps["TRAIN"][0]
    test_ip = model._steps["TEST"][0]
    assert train_ip.held == test_ip.held  # one set of blobs
    assert model._steps["TRAIN"][1].held == model._steps["TEST"][1].held  # BatchNorm's sums too
    infos = model.param_infos()
    assert [(i.layer, i.index, i.lr_mult, i.decay_mult) for i in infos] == [
        ("ip", 0, 1.0, 1.0),
        ("ip", 1, 2.0, 0.0),
    ]  # BatchNorm's statistics and the TEST-only probe are not the solver's
    assert [tuple(i.param.shape) for i in infos] == [(2, 4), (2,)]
    assert sum(p.numel() for p in model.parameters()) == 10 + 3  # the probe exists, untrained
    assert len(list(model.buffers())) == 3
    x = torch.randn(3, 4, dtype=torch.float64)
    model({"data": x, "label": torch.tensor([0, 1, 0])}, "TRAIN")
    assert float(model.held[1].stat2[0]) == 1.0  # the TRAIN pass moved the shared statistics


def test_the_generator_seeds_the_weights() -> None:
    def weights(seed: int) -> list[torch.Tensor]:
        model = build(EVERY_LAYER, (2, 6, 6), 3, seed=seed)
        return [i.param.detach().clone() for i in model.param_infos()]

    same, other = weights(5), weights(6)
    assert all(torch.equal(a, b) for a, b in zip(weights(5), same, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(other, same, strict=True))


def test_propagate_down_false_stops_the_gradient() -> None:
    text = """
    layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 } } }
    layer { name: "a" type: "InnerProduct" bottom: "data" top: "a"
      inner_product_param { num_output: 3 weight_filler { type: "gaussian" } } }
    layer { name: "b" type: "InnerProduct" bottom: "a" top: "b" propagate_down: false
      inner_product_param { num_output: 1 weight_filler { type: "gaussian" } } }
    layer { name: "out" type: "Power" bottom: "b" top: "out" loss_weight: 1 }
    """
    model = build(text, (3,), None)
    blobs = model({"data": torch.ones(2, 3, dtype=torch.float64)})
    model.loss(blobs).backward()
    a, b = model.held
    assert a.params[0].grad is None and b.params[0].grad is not None
    assert model.outputs(blobs) == {"out": float(blobs["out"].detach().sum())}


def test_inputs_the_net_needs_must_be_fed() -> None:
    model = build(EVERY_LAYER, (2, 6, 6), 3)
    with pytest.raises(TrainingError, match="needs 'label', which the data set did not feed"):
        model({"data": torch.zeros(4, 2, 6, 6)})
    with pytest.raises(TrainingError, match="the input 'data' was not fed"):
        model({"label": torch.zeros(4)})
    only_train = CaffeNet(
        build_graph(parse(EVERY_LAYER), "TRAIN", (2, 6, 6), 3), None, torch.Generator()
    )
    with pytest.raises(TrainingError, match="the net has no TEST phase"):
        only_train({"data": torch.zeros(4, 2, 6, 6)}, "TEST")


LENET = """
layer { name: "d" type: "Data" top: "data" top: "label" data_param { batch_size: 8 } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 4 kernel_size: 3 weight_filler { type: "xavier" } } }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "ip1" type: "InnerProduct" bottom: "pool1" top: "ip1"
  inner_product_param { num_output: 16 weight_filler { type: "xavier" }
    bias_filler { type: "constant" value: 0.1 } } }
layer { name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
  inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }
"""


def test_a_lenet_equals_the_same_net_written_in_pytorch() -> None:
    model = build(LENET, (1, 8, 8), 10)
    w = [i.param for i in model.param_infos()]
    gen = torch.Generator().manual_seed(2)
    x = torch.rand(8, 1, 8, 8, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 10, (8,), generator=gen)
    blobs = model({"data": x, "label": y})
    loss = model.loss(blobs)
    loss.backward()
    ours = [p.grad.clone() for p in w]  # type: ignore[union-attr]
    leaves = [p.detach().clone().requires_grad_() for p in w]
    h = F.max_pool2d(F.conv2d(x, leaves[0], leaves[1]), 2, 2, ceil_mode=True)  # 6x6 -> 3x3
    h = F.relu(F.linear(h.flatten(1), leaves[2], leaves[3]))
    by_hand = F.cross_entropy(F.linear(h, leaves[4], leaves[5]), y)
    by_hand.backward()
    assert abs(loss.item() - by_hand.item()) <= 1e-12
    for mine, theirs in zip(ours, leaves, strict=True):
        assert torch.allclose(mine, theirs.grad, atol=1e-12, rtol=0)  # type: ignore[arg-type]
    assert torch.equal(w[3].detach(), torch.full((16,), 0.1, dtype=torch.float64))
