"""What `sweepstack validate` finds before a worker would: a TRAIN net without a loss, an
.npz file's image shape against the net's input, an evaluation larger than the validation
split, and every problem of a spec in one run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from cli.main import main
from core.errors import SpecError
from core.spec.sweep import load_spec
from tests.core.spec.caffe.test_spec import NET, SOLVER


def _spec(net: str = NET, solver: str = SOLVER, **top: object) -> dict:
    doc: dict = {"name": "s", "caffe": {"net_text": net, "solver_text": solver},
                 "dataset": {"name": "digits"}}  # fmt: skip
    doc.update(top)
    return doc


def _problems(doc: dict) -> dict[str, str]:
    with pytest.raises(SpecError) as info:
        load_spec(doc)
    return {p.path: p.message for p in info.value.problems}


def test_a_train_net_without_a_loss_is_refused_at_validation() -> None:
    net = NET.replace('type: "SoftmaxWithLoss"', 'type: "Softmax"').replace(
        'bottom: "label" top: "loss"', 'top: "prob"'
    )
    message = _problems(_spec(net))["caffe.net"]
    assert message.startswith("the TRAIN net has no loss: no layer's top has a loss_weight")
    assert "its last layer is 'loss' (Softmax)" in message
    assert "add a loss layer (SoftmaxWithLoss" in message


def test_an_evaluation_larger_than_the_validation_split_names_test_iter() -> None:
    solver = SOLVER.replace("test_iter: 1", "test_iter: 30")  # 30 x 16 = 480 > 360
    message = _problems(_spec(solver=solver))["caffe.solver.test_iter"]
    assert message == (
        "30 x the TEST batch size 16 (layer 'data') = 480 images per evaluation, more than "
        "the 360 of the validation split (dataset.validation_fraction 0.2 of 1797 images); "
        "lower test_iter to 22 or raise dataset.validation_fraction"
    )
    load_spec(_spec(solver=SOLVER.replace("test_iter: 1", "test_iter: 22")))


def test_every_problem_of_a_spec_shows_in_one_run() -> None:
    net = NET.replace("kernel_size: 3", "kernel_size: 30")
    objective = {"metric": "val_accuracy", "direction": "up"}
    problems = _problems(_spec(net, objective=objective, search={"algorithm": "nope"}, trainer=1))
    assert set(problems) >= {"objective.direction", "search.algorithm", "trainer", "caffe.net"}
    assert "kernel 30 is larger than its padded input 8" in problems["caffe.net"]


def _write_npz(path: Path, x_shape: tuple[int, ...]) -> None:
    np.savez(path, X=np.zeros(x_shape, np.uint8), y=np.arange(x_shape[0]) % 2)


def test_validate_reads_an_npz_shape_and_lists_all_problems(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    _write_npz(data / "wide.npz", (40, 1, 8, 12))  # the net's Input says 1 x 8 x 8
    (tmp_path / "net.prototxt").write_text(NET)
    (tmp_path / "solver.prototxt").write_text(SOLVER.replace("test_iter: 1", "test_iter: 2"))
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: s\ncaffe: {net: net.prototxt, solver: solver.prototxt}\n"
        "dataset: {path: wide.npz}\nobjective: {metric: val_accuracy, direction: up}\n"
    )
    env = {"SWEEPSTACK_DATASETS_DIR": str(data)}
    result = CliRunner().invoke(main, ["validate", str(spec)], env=env)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert any(line.startswith("error: objective.direction:") for line in lines)
    shape = [line for line in lines if "input_param.shape declares" in line]
    assert shape and "samples of 1x8x8 but the data set gives 1x8x12" in shape[0]
    assert "(when dataset.path=wide.npz of X shape [40, 1, 8, 12])" in shape[0]

    _write_npz(data / "wide.npz", (40, 8, 8))  # (N, H, W): one channel
    spec.write_text("name: s\ncaffe: {net: net.prototxt, solver: solver.prototxt}\n"
                    "dataset: {path: wide.npz}\n")  # fmt: skip
    result = CliRunner().invoke(main, ["validate", str(spec)], env=env)
    # 2 x 16 images per evaluation, of the 8 held out of 40
    assert "error: caffe.solver.test_iter: 2 x the TEST batch size 16" in result.output
    assert "more than the 8 of the validation split" in result.output

    (data / "bad.npz").write_text("not a zip")
    spec.write_text(spec.read_text().replace("wide.npz", "bad.npz"))
    result = CliRunner().invoke(main, ["validate", str(spec)], env=env)
    assert "error: dataset.path: cannot read it as npz (BadZipFile), got 'bad.npz'" in result.output


_CIFAR_QUICK = """name: "CIFAR10_quick_like"
layer { name: "cifar" type: "Data" top: "data" top: "label" include { phase: TRAIN }
  transform_param { mean_file: "cifar_mean.binaryproto" }
  data_param { source: "examples/cifar10/cifar10_train_lmdb" batch_size: 20 backend: LMDB } }
layer { name: "cifar" type: "Data" top: "data" top: "label" include { phase: TEST }
  transform_param { mean_file: "cifar_mean.binaryproto" }
  data_param { source: "examples/cifar10/cifar10_test_lmdb" batch_size: 20 backend: LMDB } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 8 pad: 2 kernel_size: 5 stride: 1 } }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
  pooling_param { pool: MAX kernel_size: 3 stride: 2 } }
layer { name: "relu1" type: "ReLU" bottom: "pool1" top: "pool1" }
layer { name: "ip1" type: "InnerProduct" bottom: "pool1" top: "ip1"
  inner_product_param { num_output: 2 } }
layer { name: "accuracy" type: "Accuracy" bottom: "ip1" bottom: "label" top: "accuracy"
  include { phase: TEST } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip1" bottom: "label" top: "loss" }
"""


def _blobproto(channels: int, height: int, width: int, values: list[float]) -> bytes:
    """A BlobProto as Caffe's compute_image_mean writes it: num, channels, height, width,
    then the data as packed floats."""
    import struct

    def varint(n: int) -> bytes:
        out = b""
        while True:
            out += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
            n >>= 7
            if not n:
                return out

    head = b"".join(bytes([k << 3]) + varint(v) for k, v in
                    ((1, 1), (2, channels), (3, height), (4, width)))  # fmt: skip
    data = struct.pack(f"<{len(values)}f", *values)
    return head + bytes([5 << 3 | 2]) + varint(len(data)) + data


def test_blob_means_are_the_channel_means_of_a_binaryproto() -> None:
    from core.spec.caffe.mean_file import blob_means

    values = [1.0] * 4 + [2.0, 4.0, 6.0, 8.0] + [0.5] * 4
    assert blob_means(_blobproto(3, 2, 2, values)) == [1.0, 5.0, 0.5]
    with pytest.raises(ValueError):
        blob_means(_blobproto(3, 2, 2, values[:-1]))


def test_a_mean_file_is_refused_with_the_mean_values_it_would_take(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    np.savez(data / "tiny.npz", X=np.zeros((40, 3, 8, 8), np.uint8), y=np.arange(40) % 2)
    (tmp_path / "net.prototxt").write_text(_CIFAR_QUICK)
    (tmp_path / "solver.prototxt").write_text(SOLVER)
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: s\ncaffe: {net: net.prototxt, solver: solver.prototxt}\n"
                    "dataset: {path: tiny.npz, validation_fraction: 0.5}\n")  # fmt: skip
    env = {"SWEEPSTACK_DATASETS_DIR": str(data)}
    result = CliRunner().invoke(main, ["validate", str(spec)], env=env)
    assert result.exit_code == 2
    assert (
        "error: caffe.net.layer[cifar].transform_param.mean_file: is not read (a worker reads "
        "no .binaryproto file); give the mean per channel as transform_param { mean_value: ... }"
        "; with 'cifar_mean.binaryproto' in the datasets folder (SWEEPSTACK_DATASETS_DIR), "
        "validate prints them, got 'cifar_mean.binaryproto'"
    ) in result.output
    values = [125.25] * 64 + [123.0] * 64 + [114.5] * 64
    (data / "cifar_mean.binaryproto").write_bytes(_blobproto(3, 8, 8, values))
    result = CliRunner().invoke(main, ["validate", str(spec)], env=env)
    assert (
        "mean_value: ... }: mean_value: 125.25 mean_value: 123 mean_value: 114.5 (the channel "
        "means of cifar_mean.binaryproto)"
    ) in result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1  # both data layers "cifar" say the same, once; nothing else
    fixed = _CIFAR_QUICK.replace(
        'mean_file: "cifar_mean.binaryproto"',
        "mean_value: 125.25 mean_value: 123 mean_value: 114.5",
    )
    (tmp_path / "net.prototxt").write_text(fixed)
    result = CliRunner().invoke(main, ["validate", str(spec)], env=env)
    assert result.exit_code == 0, result.output
