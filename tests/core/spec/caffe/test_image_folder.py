"""A folder of PNG/JPEG files by class as a Caffe net's data set: the spec's rules for
``dataset.path``, the folder's checks (`core.spec.caffe.image_folder`) and what `sweepstack
validate` reports (`core.spec.limits.dataset_file_problems`), on tiny images written by Pillow."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from cli.main import main
from core.errors import SpecError
from core.settings import Settings
from core.spec.caffe.image_folder import ImageFolderError, scan_folder
from core.spec.caffe.spec import CaffeSpec
from core.spec.limits import dataset_file_problems, spec_limit_problems
from core.spec.sweep import load_spec
from scheduler.expand import expand

NET = """name: "Tiny"
layer { name: "data" type: "Data" top: "data" top: "label"
  data_param { source: "unused_lmdb" batch_size: 4 } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 2 kernel_size: KERNEL } }
layer { name: "ip1" type: "InnerProduct" bottom: "conv1" top: "ip1"
  inner_product_param { num_output: 3 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip1" bottom: "label" top: "loss" }
"""
SOLVER = 'base_lr: 0.01\nlr_policy: "fixed"\nmax_iter: 5\n'


def write_png(path: Path, pixels: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels.astype(np.uint8)).save(path)


def shapes(root: Path, classes: tuple[str, ...] = ("circle", "square")) -> Path:
    folder = root / "shapes"
    for value, label in enumerate(classes):
        for i in range(2):
            write_png(folder / label / f"{i}.png", np.full((6, 5), 40 * value + i))
    return folder


def caffe_spec(path: object, kernel: int = 3, **extra: object) -> CaffeSpec:
    spec = load_spec(
        {
            "name": "folder",
            "caffe": {"net_text": NET.replace("KERNEL", str(kernel)), "solver_text": SOLVER,
                      **extra},
            "dataset": {"path": path},
        }
    )  # fmt: skip
    assert isinstance(spec, CaffeSpec)
    return spec


def file_problems(spec: CaffeSpec, root: Path) -> list[str]:
    settings = dataclasses.replace(Settings(), datasets_dir=root)
    return [
        str(p) for p in spec_limit_problems(spec, settings) + dataset_file_problems(spec, settings)
    ]


def test_a_folder_lists_its_classes_files_and_loaded_shape(tmp_path: Path) -> None:
    folder = shapes(tmp_path, ("b", "a", ".hidden"))
    (folder / "a" / "notes.txt").write_text("skipped")
    write_png(folder / "a" / "upper.PNG", np.zeros((6, 5)))
    scan = scan_folder(folder, "shapes")
    assert scan.classes == ("a", "b") and scan.shape == (1, 6, 5)
    assert [f.name for f in scan.files] == [
        "shapes/a/0.png", "shapes/a/1.png", "shapes/a/upper.PNG", "shapes/b/0.png",
        "shapes/b/1.png",
    ]  # fmt: skip
    assert [f.label for f in scan.files] == [0, 0, 0, 1, 1]
    Image.fromarray(np.zeros((3, 3, 3), dtype=np.uint8)).save(folder / "b" / "colour.jpg")
    assert scan_folder(folder, "shapes", resize=(4, 4)).shape == (3, 4, 4)  # one colour: 3


def _empty_class(folder: Path) -> None:
    for item in (folder / "circle").iterdir():
        item.unlink()


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (_empty_class, "shapes: the class folder(s) circle hold no .png, .jpg, .jpeg files"),
        (lambda f: (f / "circle").rename(f / ".circle"), "shapes: one class (square); a data"),
        (lambda f: (f / "square" / "x.png").write_bytes(b"no png"), "shapes/square/x.png: cannot"),
        (
            lambda f: write_png(f / "square" / "wide.png", np.zeros((6, 9))),
            "shapes/square/wide.png: 6 x 9 pixels, but shapes/circle/0.png has 6 x 5; give "
            "caffe.resize [H, W]",
        ),
        (
            lambda f: write_png(f / "square" / "huge.png", np.zeros((6, 40))),
            "shapes/square/huge.png: 40 x 6 pixels, over the limit of 32 a side",
        ),
    ],
)
def test_folder_refusals_name_the_file_or_class(
    tmp_path: Path, make: Callable[[Path], object], words: str
) -> None:
    folder = shapes(tmp_path)
    make(folder)
    with pytest.raises(ImageFolderError) as info:
        scan_folder(folder, "shapes", limits=(100, 32, 10_000))
    assert str(info.value).startswith(words)


def test_count_and_value_ceilings_and_links_out(tmp_path: Path) -> None:
    folder = shapes(tmp_path / "root")
    with pytest.raises(ImageFolderError, match=r"^shapes: more than 3 images$"):
        scan_folder(folder, "shapes", limits=(3, 100, 10**6))
    with pytest.raises(ImageFolderError, match="4 images of 1 x 6 x 5 hold more than 100 values"):
        scan_folder(folder, "shapes", limits=(10, 100, 100))
    write_png(tmp_path / "elsewhere.png", np.zeros((6, 5)))
    (folder / "circle" / "link.png").symlink_to(tmp_path / "elsewhere.png")
    with pytest.raises(ImageFolderError, match=r"^shapes/circle/link.png: leads outside"):
        scan_folder(folder, "shapes")
    with pytest.raises(ImageFolderError, match="empty: no images; give a folder with one"):
        (tmp_path / "empty").mkdir()
        scan_folder(tmp_path / "empty", "empty")


def test_only_a_caffe_spec_may_name_a_folder() -> None:
    with pytest.raises(SpecError) as info:
        load_spec({"name": "mlp", "dataset": {"path": "shapes"}})
    (problem,) = info.value.problems
    assert problem.path == "dataset.path"
    assert problem.message.startswith("must end in one of .npz, .csv, .parquet; a folder of ")
    assert "is a data set for Caffe nets only (a spec with a caffe section)" in problem.message
    spec = caffe_spec("shapes")
    (trial,) = expand(spec, with_config=True)
    assert trial.config["dataset"] == {"path": "shapes"}
    with pytest.raises(SpecError, match=r"dataset\.path: a Caffe net reads images, not a csv"):
        caffe_spec("table.csv")
    with pytest.raises(SpecError, match=r"dataset\.path: must not contain a \.\. part"):
        caffe_spec("../shapes")


def test_validate_checks_the_folder_and_builds_the_net_on_its_images(tmp_path: Path) -> None:
    shapes(tmp_path)
    assert file_problems(caffe_spec("shapes"), tmp_path) == []
    assert file_problems(caffe_spec(str(tmp_path / "shapes")), tmp_path) == []
    # The net is built on the folder's 1 x 6 x 5 images: a kernel of 6 does not fit.
    (problem,) = file_problems(caffe_spec("shapes", kernel=6), tmp_path)
    assert problem.startswith("caffe.net: layer 'conv1' (Convolution): convolution_param: ")
    assert problem.endswith("(when dataset.path=shapes)")
    assert file_problems(caffe_spec("shapes", kernel=6, resize=[8, 8]), tmp_path) == []
    (missing,) = file_problems(caffe_spec("nothing"), tmp_path)
    assert missing == (
        f"dataset.path: names no folder in the datasets folder {tmp_path} "
        "(SWEEPSTACK_DATASETS_DIR), got 'nothing'"
    )
    (tmp_path / "file.png").write_bytes(b"")
    (problem,) = file_problems(caffe_spec("file.png"), tmp_path)
    assert problem.startswith("dataset.path: is a file, but a Caffe net reads an .npz file or a")
    write_png(tmp_path / "shapes" / "square" / "big.png", np.zeros((7, 7)))
    (problem,) = file_problems(caffe_spec("shapes"), tmp_path)
    assert problem.startswith("dataset.path: shapes/square/big.png: 7 x 7 pixels, but")


def test_a_folder_outside_the_datasets_folder_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    shapes(tmp_path)
    (root / "link").symlink_to(tmp_path / "shapes")
    for path in ("link", str(tmp_path / "shapes")):
        (problem,) = file_problems(caffe_spec(path), root)
        assert "the datasets folder; give a path inside it" in problem


def test_sweepstack_validate_on_a_folder(tmp_path: Path) -> None:
    shapes(tmp_path / "data")
    (tmp_path / "net.prototxt").write_text(NET.replace("KERNEL", "3"))
    (tmp_path / "solver.prototxt").write_text(SOLVER)
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: f\ncaffe: {net: net.prototxt, solver: solver.prototxt}\ndataset: {path: shapes}\n"
    )
    env = {"SWEEPSTACK_DATASETS_DIR": str(tmp_path / "data")}
    result = CliRunner().invoke(main, ["validate", str(spec)], env=env)
    assert result.exit_code == 0, result.output
    (tmp_path / "data" / "shapes" / "circle" / "0.png").unlink()
    (tmp_path / "data" / "shapes" / "circle" / "1.png").unlink()
    result = CliRunner().invoke(main, ["validate", str(spec)], env=env)
    assert result.exit_code == 2
    assert "error: dataset.path: shapes: the class folder(s) circle hold no" in result.output
