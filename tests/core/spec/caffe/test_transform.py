"""A data layer's transform_param read and checked; the error for a source-only data layer."""

from __future__ import annotations

import pytest

from core.errors import SpecError
from core.spec.caffe.prototxt import parse
from core.spec.caffe.transform import TransformParam, missing_dataset_message, parse_transform


def transform(text: str) -> TransformParam:
    return parse_transform(parse(text).get("transform_param"), "mnist", "Data", "n.prototxt")  # type: ignore[arg-type]


def problem(text: str) -> str:
    with pytest.raises(SpecError) as info:
        transform(text)
    [found] = info.value.problems
    assert found.path == "caffe.net"
    return found.message


def test_defaults_and_fields() -> None:
    assert parse_transform(None, "mnist", "Data").is_identity
    got = transform(
        "transform_param { scale: 0.00390625 mirror: true crop_size: 24 "
        "mean_value: 104 mean_value: 117 mean_value: 123 }"
    )
    assert got == TransformParam(0.00390625, True, 24, (104.0, 117.0, 123.0))
    assert got.output_shape((3, 32, 30)) == (3, 24, 24)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (
            'mean_file: "mean.binaryproto"',
            "transform_param.mean_file: n.prototxt:1:19: is not supported",
        ),
        ("force_gray: true", "force_gray: n.prototxt:1:19: is not supported"),
        ("crop_size: -1", "crop_size: n.prototxt:1:19: must be in [0, 4096]"),
        ("scale: inf", "scale: n.prototxt:1:19: must be finite"),
        (
            "mean_value: 1 mean_value: x",
            "mean_value: n.prototxt:1:33: must be numbers, got Ident('x') at position 2",
        ),
        ("scal: 2", "is not a field of Caffe's TransformationParameter; did you mean scale?"),
    ],
)
def test_refusals_name_the_layer_and_the_field(body: str, words: str) -> None:
    message = problem(f"transform_param {{ {body} }}")
    assert message.startswith("layer 'mnist' (Data): transform_param.")
    assert words in message


def test_force_gray_false_is_accepted() -> None:
    assert transform("transform_param { force_gray: false force_color: false }").is_identity


def test_output_shape_refuses_a_crop_or_mean_that_cannot_apply() -> None:
    with pytest.raises(ValueError, match="crop_size 10 does not fit images of shape"):
        TransformParam(crop_size=10).output_shape((1, 8, 8))
    with pytest.raises(ValueError, match="gives 2 values for 3 channels"):
        TransformParam(mean_value=(1.0, 2.0)).output_shape((3, 8, 8))
    assert TransformParam(mean_value=(1.0,)).output_shape((3, 8, 8)) == (3, 8, 8)


def test_missing_dataset_names_the_layer_and_its_source() -> None:
    layer = parse(
        'name: "mnist" type: "Data" data_param { source: "mnist_train_lmdb" backend: LMDB }'
    )
    message = missing_dataset_message(layer)
    assert message.startswith(
        "layer 'mnist' (Data): reads LMDB source 'mnist_train_lmdb', which Sweepstack does "
        "not read; no dataset is given for it; give the spec a dataset"
    )
    leveldb = parse('name: "d" type: "Data" data_param { source: "db" }')
    assert "reads LEVELDB source 'db'" in missing_dataset_message(leveldb)
    images = parse('name: "i" type: "ImageData" image_data_param { source: "list.txt" }')
    assert "(ImageData): reads source 'list.txt'" in missing_dataset_message(images)
