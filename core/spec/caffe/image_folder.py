"""A folder of images by class, as a Caffe net's data set: listed and checked, not decoded.

A data set folder holds one sub-folder per class (their sorted names are the classes
0..K-1; names starting with ``.`` are skipped) of PNG or JPEG files (`IMAGE_SUFFIXES`, any
case; other files are skipped). `scan_folder` lists it and checks, from each file's header
(Pillow reads only that), what a worker would otherwise find out after decoding: at least
two classes, images in every class, no image that is a symlink out of the folder, at most
`MAX_IMAGES` images of at most `MAX_IMAGE_SIDE` pixels a side, all of one size unless a
resize is given, and at most `MAX_ELEMENTS` values once loaded. The same scan runs in
`sweepstack validate` and `run` (`core.spec.limits.dataset_file_problems`) and in the worker that
decodes the images (`workers.training.caffe.image_files`), so both refuse the same folders
with the same words. Errors name files as the spec does (``shapes/circle/0.png``), never by
the host's own paths.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
MAX_IMAGES = 200_000
MAX_IMAGE_SIDE = 4096
MAX_ELEMENTS = 100_000_000
#: (images, pixels a side, values loaded).
Limits = tuple[int, int, int]
LIMITS: Limits = (MAX_IMAGES, MAX_IMAGE_SIDE, MAX_ELEMENTS)
# Pillow modes with one channel; every other mode (palette ones too) reads as colour.
_GRAY_MODES = frozenset({"1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "I;16N", "F"})


class ImageFolderError(ValueError):
    """A folder that is not a data set of images by class; the message says why and where."""


@dataclass(frozen=True)
class ImageFile:
    """One image of the folder: where it is, how errors name it, its class and its size."""

    path: Path
    name: str
    label: int
    height: int
    width: int
    gray: bool


@dataclass(frozen=True)
class FolderScan:
    """What a folder holds: its classes, its images, and one loaded image's (C, H, W)."""

    classes: tuple[str, ...]
    files: tuple[ImageFile, ...]
    shape: tuple[int, int, int]

    @property
    def channels(self) -> int:
        return self.shape[0]


def _list(
    folder: Path, shown: str, max_images: int
) -> tuple[list[str], list[tuple[Path, str, int]]]:
    classes = sorted(d.name for d in folder.iterdir() if d.is_dir() and not d.name.startswith("."))
    files: list[tuple[Path, str, int]] = []
    empty = []
    for index, label in enumerate(classes):
        before = len(files)
        for item in sorted((folder / label).iterdir()):
            if item.suffix.lower() not in IMAGE_SUFFIXES or not item.is_file():
                continue
            name = f"{shown}/{label}/{item.name}"
            if not Path(os.path.realpath(item)).is_relative_to(folder):
                raise ImageFolderError(f"{name}: leads outside the folder (a symlink)")
            files.append((item, name, index))
            if len(files) > max_images:
                raise ImageFolderError(f"{shown}: more than {max_images:,} images")
        if len(files) == before:
            empty.append(label)
    suffixes = ", ".join(IMAGE_SUFFIXES)
    if not files:
        raise ImageFolderError(
            f"{shown}: no images; give a folder with one sub-folder per class holding "
            f"{suffixes} files"
        )
    if empty:
        raise ImageFolderError(
            f"{shown}: the class folder(s) {', '.join(empty)} hold no {suffixes} files; every "
            "class sub-folder needs images (other files are skipped)"
        )
    if len(classes) < 2:
        raise ImageFolderError(
            f"{shown}: one class ({classes[0]}); a data set of images by class needs at "
            "least two class sub-folders"
        )
    return classes, files


def _header(path: Path, name: str) -> tuple[int, int, bool]:
    """(height, width, grayscale) from the file's header; nothing is decoded."""
    from PIL import Image  # only the commands that check folders need Pillow

    try:
        with Image.open(path) as image:
            width, height = image.size
            return height, width, image.mode in _GRAY_MODES
    except (OSError, ValueError, Image.DecompressionBombError) as err:
        raise ImageFolderError(
            f"{name}: cannot read it as an image ({type(err).__name__})"
        ) from None


def scan_folder(
    folder: Path, shown: str, resize: tuple[int, int] | None = None, limits: Limits = LIMITS
) -> FolderScan:
    """List and check the images of `folder` (named `shown` in errors); see the module.

    Raises `ImageFolderError`. The loaded shape is one channel when every image is
    grayscale, else three, at the `resize` (H, W) or the images' common size.
    """
    max_images, max_side, max_elements = limits
    folder = Path(os.path.realpath(folder))
    if not folder.is_dir():
        raise ImageFolderError(f"{shown}: not a folder; give a folder of class sub-folders")
    classes, listed = _list(folder, shown, max_images)
    files = []
    for path, name, label in listed:
        height, width, gray = _header(path, name)
        if max(width, height) > max_side:
            raise ImageFolderError(
                f"{name}: {width} x {height} pixels, over the limit of {max_side} a side"
            )
        files.append(ImageFile(path, name, label, height, width, gray))
    first = files[0]
    if resize is None:
        odd = next((f for f in files if (f.height, f.width) != (first.height, first.width)), None)
        if odd is not None:
            raise ImageFolderError(
                f"{odd.name}: {odd.height} x {odd.width} pixels, but {first.name} has "
                f"{first.height} x {first.width}; give caffe.resize [H, W]"
            )
    channels = 1 if all(f.gray for f in files) else 3
    height, width = resize if resize is not None else (first.height, first.width)
    if len(files) * channels * height * width > max_elements:
        raise ImageFolderError(
            f"{shown}: {len(files):,} images of {channels} x {height} x {width} hold more "
            f"than {max_elements:,} values, over the limit"
        )
    return FolderScan(tuple(classes), tuple(files), (channels, height, width))
