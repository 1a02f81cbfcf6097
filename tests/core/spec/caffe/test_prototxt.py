"""The prototxt reader and writer: Caffe's text format without Caffe."""

from __future__ import annotations

import math

import pytest

from core.spec.caffe.prototxt import MAX_TEXT_BYTES, Ident, Message, PrototxtError, dumps, parse

LENET_HEAD = """
name: "LeNet"  # a comment
layer {
  name: "mnist" type: "Data" top: "data" top: "label"
  include { phase: TRAIN }
  transform_param { scale: 0.00390625 mirror: false }
  data_param { source: "examples/mnist/mnist_train_lmdb" batch_size: 64 backend: LMDB }
}
layer < name: 'conv1' type: "Convolution" bottom: "data" top: "conv1"
  param { lr_mult: 1 } param { lr_mult: 2 }
  convolution_param { num_output: 20 kernel_size: 5 weight_filler { type: "xavier" } }
>
"""


def test_fields_keep_their_order_repeats_and_kinds() -> None:
    net = parse(LENET_HEAD, "lenet.prototxt")
    assert net.get("name") == "LeNet"
    data, conv = net.getall("layer")
    assert data.getall("top") == ["data", "label"]
    phase = data.get("include").get("phase")  # type: ignore[union-attr]
    assert isinstance(phase, Ident) and phase == "TRAIN"
    assert data.get("transform_param").get("mirror") is False  # type: ignore[union-attr]
    assert conv.get("name") == "conv1"  # single quotes, angle brackets
    assert [p.get("lr_mult") for p in conv.getall("param")] == [1, 2]
    assert conv.field("name").line == 9  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("x: 5", 5),
        ("x: -3", -3),
        ("x: 0x10", 16),
        ("x: 1e-4", 1e-4),
        ("x: .5", 0.5),
        ("x: 5f", 5.0),
        ("x: 2.", 2.0),
        ("x: true", True),
        ("x: f", False),
        ('x: "a\\"b\\n"', 'a"b\n'),
        ('x: "a" "b"', "ab"),
        ("x: -inf", -math.inf),
    ],
)
def test_scalars(text: str, value: object) -> None:
    got = parse(text).get("x")
    assert got == value and type(got) is type(value)


def test_lists_are_repeated_values_and_separators_are_optional() -> None:
    msg = parse("stepvalue: [1000, 2000]; stepvalue: 3000, base_lr: 0.01")
    assert msg.getall("stepvalue") == [1000, 2000, 3000]
    assert msg.get("base_lr") == 0.01


def test_nan_reads_as_a_float() -> None:
    assert math.isnan(parse("x: nan").get("x"))  # type: ignore[arg-type]


def test_dumps_reads_back_to_the_same_fields() -> None:
    net = parse(LENET_HEAD)
    again = parse(dumps(net))
    assert again.to_dict() == net.to_dict()
    assert dumps(again) == dumps(net)
    assert "phase: TRAIN" in dumps(net) and 'name: "mnist"' in dumps(net)


def test_set_replaces_in_place_and_copy_is_deep() -> None:
    net = parse(LENET_HEAD)
    changed = net.copy()
    conv = changed.getall("layer")[1].get("convolution_param")
    assert isinstance(conv, Message)
    conv.set("num_output", 50)
    conv.set("pad", 2)
    assert conv.names() == ["num_output", "kernel_size", "weight_filler", "pad"]
    assert conv.get("num_output") == 50
    assert net.getall("layer")[1].get("convolution_param").get("num_output") == 20  # type: ignore[union-attr]
    assert parse(dumps(changed)).getall("layer")[1].get("convolution_param").get("num_output") == 50  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "where", "says"),
    [
        ('layer { name: "x" ', "1:19", "expected '}' to close the message opened at line 1"),
        ("a: ", "1:4", "expected a value for field 'a'"),
        ('layer { name "x" }', "1:14", "expected ':' or '{' after field 'name'"),
        ('a: "x\nb: 1', "1:4", "a string is not closed on its line"),
        ("a: [1 2]", "1:7", "expected ',' or ']' in a list"),
        ("}", "1:1", "expected a field name"),
        ("a: 1\n  b: @", "2:6", "unexpected character '@'"),
        ('a: "\\q"', "1:5", "unknown escape"),
    ],
)
def test_errors_name_file_line_and_column(text: str, where: str, says: str) -> None:
    with pytest.raises(PrototxtError) as err:
        parse(text, "net.prototxt")
    assert str(err.value).startswith(f"net.prototxt:{where}: ")
    assert says in str(err.value)


def test_size_and_depth_have_ceilings() -> None:
    with pytest.raises(PrototxtError, match="larger than"):
        parse("a: 1\n" * (MAX_TEXT_BYTES // 4))
    with pytest.raises(PrototxtError, match="nest more than"):
        parse("a { " * 40 + "}" * 40)
    with pytest.raises(PrototxtError, match="not UTF-8"):
        parse(b"a: \xff")
