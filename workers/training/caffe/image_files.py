"""Image files read into arrays for `workers.training.caffe.images`: a folder of PNG/JPEG
files by class (Pillow; listed and checked by `core.spec.caffe.image_folder`) and an .npz of
images, each held to the ceilings before decoding.

Both return ``(x, y)``: ``x`` float64 of shape (N, C, H, W), already resized when a
`resize` is given to `read_folder` (its images may differ in size), and ``y`` as stored
(an .npz) or class-folder names (a folder). `limits` is ``(images, side, elements)``.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from core.errors import TrainingError
from core.spec.caffe.image_folder import ImageFolderError, scan_folder
from core.spec.caffe.npz import npz_shape

_Limits = tuple[int, int, int]


def read_folder(
    folder: Path, shown: str, resize: tuple[int, int] | None, limits: _Limits
) -> tuple[np.ndarray, np.ndarray]:
    """Every image of `folder`'s class sub-folders (sorted names are the classes), listed
    and checked by `core.spec.caffe.image_folder.scan_folder` before any is decoded."""
    try:
        scan = scan_folder(folder, shown, resize, limits)
    except ImageFolderError as err:
        raise TrainingError(f"dataset.path {err}") from None
    height, width = scan.shape[1:]
    x = np.empty((len(scan.files), scan.channels, height, width), dtype=np.float64)
    for row, image in enumerate(scan.files):
        x[row] = _decode(image.path, image.name, scan.channels, resize)
    return x, np.asarray([scan.classes[image.label] for image in scan.files])


def _open(path: Path, name: str) -> Image.Image:
    try:
        return Image.open(path)
    except (OSError, ValueError, Image.DecompressionBombError) as err:
        raise TrainingError(
            f"dataset.path {name}: cannot read it as an image ({type(err).__name__})"
        ) from None


def _decode(path: Path, name: str, channels: int, resize: tuple[int, int] | None) -> np.ndarray:
    """One image as (C, H, W) float64, 8-bit values, BGR for colour (Caffe's order)."""
    with _open(path, name) as image:
        try:
            pixels = np.asarray(image.convert("L" if channels == 1 else "RGB"), dtype=np.float64)
        except (OSError, ValueError) as err:
            raise TrainingError(
                f"dataset.path {name}: cannot decode it ({type(err).__name__})"
            ) from None
    array = pixels[None] if channels == 1 else pixels[:, :, ::-1].transpose(2, 0, 1)
    if resize is not None and array.shape[1:] != resize:
        tensor = torch.from_numpy(np.ascontiguousarray(array))[None]
        tensor = torch.nn.functional.interpolate(
            tensor, size=resize, mode="bilinear", align_corners=False
        )
        return tensor[0].numpy()
    return array


def read_npz(
    path: Path, shown: str, target: str | None, resize: tuple[int, int] | None, limits: _Limits
) -> tuple[np.ndarray, np.ndarray]:
    """``X`` (N, C, H, W) or (N, H, W) and its labels from an .npz, checked from the header."""
    max_images, max_side, max_elements = limits
    try:
        shape = npz_shape(path, "X")
    except (OSError, ValueError, zipfile.BadZipFile) as err:
        raise TrainingError(
            f"dataset.path {shown}: cannot read it as npz ({type(err).__name__})"
        ) from None
    if shape is None:
        raise TrainingError(f"dataset.path {shown}: no array 'X'")
    if len(shape) not in (3, 4):
        raise TrainingError(
            f"dataset.path {shown}: 'X' must be (N, C, H, W) or (N, H, W) images, got shape "
            f"{tuple(shape)}"
        )
    full = shape if len(shape) == 4 else (shape[0], 1, *shape[1:])
    height, width = resize if resize is not None else full[2:]
    if full[0] > max_images or max(full[2:]) > max_side:
        raise TrainingError(
            f"dataset.path {shown}: 'X' of shape {tuple(shape)} is over the limits of "
            f"{max_images:,} images and {max_side} pixels a side"
        )
    if (
        max(full[0] * full[1] * full[2] * full[3], full[0] * full[1] * height * width)
        > max_elements
    ):
        raise TrainingError(
            f"dataset.path {shown}: 'X' of shape {tuple(shape)} holds more than "
            f"{max_elements:,} values, over the limit"
        )
    with np.load(path, allow_pickle=False) as archive:
        key = target or ("y" if "y" in archive.files else "target")
        if key not in archive.files:
            raise TrainingError(f"dataset.target: no array {key!r} in {shown}")
        try:
            x, y = archive["X"], archive[key]
        except (OSError, ValueError) as err:
            raise TrainingError(
                f"dataset.path {shown}: cannot read it as npz ({type(err).__name__})"
            ) from None
    if not np.issubdtype(x.dtype, np.number) or x.dtype == np.bool_:
        raise TrainingError(f"dataset.path {shown}: 'X' must be numeric, got dtype {x.dtype}")
    y = y.reshape(-1) if y.ndim == 2 and y.shape[1] == 1 else y
    if y.ndim < 1 or y.shape[0] != x.shape[0]:
        raise TrainingError(
            f"dataset.target: {key!r} in {shown} must have one value per image of X "
            f"({x.shape[0]}), got shape {y.shape}"
        )
    return x.reshape(full).astype(np.float64), y
