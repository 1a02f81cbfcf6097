"""Image data for Caffe nets: digits, .npz, folders of PNG/JPEG by class, resize, transform."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from core.errors import TrainingError
from core.spec.caffe.prototxt import parse
from core.spec.caffe.transform import TransformParam
from core.spec.config import DatasetConfig
from workers.training.bundled import load_bundled
from workers.training.caffe import image_files, images
from workers.training.caffe.images import (
    ImageSource,
    Transform,
    clear_image_cache,
    load_images,
    sequential_batch,
)


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    clear_image_cache()
    yield
    clear_image_cache()


def write_png(path: Path, pixels: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels.astype(np.uint8)).save(path)


def gray_folder(root: Path, per_class: int = 4, size: tuple[int, int] = (6, 5)) -> Path:
    folder = root / "shapes"
    for label, value in (("circle", 50), ("square", 200)):
        for i in range(per_class):
            write_png(folder / label / f"{i}.png", np.full(size, value + i))
    return folder


def test_digits_are_1x8x8_images_split_by_class() -> None:
    data = load_images(DatasetConfig(name="digits", validation_fraction=0.25, split_seed=3))
    flat, target, _ = load_bundled("digits")
    assert data.shape == (1, 8, 8) and (data.n_train, data.n_val) == (1347, 450)
    assert data.n_classes == 10 and data.class_labels == tuple(range(10))
    assert data.x_train.dtype == torch.float32 and data.y_train.dtype == torch.int64
    assert float(data.x_train.max()) == 16.0  # pixel values as they are, not standardised
    # Every image is a digit reshaped row-major, with its own label.
    first = data.x_train[0].reshape(-1).double().numpy()
    row = int(np.flatnonzero((flat == first).all(axis=1))[0])
    assert target[row] == int(data.y_train[0])
    counts = torch.bincount(data.y_val, minlength=10)
    assert int(counts.min()) >= 43  # stratified: each class about a quarter of its rows


def test_resize_is_bilinear_interpolation_of_each_image() -> None:
    plain = load_images(ImageSource(name="digits"), dtype=torch.float64)
    big = load_images(ImageSource(name="digits"), resize=(28, 28), dtype=torch.float64)
    assert big.shape == (1, 28, 28) and big.x_train.dtype == torch.float64
    expected = torch.nn.functional.interpolate(
        plain.x_train[:3], size=(28, 28), mode="bilinear", align_corners=False
    )
    assert torch.equal(big.x_train[:3], expected)
    assert plain.fingerprint != big.fingerprint
    with pytest.raises(TrainingError, match=r"caffe.resize must be \[H, W\]"):
        load_images(ImageSource(name="digits"), resize=(0, 28))


def test_only_digits_among_the_built_in_sets() -> None:
    with pytest.raises(TrainingError, match="'iris' is not a set of images"):
        load_images(ImageSource(name="iris"))


def test_npz_of_nhw_and_nchw(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "gray.npz", X=rng.random((20, 5, 6)), y=np.arange(20) % 2)
    gray = load_images(ImageSource(path="gray.npz", validation_fraction=0.5), base_dir=tmp_path)
    assert gray.shape == (1, 5, 6) and (gray.n_train, gray.n_val) == (10, 10)
    np.savez(tmp_path / "rgb.npz", X=rng.random((12, 3, 4, 4)), label=np.repeat([3, 7], 6))
    rgb = load_images(ImageSource(path="rgb.npz", target="label"), base_dir=tmp_path)
    assert rgb.shape == (3, 4, 4) and rgb.class_labels == (3, 7)
    assert set(rgb.y_train.tolist()) == {0, 1}
    np.savez(tmp_path / "reg.npz", X=rng.random((10, 2, 2)), y=rng.random(10))
    reg = load_images(ImageSource(path="reg.npz"), base_dir=tmp_path)
    assert reg.task == "regression" and reg.n_classes is None
    assert reg.y_train.dtype == torch.float32


@pytest.mark.parametrize(
    ("arrays", "words"),
    [
        ({"y": np.zeros(3)}, "no array 'X'"),
        ({"X": np.zeros((3, 4)), "y": np.zeros(3)}, r"must be \(N, C, H, W\) or \(N, H, W\)"),
        ({"X": np.zeros((3, 2, 2))}, "no array 'target'"),
        ({"X": np.zeros((3, 2, 2)), "y": np.zeros(4)}, "one value per image of X"),
        ({"X": np.zeros((3, 2, 2, 2, 1)), "y": np.zeros(3)}, "got shape"),
    ],
)
def test_npz_refusals(tmp_path: Path, arrays: dict[str, np.ndarray], words: str) -> None:
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(TrainingError, match=words):
        load_images(ImageSource(path="bad.npz"), base_dir=tmp_path)


def test_npz_ceilings_are_checked_from_the_header(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    np.savez(tmp_path / "big.npz", X=np.zeros((10, 8, 8)), y=np.zeros(10))
    assert image_files.npz_shape(tmp_path / "big.npz", "X") == (10, 8, 8)
    monkeypatch.setattr(images, "MAX_ELEMENTS", 600)
    with pytest.raises(TrainingError, match="holds more than 600 values"):
        load_images(ImageSource(path="big.npz"), base_dir=tmp_path)
    monkeypatch.setattr(images, "MAX_IMAGES", 5)
    with pytest.raises(TrainingError, match="over the limits of 5 images"):
        load_images(ImageSource(path="big.npz"), base_dir=tmp_path)


def test_a_folder_of_gray_pngs_by_class(tmp_path: Path) -> None:
    folder = gray_folder(tmp_path)
    (folder / "circle" / "notes.txt").write_text("not an image")
    data = load_images(
        ImageSource(path="shapes", validation_fraction=0.5), base_dir=tmp_path, dtype=torch.float64
    )
    assert data.shape == (1, 6, 5) and data.class_labels == ("circle", "square")
    assert (data.n_train, data.n_val) == (4, 4)
    x = torch.cat([data.x_train, data.x_val])
    y = torch.cat([data.y_train, data.y_val])
    values = {int(v) for v in x[:, 0, 0, 0]}
    assert values == {50, 51, 52, 53, 200, 201, 202, 203}
    assert all((int(v) >= 200) == bool(label) for v, label in zip(x[:, 0, 0, 0], y, strict=True))
    # An absolute path inside the datasets folder reads the same.
    again = load_images(ImageSource(path=str(folder), validation_fraction=0.5), base_dir=tmp_path)
    assert again.fingerprint != "" and again.n_train == 4


def test_colour_images_are_bgr_and_jpeg_reads(tmp_path: Path) -> None:
    folder = tmp_path / "colours"
    red = np.zeros((4, 4, 3), dtype=np.uint8)
    red[..., 0] = 255  # RGB red
    write_png(folder / "a" / "red.png", red)
    write_png(folder / "a" / "gray.png", np.full((4, 4), 9))
    write_png(folder / "b" / "mid2.png", np.full((4, 4), 7))
    Image.fromarray(np.full((4, 4, 3), 128, dtype=np.uint8)).save(folder / "b" / "mid.jpg")
    data = load_images(ImageSource(path="colours", validation_fraction=0.5), base_dir=tmp_path)
    assert data.shape == (3, 4, 4)
    x = torch.cat([data.x_train, data.x_val])
    reds = [img for img in x if float(img[2].mean()) == 255.0]
    assert len(reds) == 1 and float(reds[0][0].max()) == 0.0  # channel 0 is blue, as in Caffe
    grays = [img for img in x if float(img.mean()) == 9.0]
    assert len(grays) == 1  # a gray image among colour ones gets three equal channels
    jpeg = [img for img in x if abs(float(img.mean()) - 128) < 3]
    assert len(jpeg) == 1


def test_folder_sizes_must_match_unless_resized(tmp_path: Path) -> None:
    folder = gray_folder(tmp_path)
    write_png(folder / "square" / "wide.png", np.full((6, 9), 10))
    with pytest.raises(TrainingError, match=r"shapes/square/wide.png: 6 x 9 pixels, but"):
        load_images(ImageSource(path="shapes"), base_dir=tmp_path)
    data = load_images(ImageSource(path="shapes"), base_dir=tmp_path, resize=(3, 3))
    assert data.shape == (1, 3, 3) and data.n_train + data.n_val == 9


def test_folder_refusals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = gray_folder(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(TrainingError, match="empty: no images; give a folder with one"):
        load_images(ImageSource(path="empty"), base_dir=tmp_path)
    (folder / "square" / "broken.png").write_bytes(b"not a png at all")
    with pytest.raises(
        TrainingError, match=r"shapes/square/broken\.png: cannot read it as an image"
    ):
        load_images(ImageSource(path="shapes"), base_dir=tmp_path)
    (folder / "square" / "broken.png").unlink()
    monkeypatch.setattr(images, "MAX_IMAGE_SIDE", 5)
    with pytest.raises(TrainingError, match="5 x 6 pixels, over the limit of 5 a side"):
        load_images(ImageSource(path="shapes"), base_dir=tmp_path)
    monkeypatch.setattr(images, "MAX_IMAGES", 7)
    with pytest.raises(TrainingError, match="more than 7 images"):
        load_images(ImageSource(path="shapes"), base_dir=tmp_path)


def test_paths_stay_inside_the_datasets_folder(tmp_path: Path) -> None:
    root = tmp_path / "datasets"
    root.mkdir()
    outside = gray_folder(tmp_path)
    for path in ("../shapes", str(outside), "~/shapes"):
        with pytest.raises(TrainingError, match="datasets folder"):
            load_images(ImageSource(path=path), base_dir=root)
    (root / "link").symlink_to(outside)
    with pytest.raises(TrainingError, match="outside the datasets folder"):
        load_images(ImageSource(path="link"), base_dir=root)
    inside = gray_folder(root)
    (inside / "circle" / "escape.png").symlink_to(outside / "square" / "0.png")
    with pytest.raises(TrainingError, match=r"escape\.png: leads outside the folder"):
        load_images(ImageSource(path="shapes"), base_dir=root)
    with pytest.raises(TrainingError, match="no such file or folder"):
        load_images(ImageSource(path="missing"), base_dir=root)
    (root / "table.csv").write_text("a,target\n1,0\n")
    with pytest.raises(TrainingError, match=r"an \.npz file of images or a folder"):
        load_images(ImageSource(path="table.csv"), base_dir=root)


def test_no_dataset_names_the_data_layer() -> None:
    layer = parse('name: "mnist" type: "Data" data_param { source: "train_lmdb" backend: LMDB }')
    with pytest.raises(TrainingError, match="layer 'mnist' \\(Data\\): reads LMDB source"):
        load_images(None, data_layer=layer)


def batch() -> torch.Tensor:
    return torch.arange(2 * 3 * 5 * 5, dtype=torch.float64).reshape(2, 3, 5, 5)


def test_transform_subtracts_the_mean_then_scales() -> None:
    x = batch()
    out = Transform(TransformParam(scale=0.5, mean_value=(1.0, 2.0, 3.0)), 3)(x, "TEST")
    expected = (x - torch.tensor([1.0, 2.0, 3.0]).view(1, 3, 1, 1)) * 0.5
    assert torch.equal(out, expected) and torch.equal(x, batch())  # the input is untouched
    single = Transform(TransformParam(mean_value=(4.0,)), 3)(x, "TRAIN")
    assert torch.equal(single, x - 4.0)
    with pytest.raises(TrainingError, match="gives 2 values for images of 3 channels"):
        Transform(TransformParam(mean_value=(1.0, 2.0)), 3)


def test_crop_is_centred_in_test_and_random_in_train() -> None:
    x = batch()
    crop = Transform(TransformParam(crop_size=3), 3)
    assert torch.equal(crop(x, "TEST"), x[:, :, 1:4, 1:4])
    seen = set()
    for seed in range(20):
        out = crop(x, "TRAIN", torch.Generator().manual_seed(seed))
        for i in range(2):
            offsets = [
                (t, left)
                for t in range(3)
                for left in range(3)
                if torch.equal(out[i], x[i, :, t : t + 3, left : left + 3])
            ]
            assert len(offsets) == 1  # each output is one 3x3 window of its own image
            seen.add(offsets[0])
    assert len(seen) > 4
    again = crop(x, "TRAIN", torch.Generator().manual_seed(5))
    assert torch.equal(again, crop(x, "TRAIN", torch.Generator().manual_seed(5)))
    with pytest.raises(TrainingError, match="crop_size 6 is larger than the images"):
        Transform(TransformParam(crop_size=6), 3)(x, "TEST")


@pytest.mark.parametrize("phase", ["TRAIN", "TEST"])
def test_mirror_flips_at_random_in_either_phase_as_caffe_does(phase: str) -> None:
    x = batch().repeat(8, 1, 1, 1)
    out = Transform(TransformParam(mirror=True), 3)(x, phase, torch.Generator().manual_seed(1))
    flipped = [torch.equal(o, i.flip(-1)) for o, i in zip(out, x, strict=True)]
    kept = [torch.equal(o, i) for o, i in zip(out, x, strict=True)]
    assert all(f or k for f, k in zip(flipped, kept, strict=True))
    assert any(flipped) and any(kept)


def test_batches_follow_on_and_wrap_round() -> None:
    x, y = torch.arange(5.0).view(5, 1, 1, 1), torch.arange(5)
    assert sequential_batch(x, y, 2, 0)[1].tolist() == [0, 1]
    assert sequential_batch(x, y, 2, 2)[1].tolist() == [4, 0]
    xb, yb = sequential_batch(x, y, 7, 1)
    assert yb.tolist() == [2, 3, 4, 0, 1, 2, 3] and xb.shape == (7, 1, 1, 1)


def test_a_folder_reloads_with_a_new_fingerprint_when_its_files_change(tmp_path: Path) -> None:
    folder = gray_folder(tmp_path)
    first = load_images(ImageSource(path="shapes"), base_dir=tmp_path)
    assert load_images(ImageSource(path="shapes"), base_dir=tmp_path) is first  # cached
    image = folder / "circle" / "0.png"
    before = image.stat()
    write_png(image, np.full((6, 5), 99))  # new pixels; a later mtime, as an edit has
    os.utime(image, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
    edited = load_images(ImageSource(path="shapes"), base_dir=tmp_path)
    assert edited is not first and edited.fingerprint != first.fingerprint
    write_png(folder / "square" / "extra.png", np.full((6, 5), 7))
    added = load_images(ImageSource(path="shapes"), base_dir=tmp_path)
    assert added.fingerprint not in (first.fingerprint, edited.fingerprint)
    assert added.n_train + added.n_val == 9


def test_a_folder_of_one_class_or_an_empty_class_is_refused(tmp_path: Path) -> None:
    folder = gray_folder(tmp_path)
    (folder / "triangle").mkdir()
    with pytest.raises(TrainingError, match=r"dataset\.path shapes: the class folder\(s\) trian"):
        load_images(ImageSource(path="shapes"), base_dir=tmp_path)
    (folder / "triangle").rmdir()
    for item in (folder / "square").iterdir():
        item.unlink()
    (folder / "square").rmdir()
    with pytest.raises(TrainingError, match=r"dataset\.path shapes: one class \(circle\)"):
        load_images(ImageSource(path="shapes"), base_dir=tmp_path)
