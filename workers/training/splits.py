"""The seeded train/validation split of a data set, as scikit-learn's ``train_test_split``
makes it, without importing scikit-learn.

Why: ``sklearn.model_selection`` costs a worker about a second at start (SciPy and most of
scikit-learn), for a few lines of NumPy. `train_val_split` draws the same numbers from the
same ``np.random.RandomState(seed)`` in the same order as ``train_test_split(indices,
test_size=f, random_state=seed, stratify=classes)`` (scikit-learn 1.x: ``ShuffleSplit`` and
``StratifiedShuffleSplit`` with ``_approximate_mode``), so every trial gets the rows it had
before; a test compares the two over many seeds, fractions and class layouts. It raises
`StratifyError` (a ValueError) where scikit-learn refuses to stratify.
"""

from __future__ import annotations

import math

import numpy as np

from core.errors import TrainingError


class StratifyError(ValueError):
    """The classes are too small to stratify the split (scikit-learn's own ValueError cases)."""


def split_sizes(rows: int, validation_fraction: float) -> tuple[int, int]:
    """(train rows, validation rows): validation is ``ceil(fraction * rows)``, as in
    scikit-learn; a split that leaves no training row is a `TrainingError`."""
    n_val = math.ceil(validation_fraction * rows)
    n_train = rows - n_val
    if n_train <= 0:
        raise TrainingError(
            f"dataset.validation_fraction {validation_fraction} leaves no training row of "
            f"{rows}; lower it or use more rows"
        )
    return n_train, n_val


def train_val_split(
    rows: int, validation_fraction: float, seed: int, classes: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Train and validation row indices (int64 arrays), drawn with `seed`, stratified by
    `classes` (one label per row) when given."""
    n_train, n_val = split_sizes(rows, validation_fraction)
    if not 0 <= seed < 2**32:
        raise TrainingError(f"dataset.split_seed must be below 2**32, got {seed}")
    rng = np.random.RandomState(seed)
    if classes is None:
        permutation = rng.permutation(rows)
        return permutation[n_val : n_val + n_train], permutation[:n_val]
    labels, y_indices, counts = np.unique(classes, return_inverse=True, return_counts=True)
    if counts.min() < 2:
        raise StratifyError(f"classes {labels[counts < 2].tolist()} have a single row")
    if n_train < labels.shape[0] or n_val < labels.shape[0]:
        raise StratifyError(
            f"{n_train} training and {n_val} validation rows cannot each hold all "
            f"{labels.shape[0]} classes"
        )
    class_indices = np.split(np.argsort(y_indices, kind="stable"), np.cumsum(counts)[:-1])
    n_i = _approximate_mode(counts, n_train, rng)
    t_i = _approximate_mode(counts - n_i, n_val, rng)
    train: list[int] = []
    val: list[int] = []
    for i in range(labels.shape[0]):
        permutation = rng.permutation(counts[i])
        members = class_indices[i].take(permutation, mode="clip")
        train.extend(members[: n_i[i]])
        val.extend(members[n_i[i] : n_i[i] + t_i[i]])
    return rng.permutation(train), rng.permutation(val)


def _approximate_mode(counts: np.ndarray, draws: int, rng: np.random.RandomState) -> np.ndarray:
    """How many of `draws` rows each class gets: its share rounded down, then one more for
    the largest remainders, ties broken at random (scikit-learn's ``_approximate_mode``)."""
    continuous = counts / counts.sum() * draws
    floored = np.floor(continuous)
    need = int(draws - floored.sum())
    if need > 0:
        remainder = continuous - floored
        for value in np.sort(np.unique(remainder))[::-1]:
            (tied,) = np.where(remainder == value)
            add = min(len(tied), need)
            floored[rng.choice(tied, size=add, replace=False)] += 1
            need -= add
            if need == 0:
                break
    return floored.astype(int)
