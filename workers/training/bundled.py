"""scikit-learn's bundled data sets (digits, iris, wine, breast_cancer), read without
importing scikit-learn.

Why: importing ``sklearn.datasets`` costs a worker about 1.6 s at start (it pulls in most of
scikit-learn and SciPy), for four small files that ship inside the package. This reads the
same files from scikit-learn's installed package data as its loaders do (``np.loadtxt`` of
``digits.csv.gz``; the header-then-rows CSV of the other three) and gives the same arrays,
dtypes and feature names as ``sklearn.datasets.load_*`` (a test compares them). Finding the
folder (`importlib.util.find_spec`) imports nothing.
"""

from __future__ import annotations

import csv
import functools
import gzip
import importlib.util
from pathlib import Path

import numpy as np

from core.errors import TrainingError

#: The bundled sets, each with its file in ``sklearn/datasets/data``.
FILES = {
    "digits": "digits.csv.gz",
    "iris": "iris.csv",
    "wine": "wine_data.csv",
    "breast_cancer": "breast_cancer.csv",
}

_CELL_MEASURES = (
    "radius", "texture", "perimeter", "area", "smoothness", "compactness", "concavity",
    "concave points", "symmetry", "fractal dimension",
)  # fmt: skip
# scikit-learn's own feature names for each set (its loaders write them in code, not in
# the files); digits' are pixel_<row>_<col>.
_FEATURE_NAMES: dict[str, tuple[str, ...]] = {
    "digits": tuple(f"pixel_{row}_{col}" for row in range(8) for col in range(8)),
    "iris": ("sepal length (cm)", "sepal width (cm)", "petal length (cm)", "petal width (cm)"),
    "wine": (
        "alcohol", "malic_acid", "ash", "alcalinity_of_ash", "magnesium", "total_phenols",
        "flavanoids", "nonflavanoid_phenols", "proanthocyanins", "color_intensity", "hue",
        "od280/od315_of_diluted_wines", "proline",
    ),
    "breast_cancer": (
        *(f"mean {n}" for n in _CELL_MEASURES),
        *(f"{n} error" for n in _CELL_MEASURES),
        *(f"worst {n}" for n in _CELL_MEASURES),
    ),
}  # fmt: skip


@functools.cache
def data_folder() -> Path:
    """``sklearn/datasets/data`` of the installed scikit-learn, found without importing it."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise TrainingError("the built-in datasets need scikit-learn, which is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data"


def load_bundled(name: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Features (float64), integer targets and feature names of the bundled set `name`."""
    if name not in FILES:
        raise TrainingError(f"dataset.name {name!r} is not one of {', '.join(FILES)}")
    path = data_folder() / FILES[name]
    names = list(_FEATURE_NAMES[name])
    if name == "digits":
        with path.open("rb") as compressed, gzip.open(compressed, "rt", encoding="utf-8") as text:
            table = np.loadtxt(text, delimiter=",")
        return table[:, :-1], table[:, -1].astype(int, copy=False), names
    with path.open("r", encoding="utf-8") as handle:
        rows = csv.reader(handle)
        header = next(rows)
        n_samples, n_features = int(header[0]), int(header[1])
        data = np.empty((n_samples, n_features))
        target = np.empty((n_samples,), dtype=int)
        for i, row in enumerate(rows):
            data[i] = np.asarray(row[:-1], dtype=np.float64)
            target[i] = np.asarray(row[-1], dtype=int)
    return data, target, names
