"""Image data sets for Caffe nets, as N x C x H x W tensors, and Caffe's per-batch transform.

Sources (`ImageSource`), each split into train and validation rows as the tabular sets are
(`dataset.validation_fraction`, `dataset.split_seed`, stratified by class):

- the bundled digits, as 1797 images of 1 x 8 x 8 with pixel values 0-16 (read by
  `workers.training.bundled`, as the MLP's digits are);
- an ``.npz`` file with ``X`` of shape (N, C, H, W) or (N, H, W) (one channel) and ``y``
  (or the key ``dataset.target`` names): integer labels become classes 0..K-1, other
  values (or ``task: regression``) stay targets;
- a folder with one sub-folder per class (sorted names are the classes 0..K-1) of PNG or
  JPEG files, decoded to 8 bits as Caffe's OpenCV reads them: one channel when every image
  is grayscale, else three in Caffe's BGR order (so ``mean_value: 104 117 123`` means what
  it means in Caffe); other files are skipped.

Pixel values are kept as they are (no standardisation): a Caffe net scales its own input
(``transform_param.scale``). An optional `resize` (H, W) resizes every image bilinearly
(``torch.nn.functional.interpolate``, ``align_corners=False``) when the set is loaded, so a
net written for 28 x 28 inputs runs on the digits. Images of different sizes need it.

Files are read only inside the datasets folder (``SWEEPSTACK_DATASETS_DIR``): the path and
each image in a folder, symlinks followed. Ceilings: `MAX_IMAGES` images, `MAX_IMAGE_SIDE`
pixels a side (checked from each file's header, before it is decoded) and `MAX_ELEMENTS`
values in the loaded set. Errors name files as the spec and the folder do, never by the
worker's own paths.

`Transform` applies a data layer's ``transform_param`` (`core.spec.caffe.transform`) to a batch,
as Caffe's DataTransformer does: the crop at a random offset in TRAIN and centred in TEST,
a random horizontal flip of each image when ``mirror`` is set (in either phase, as Caffe
draws it whatever the phase), then ``(pixel - mean_value[c]) * scale``. Its random draws
come from the `torch.Generator` it is given, so a seeded trial sees the same batches.
`sequential_batch` reads batches in order, round and round, as a data layer's cursor does.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.errors import TrainingError
from core.spec.caffe.image_folder import IMAGE_SUFFIXES, MAX_ELEMENTS, MAX_IMAGE_SIDE, MAX_IMAGES
from core.spec.caffe.prototxt import Message
from core.spec.caffe.transform import TransformParam, missing_dataset_message
from core.spec.config import DatasetConfig
from workers.training.bundled import load_bundled
from workers.training.caffe.image_files import read_folder, read_npz
from workers.training.datasets import AUTO_CLASSIFICATION_MAX_CLASSES, Dataset, split_rows

logger = logging.getLogger(__name__)

_CACHE_SIZE = 4


@dataclass(frozen=True)
class ImageSource:
    """Where a Caffe trial's images come from: a built-in `name` or a `path` (an .npz file
    or a folder of class sub-folders) in the datasets folder, and how they are split."""

    name: str | None = None
    path: str | None = None
    validation_fraction: float = 0.2
    split_seed: int = 0
    target: str | None = None
    task: str = "auto"

    @classmethod
    def from_config(cls, config: DatasetConfig) -> ImageSource:
        return cls(
            name=config.name,
            path=config.path,
            validation_fraction=config.validation_fraction,
            split_seed=config.split_seed,
            target=config.target,
            task=config.task,
        )


#: A Caffe trial's images: (N, C, H, W) pixel tensors and their labels, split.
ImageSet = Dataset[torch.Tensor]


def load_images(
    source: ImageSource | DatasetConfig | None,
    *,
    resize: tuple[int, int] | None = None,
    base_dir: Path | None = None,
    dtype: torch.dtype = torch.float32,
    data_layer: Message | None = None,
) -> ImageSet:
    """Load, resize and split the images `source` names (cached per worker process).

    `base_dir` is the datasets folder (None: the current folder). `data_layer` is the net's
    data layer, named in the error when no `source` is given. Raises `TrainingError`.
    """
    if source is None:
        if data_layer is not None:
            raise TrainingError(missing_dataset_message(data_layer))
        raise TrainingError("no dataset is given; a Caffe net needs the spec's dataset")
    if isinstance(source, DatasetConfig):
        source = ImageSource.from_config(source)
    if resize is not None:
        if len(resize) != 2 or not all(1 <= int(s) <= MAX_IMAGE_SIDE for s in resize):
            raise TrainingError(
                f"caffe.resize must be [H, W], each in [1, {MAX_IMAGE_SIDE}], got {list(resize)}"
            )
        resize = (int(resize[0]), int(resize[1]))
    key: tuple[Any, ...] | None = None
    if source.path is not None:
        path = _confine(source.path, base_dir if base_dir is not None else Path.cwd())
        key = _file_key(path, source.path)
    elif source.name != "digits":
        raise TrainingError(
            f"dataset.name {source.name!r} is not a set of images; a Caffe net takes digits "
            "(1 x 8 x 8 images), an .npz file of images or a folder of images by class"
        )
    return _load_cached(json.dumps(asdict(source)), key, resize, str(dtype))


def clear_image_cache() -> None:
    """Forget every loaded image set (tests, or a worker told to free memory)."""
    _load_cached.cache_clear()


class Transform:
    """A data layer's ``transform_param`` applied to a batch (B, C, H, W); see the module."""

    def __init__(self, param: TransformParam, channels: int) -> None:
        if param.mean_value and len(param.mean_value) not in (1, channels):
            raise TrainingError(
                f"transform_param.mean_value gives {len(param.mean_value)} values for images "
                f"of {channels} channels; give one, or one per channel"
            )
        self.param = param
        self.channels = channels

    def __call__(
        self, x: torch.Tensor, phase: str, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """The transformed batch, a new tensor (`x` is left as it is)."""
        p = self.param
        batch, _, height, width = x.shape
        if p.crop_size:
            crop = p.crop_size
            if crop > height or crop > width:
                raise TrainingError(
                    f"transform_param.crop_size {crop} is larger than the images "
                    f"({height} x {width}); lower it or resize the data set"
                )
            if phase == "TRAIN":
                top = torch.randint(0, height - crop + 1, (batch,), generator=generator)
                left = torch.randint(0, width - crop + 1, (batch,), generator=generator)
            else:
                top = torch.full((batch,), (height - crop) // 2, dtype=torch.long)
                left = torch.full((batch,), (width - crop) // 2, dtype=torch.long)
            steps = torch.arange(crop)
            rows = (top[:, None] + steps).to(x.device)
            cols = (left[:, None] + steps).to(x.device)
            x = x.gather(2, rows[:, None, :, None].expand(batch, x.shape[1], crop, width))
            x = x.gather(3, cols[:, None, None, :].expand(batch, x.shape[1], crop, crop))
        if p.mirror:
            flip = torch.randint(0, 2, (batch,), generator=generator).bool().to(x.device)
            x = torch.where(flip[:, None, None, None], x.flip(-1), x)
        if p.mean_value:
            mean = torch.tensor(p.mean_value, dtype=x.dtype, device=x.device)
            x = x - mean.view(1, -1, 1, 1)
        if p.scale != 1.0:
            x = x * p.scale
        return x


def sequential_batch(
    x: torch.Tensor, y: torch.Tensor, batch_size: int, step: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The `step`-th batch (from 0) a Caffe data layer reads: the next `batch_size` rows
    after the previous batch's, wrapping round to the first row, as its database cursor
    moves (the rows of a split are already in a seeded random order)."""
    rows = x.shape[0]
    index = (torch.arange(batch_size) + step * batch_size) % rows
    return x[index], y[index]


def _confine(value: str, root: Path) -> Path:
    """`value`'s real path inside the datasets folder `root` (a file or a folder)."""
    if "\x00" in value or value.startswith("~") or ".." in Path(value).parts:
        raise TrainingError(
            f"dataset.path {value}: must not contain NUL, start with ~ or have a .. part "
            "(paths are read from the datasets folder)"
        )
    real_root = Path(os.path.realpath(root))
    given = Path(value)
    real = Path(os.path.realpath(given if given.is_absolute() else Path(root) / given))
    if not real.is_relative_to(real_root) or real == real_root:
        raise TrainingError(
            f"dataset.path {value}: is outside the datasets folder; give a path inside it "
            "(SWEEPSTACK_DATASETS_DIR)"
        )
    if not real.exists():
        raise TrainingError(f"dataset.path {value}: no such file or folder in the datasets folder")
    return real


def _file_key(path: Path, shown: str) -> tuple[Any, ...]:
    """What the cache keys a file or folder by: its path and each image's size and mtime."""
    if path.is_file():
        if path.suffix.lower() != ".npz":
            raise TrainingError(
                f"dataset.path {shown}: a Caffe net reads an .npz file of images or a folder "
                "of images by class"
            )
        stat = path.stat()
        return (str(path), stat.st_mtime_ns, stat.st_size)
    if not path.is_dir():
        raise TrainingError(f"dataset.path {shown}: neither a file nor a folder")
    entries = []
    for folder in sorted(d for d in path.iterdir() if d.is_dir()):
        for item in sorted(folder.iterdir()):
            if item.suffix.lower() in IMAGE_SUFFIXES and item.is_file():
                stat = item.stat()
                entries.append((folder.name, item.name, stat.st_mtime_ns, stat.st_size))
        if len(entries) > MAX_IMAGES:
            raise TrainingError(f"dataset.path {shown}: more than {MAX_IMAGES:,} images")
    return (str(path), tuple(entries))


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _load_cached(
    source_json: str, key: tuple[Any, ...] | None, resize: tuple[int, int] | None, dtype: str
) -> ImageSet:
    source = ImageSource(**json.loads(source_json))
    if key is None:
        flat, labels, _ = load_bundled("digits")
        x = flat.reshape(-1, 1, 8, 8)
        shown = "digits"
    else:
        path, shown = Path(key[0]), str(source.path)
        limits = (MAX_IMAGES, MAX_IMAGE_SIDE, MAX_ELEMENTS)
        if path.is_dir():
            x, labels = read_folder(path, shown, resize, limits)
        else:
            x, labels = read_npz(path, shown, source.target, resize, limits)
    x = _resized(np.asarray(x, dtype=np.float64), resize, shown)
    logger.info("loaded images %s: %d of shape %s", shown, x.shape[0], x.shape[1:])
    return _prepare(source, x, labels, shown, getattr(torch, dtype.removeprefix("torch.")))


def _resized(x: np.ndarray, resize: tuple[int, int] | None, shown: str) -> np.ndarray:
    if resize is None or tuple(x.shape[2:]) == resize:
        return x
    if x.shape[0] * x.shape[1] * resize[0] * resize[1] > MAX_ELEMENTS:
        raise TrainingError(
            f"dataset {shown}: resized to {resize} it holds more than {MAX_ELEMENTS:,} values"
        )
    tensor = torch.from_numpy(x)
    out = torch.nn.functional.interpolate(tensor, size=resize, mode="bilinear", align_corners=False)
    return out.numpy()


def _prepare(
    source: ImageSource, x: np.ndarray, y: np.ndarray, shown: str, dtype: torch.dtype
) -> ImageSet:
    rows = x.shape[0]
    if rows < 2:
        raise TrainingError(f"dataset {shown}: needs at least 2 images, got {rows}")
    if not np.all(np.isfinite(x)):
        raise TrainingError(f"dataset {shown}: images hold NaN or infinite values")
    task = source.task
    numeric = np.issubdtype(y.dtype, np.number) and y.dtype != np.bool_
    if task == "auto":
        integral = numeric and y.ndim == 1 and bool(np.all(np.mod(y, 1) == 0))
        few = np.unique(y).size <= AUTO_CLASSIFICATION_MAX_CLASSES
        task = "classification" if (not numeric or integral) and few else "regression"
    labels: tuple[Any, ...] | None = None
    if task == "classification":
        if y.ndim != 1 or (numeric and not np.all(np.mod(y, 1) == 0)):
            raise TrainingError(
                f"dataset {shown}: classification needs one integer label per image, got "
                f"shape {y.shape}; use task: regression for other targets"
            )
        unique, target = np.unique(y if numeric or y.dtype == np.bool_ else y.astype(str),
                                   return_inverse=True)  # fmt: skip
        labels = tuple(v.item() if hasattr(v, "item") else v for v in unique)
        target = target.reshape(-1).astype(np.int64)
    elif not numeric:
        raise TrainingError(f"dataset {shown}: regression targets must be numbers")
    else:
        target = y.astype(np.float64)
    train_idx, val_idx = split_rows(
        rows, target if labels else None, source.validation_fraction, source.split_seed, shown
    )
    digest = hashlib.sha256(f"{source}|{x.shape}|{task}".encode())
    digest.update(np.ascontiguousarray(x).tobytes())
    digest.update(np.ascontiguousarray(target).tobytes())
    images = torch.from_numpy(np.ascontiguousarray(x)).to(dtype)
    targets = torch.from_numpy(np.ascontiguousarray(target))
    if task == "regression":
        targets = targets.to(dtype)
    train, val = torch.from_numpy(train_idx), torch.from_numpy(val_idx)
    return Dataset(
        x_train=images[train],
        y_train=targets[train],
        x_val=images[val],
        y_val=targets[val],
        task=task,
        n_classes=len(labels) if labels is not None else None,
        class_labels=labels,
        source=shown,
        fingerprint=digest.hexdigest(),
    )
