"""The bundled sets read without scikit-learn equal scikit-learn's own loaders."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn import datasets as sk_datasets

from core.errors import TrainingError
from tests import loaded_after
from workers.training.bundled import FILES, load_bundled

LOADERS = {
    "digits": sk_datasets.load_digits,
    "iris": sk_datasets.load_iris,
    "wine": sk_datasets.load_wine,
    "breast_cancer": sk_datasets.load_breast_cancer,
}


@pytest.mark.parametrize("name", sorted(FILES))
def test_equals_sklearn(name: str) -> None:
    bunch = LOADERS[name]()
    x, y, names = load_bundled(name)
    assert x.dtype == bunch.data.dtype == np.float64
    assert y.dtype == bunch.target.dtype
    np.testing.assert_array_equal(x, bunch.data)
    np.testing.assert_array_equal(y, bunch.target)
    assert names == [str(n) for n in bunch.feature_names]
    assert x.tobytes() == np.ascontiguousarray(bunch.data).tobytes()


def test_unknown_name_is_a_training_error() -> None:
    with pytest.raises(TrainingError, match=r"dataset\.name 'mnist'"):
        load_bundled("mnist")


def test_loading_digits_imports_neither_sklearn_nor_pandas() -> None:
    code = (
        "from core.spec.config import DatasetConfig\n"
        "from workers.training.datasets import load_dataset\n"
        "data = load_dataset(DatasetConfig(name='digits'))\n"
        "assert data.n_train + data.n_val == 1797\n"
    )
    assert loaded_after(code, ["sklearn", "pandas", "scipy"]) == []
