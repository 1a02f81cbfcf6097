"""`train_val_split` gives the rows scikit-learn's `train_test_split` gives."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.model_selection import train_test_split

from core.errors import TrainingError
from workers.training.splits import StratifyError, train_val_split


def _sklearn(rows: int, fraction: float, seed: int, classes: np.ndarray | None) -> list:
    return train_test_split(
        np.arange(rows), test_size=fraction, random_state=seed, stratify=classes
    )


LAYOUTS = {
    "balanced": np.repeat(np.arange(10), 18),
    "skewed": np.array([0] * 50 + [1] * 7 + [2] * 3 + [3] * 2),
    "ties": np.array([0, 1, 2, 3] * 5 + [4, 4, 5, 5]),
    "shuffled": np.random.RandomState(3).randint(0, 6, size=311),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("fraction", [0.1, 0.2, 0.25, 0.33, 0.5, 0.77])
def test_stratified_equals_sklearn(layout: str, fraction: float) -> None:
    classes = LAYOUTS[layout]
    for seed in range(12):
        try:
            expected = _sklearn(classes.shape[0], fraction, seed, classes)
        except ValueError:
            with pytest.raises(StratifyError):
                train_val_split(classes.shape[0], fraction, seed, classes)
            continue
        train, val = train_val_split(classes.shape[0], fraction, seed, classes)
        np.testing.assert_array_equal(train, expected[0])
        np.testing.assert_array_equal(val, expected[1])


@pytest.mark.parametrize("rows", [2, 3, 10, 150, 1797])
@pytest.mark.parametrize("fraction", [0.1, 0.2, 0.5])
def test_plain_equals_sklearn(rows: int, fraction: float) -> None:
    for seed in (0, 1, 7, 2**31):
        train, val = train_val_split(rows, fraction, seed)
        expected = _sklearn(rows, fraction, seed, None)
        np.testing.assert_array_equal(train, expected[0])
        np.testing.assert_array_equal(val, expected[1])


def test_classes_too_small_to_stratify() -> None:
    with pytest.raises(StratifyError, match="single row"):
        train_val_split(5, 0.4, 0, np.array([0, 0, 1, 1, 2]))
    with pytest.raises(StratifyError, match="cannot each hold all 3 classes"):
        train_val_split(6, 0.2, 0, np.array([0, 0, 1, 1, 2, 2]))


def test_no_training_row_is_a_training_error() -> None:
    with pytest.raises(TrainingError, match=r"validation_fraction 0\.6 leaves no training row"):
        train_val_split(2, 0.6, 0)
