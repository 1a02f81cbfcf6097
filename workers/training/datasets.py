"""The data a trial trains on: built-in sets and user files, split and standardised.

Built in: scikit-learn's bundled digits, iris, wine and breast_cancer (no network; read
from its package data by `bundled` without importing it), and seeded synthetic sets
(`make_classification`, `make_regression`, both seeded by `dataset.split_seed`). Files:
`.npz` (arrays `X` and `y`; `dataset.target` names another key, and a key `target` is
taken when there is no `y`), `.csv` and `.parquet` (a `target` column, or the column
`dataset.target` names; every other column is a numeric feature).

Split: `dataset.validation_fraction` goes to validation, drawn with `dataset.split_seed`,
stratified by class for classification (`splits`: the rows scikit-learn's
`train_test_split` gives, without importing it). Features are standardised with the
training part's mean and standard deviation (constant features become 0). For regression
the target is standardised the same way, so one learning rate suits targets of any scale;
`val_loss` is the mean squared error on that scale, and `val_rmse` is reported in the
target's own units.

`task: auto` on a file: an integer-valued target with at most 100 distinct values, or one
that is not numeric, is classification; anything else is regression.

scikit-learn is imported only for a synthetic set, pandas only for a .csv or .parquet file:
a worker that trains on digits imports neither (about 2 s less at its start).

Loaded sets are cached in the process (a worker trains many trials on the same data); a
file's cache entry is keyed by its path, size and modification time, so an edit reloads it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np

from core.errors import TrainingError
from core.spec.config import DatasetConfig
from core.spec.limits import OutsideDatasets, confine
from workers.training.bundled import FILES as BUNDLED_FILES
from workers.training.bundled import load_bundled
from workers.training.splits import StratifyError, train_val_split

if TYPE_CHECKING:
    import pandas as pd
    import torch

logger = logging.getLogger(__name__)

AUTO_CLASSIFICATION_MAX_CLASSES = 100
_CACHE_SIZE = 8


#: The arrays a data set holds: numpy's for the tabular sets, torch's for Caffe's images.
A = TypeVar("A", "np.ndarray", "torch.Tensor")


@dataclass(frozen=True)
class Dataset(Generic[A]):
    """A split data set, ready to train on: the tabular sets here (numpy arrays of rows of
    features, standardised) and Caffe's images (`workers.training.caffe.images`: tensors
    of N x C x H x W pixels, as they are).

    `y_*` holds class indices 0..n_classes-1 (int64) for classification, and the target
    (the tabular sets: standardised, float64) for regression. The arrays are shared by
    every trial that uses the cached set: read-only, never changed in place.
    """

    x_train: A
    y_train: A
    x_val: A
    y_val: A
    task: str
    n_classes: int | None
    class_labels: tuple[Any, ...] | None
    source: str
    fingerprint: str
    feature_names: tuple[str, ...] = ()
    target_mean: float = 0.0
    target_std: float = 1.0

    @property
    def shape(self) -> tuple[int, ...]:
        """One sample's shape: (features,) for a table's row, (C, H, W) for an image."""
        return tuple(int(n) for n in self.x_train.shape[1:])

    @property
    def n_features(self) -> int:
        return int(self.x_train.shape[1])

    @property
    def out_features(self) -> int:
        """Outputs the model needs: one logit per class, or one value for regression."""
        return self.n_classes if self.n_classes is not None else 1

    @property
    def n_train(self) -> int:
        return int(self.x_train.shape[0])

    @property
    def n_val(self) -> int:
        return int(self.x_val.shape[0])

    def summary(self) -> dict[str, Any]:
        """What the trial record keeps about its data: a table's feature count, or an
        image's shape."""
        sample = {"n_features": self.n_features} if len(self.shape) == 1 else {
            "shape": list(self.shape)
        }
        return {
            "source": self.source,
            "task": self.task,
            "n_train": self.n_train,
            "n_val": self.n_val,
            **sample,
            "n_classes": self.n_classes,
            "fingerprint": self.fingerprint,
        }


def load_dataset(
    config: DatasetConfig, base_dir: Path | None = None
) -> Dataset[np.ndarray]:
    """Load, split and standardise the set `config` names.

    A file is read only from inside `base_dir`, the worker's datasets folder
    (``SWEEPSTACK_DATASETS_DIR``; None: the current folder): a relative path from there, an
    absolute one only if it lies in it, symlinks followed (`core.spec.limits.confine`). The API
    refused anything else at submit; this is the worker's own check, with its own folder.

    Raises `TrainingError` for a path outside the folder, a missing or unreadable file, a
    missing target, or a feature that is not numeric. No message quotes the file's
    contents or the folder's place on the worker.
    """
    if config.name is not None:
        return _load_cached(config.model_dump_json(), None)
    assert config.path is not None  # DatasetConfig guarantees exactly one source
    root = base_dir if base_dir is not None else Path.cwd()
    try:
        path = confine(config.path, root)
        stat = path.stat()
    except OutsideDatasets as err:
        raise TrainingError(f"dataset.path {config.path}: {err}") from None
    except (OSError, ValueError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else "invalid path"
        raise TrainingError(
            f"dataset.path {config.path}: cannot open it in the datasets folder ({reason})"
        ) from None
    if not path.is_file():
        raise TrainingError(f"dataset.path {config.path}: not a file")
    return _load_cached(config.model_dump_json(), (str(path), stat.st_mtime_ns, stat.st_size))


def clear_dataset_cache() -> None:
    """Forget every loaded set (tests, or a worker told to free memory)."""
    _load_cached.cache_clear()


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _load_cached(
    config_json: str, file_key: tuple[str, int, int] | None
) -> Dataset[np.ndarray]:
    config = DatasetConfig.model_validate_json(config_json)
    if file_key is None:
        assert config.name is not None
        x, y, names = _builtin(config)
        source = config.name
    else:
        # Named as the spec names it: the record and errors never show the worker's folders.
        assert config.path is not None
        x, y, names = _read_file(Path(file_key[0]), config)
        source = config.path
    logger.info("loaded dataset %s: %d rows, %d features", source, x.shape[0], x.shape[1])
    return _prepare(config, x, y, names, source)


def _builtin(config: DatasetConfig) -> tuple[np.ndarray, np.ndarray, list[str]]:
    name = config.name
    if name in BUNDLED_FILES:
        x, y, names = load_bundled(name)
        return np.asarray(x, dtype=np.float64), np.asarray(y), names
    if name == "synthetic_classification":
        x, y = _synthetic_classification(config)
    elif name == "synthetic_regression":
        from sklearn.datasets import make_regression

        x, y = make_regression(
            n_samples=config.samples,
            n_features=config.features,
            n_informative=min(config.features, 10),
            noise=config.noise,
            random_state=config.split_seed,
        )
    else:
        raise TrainingError(f"dataset.name {name!r} is not a built-in dataset")
    return x.astype(np.float64), y, [f"x{i}" for i in range(x.shape[1])]


def _synthetic_classification(config: DatasetConfig) -> tuple[np.ndarray, np.ndarray]:
    """`make_classification` with as many informative features as the classes need.

    `noise` is the fraction of labels assigned at random (`flip_y`), capped at 1.
    """
    classes, features = config.classes, config.features
    informative = min(features, max(2, math.ceil(math.log2(classes)) + 1))
    clusters = 2 if 2**informative >= 2 * classes else 1
    if 2**informative < classes:
        needed = math.ceil(math.log2(classes))
        raise TrainingError(
            f"dataset.features {features} is too few for dataset.classes {classes} in "
            f"synthetic_classification; it needs at least {needed}"
        )
    from sklearn.datasets import make_classification

    return make_classification(
        n_samples=config.samples,
        n_features=features,
        n_informative=informative,
        n_redundant=min(2, features - informative),
        n_repeated=0,
        n_classes=classes,
        n_clusters_per_class=clusters,
        flip_y=min(config.noise, 1.0),
        random_state=config.split_seed,
    )


def _read_file(path: Path, config: DatasetConfig) -> tuple[np.ndarray, np.ndarray, list[str]]:
    # Errors name the file as the spec does, and never quote its contents (a header, a
    # parser's excerpt): a path that is not a data set must not leak what it holds.
    shown = str(config.path)
    suffix = path.suffix.lower()
    if suffix == ".npz":
        return _read_npz(path, config, shown)
    import pandas as pd

    try:
        frame = pd.read_csv(path) if suffix == ".csv" else pd.read_parquet(path)
    except (OSError, ValueError, pd.errors.ParserError, ImportError) as err:
        raise TrainingError(
            f"dataset.path {shown}: cannot read it as {suffix[1:]} ({type(err).__name__})"
        ) from None
    return _split_frame(frame, shown, config.target or "target")


def _read_npz(
    path: Path, config: DatasetConfig, shown: str
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {key: archive[key] for key in archive.files}
    except (OSError, ValueError) as err:
        raise TrainingError(
            f"dataset.path {shown}: cannot read it as npz ({type(err).__name__})"
        ) from None
    if "X" not in arrays:
        raise TrainingError(f"dataset.path {shown}: no array 'X' ({len(arrays)} arrays)")
    target = config.target or ("y" if "y" in arrays else "target")
    if target not in arrays:
        raise TrainingError(f"dataset.target: no array {target!r} in {shown}")
    x, y = arrays["X"], arrays[target]
    if x.ndim == 1:
        x = x.reshape(-1, 1)
    if x.ndim != 2 or not np.issubdtype(x.dtype, np.number):
        raise TrainingError(
            f"dataset.path {shown}: 'X' must be a 2-D numeric array, got shape "
            f"{x.shape} and dtype {x.dtype}"
        )
    y = y.reshape(-1) if y.ndim == 2 and y.shape[1] == 1 else y
    if y.ndim != 1 or y.shape[0] != x.shape[0]:
        raise TrainingError(
            f"dataset.target: {target!r} in {shown} must be 1-D with one value per row of X "
            f"({x.shape[0]}), got shape {y.shape}"
        )
    return x.astype(np.float64), y, [f"x{i}" for i in range(x.shape[1])]


def _split_frame(
    frame: pd.DataFrame, shown: str, target: str
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Features and target of a table. Columns are named in errors only by the spec's own
    words (the target) or by position, never by the file's header."""
    import pandas as pd

    columns = [str(c) for c in frame.columns]
    if target not in columns:
        raise TrainingError(
            f"dataset.target: no column {target!r} in {shown} ({len(columns)} columns)"
        )
    frame.columns = columns
    features = [c for c in columns if c != target]
    if not features:
        raise TrainingError(f"dataset.path {shown}: no feature columns besides {target!r}")
    for column in features:
        dtype = frame[column].dtype
        if not (pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype)):
            raise TrainingError(
                f"dataset.path {shown}: feature column {columns.index(column) + 1} is not "
                f"numeric (dtype {dtype}); encode it as numbers or drop it"
            )
    x = frame[features].to_numpy(dtype=np.float64, na_value=np.nan)
    missing = [
        str(columns.index(c) + 1)
        for c, bad in zip(features, np.isnan(x).any(axis=0), strict=True)
        if bad
    ]
    if missing:
        raise TrainingError(
            f"dataset.path {shown}: feature column(s) {', '.join(missing)} have missing values"
        )
    y_series = frame[target]
    if y_series.isna().any():
        raise TrainingError(f"dataset.target: column {target!r} in {shown} has missing values")
    return x, y_series.to_numpy(), features


def _infer_task(y: np.ndarray) -> str:
    if not np.issubdtype(y.dtype, np.number) or y.dtype == np.bool_:
        return "classification"
    values = y.astype(np.float64)
    integral = bool(np.all(np.isfinite(values)) and np.all(np.mod(values, 1) == 0))
    if integral and np.unique(values).size <= AUTO_CLASSIFICATION_MAX_CLASSES:
        return "classification"
    return "regression"


def _prepare(
    config: DatasetConfig, x: np.ndarray, y: np.ndarray, names: list[str], source: str
) -> Dataset[np.ndarray]:
    if x.shape[0] < 2:
        raise TrainingError(f"dataset {source}: needs at least 2 rows, got {x.shape[0]}")
    if not np.all(np.isfinite(x)):
        raise TrainingError(f"dataset {source}: features hold NaN or infinite values")
    task = config.resolved_task
    if task == "auto":
        task = _infer_task(y)
    numeric = np.issubdtype(y.dtype, np.number) or y.dtype == np.bool_
    if numeric and not np.all(np.isfinite(y.astype(np.float64))):
        raise TrainingError(f"dataset.target in {source} holds NaN or infinite values")
    labels: tuple[Any, ...] | None = None
    if task == "classification":
        if numeric and y.dtype != np.bool_ and not np.all(np.mod(y.astype(np.float64), 1) == 0):
            raise TrainingError(
                f"dataset.task is classification but the target in {source} has "
                "non-integer values; use task: regression"
            )
        unique, target = np.unique(y if numeric else y.astype(str), return_inverse=True)
        if unique.size < 2:
            raise TrainingError(f"dataset.target in {source} has a single class; it needs 2+")
        labels = tuple(v.item() if hasattr(v, "item") else v for v in unique)
        target = target.astype(np.int64)
    else:
        if not numeric:
            raise TrainingError(
                f"dataset.task is regression but the target in {source} is not numeric "
                f"(dtype {y.dtype})"
            )
        target = y.astype(np.float64)

    stratify = target if task == "classification" else None
    train_idx, val_idx = split_rows(
        x.shape[0], stratify, config.validation_fraction, config.split_seed, source
    )
    x_train, x_val = x[train_idx], x[val_idx]
    mean, std = x_train.mean(axis=0), x_train.std(axis=0)
    std[std == 0] = 1.0
    x_train, x_val = (x_train - mean) / std, (x_val - mean) / std
    y_train, y_val = target[train_idx], target[val_idx]
    target_mean, target_std = 0.0, 1.0
    if task == "regression":
        target_mean, target_std = float(y_train.mean()), float(y_train.std()) or 1.0
        y_train = (y_train - target_mean) / target_std
        y_val = (y_val - target_mean) / target_std

    arrays = [np.ascontiguousarray(a) for a in (x_train, y_train, x_val, y_val)]
    for array in arrays:
        array.flags.writeable = False
    return Dataset(
        x_train=arrays[0],
        y_train=arrays[1],
        x_val=arrays[2],
        y_val=arrays[3],
        task=task,
        n_classes=len(labels) if labels is not None else None,
        feature_names=tuple(names) if len(names) == x.shape[1] else (),
        class_labels=labels,
        target_mean=target_mean,
        target_std=target_std,
        source=source,
        fingerprint=_fingerprint(config, task, arrays),
    )


def split_rows(
    rows: int, classes: np.ndarray | None, fraction: float, seed: int, source: str
) -> tuple[np.ndarray, np.ndarray]:
    """Seeded train/validation row indices (`fraction` of the rows to validation),
    stratified by `classes` when given and possible; for every data set, tables and images."""
    if classes is not None:
        try:
            return train_val_split(rows, fraction, seed, classes)
        except StratifyError as err:
            # Too few rows of some class to stratify; a plain split is still a fair split.
            logger.warning(
                "dataset %s: cannot stratify the split (%s); splitting plainly", source, err
            )
    return train_val_split(rows, fraction, seed)


def _fingerprint(config: DatasetConfig, task: str, arrays: list[np.ndarray]) -> str:
    """sha256 of the config and the split arrays: equal data gives an equal fingerprint."""
    digest = hashlib.sha256()
    header = {"config": config.model_dump(mode="json"), "task": task}
    digest.update(json.dumps(header, sort_keys=True).encode())
    for array in arrays:
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()
