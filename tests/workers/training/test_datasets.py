"""Datasets: built-ins, files, the seeded stratified split, standardisation, errors."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from core.errors import TrainingError
from core.spec.config import DatasetConfig
from workers.training.datasets import clear_dataset_cache, load_dataset


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    clear_dataset_cache()
    yield
    clear_dataset_cache()


@pytest.mark.parametrize(
    ("name", "task", "n_classes", "n_features"),
    [
        ("digits", "classification", 10, 64),
        ("iris", "classification", 3, 4),
        ("wine", "classification", 3, 13),
        ("breast_cancer", "classification", 2, 30),
        ("synthetic_classification", "classification", 4, 12),
        ("synthetic_regression", "regression", None, 12),
    ],
)
def test_builtin_loads(name: str, task: str, n_classes: int | None, n_features: int) -> None:
    config = DatasetConfig(name=name, samples=300, features=12, classes=4)
    data = load_dataset(config)
    assert data.task == task
    assert data.n_classes == n_classes
    assert data.n_features == n_features
    assert data.out_features == (n_classes or 1)
    assert data.x_train.shape[0] == data.y_train.shape[0]
    assert data.x_val.shape[0] == data.y_val.shape[0]
    assert data.n_val == pytest.approx(0.2 * (data.n_train + data.n_val), abs=1)
    assert len(data.fingerprint) == 64
    if task == "classification":
        assert data.y_train.dtype == np.int64
        assert set(np.unique(data.y_train)) == set(range(n_classes or 0))


def test_synthetic_sets_follow_the_config() -> None:
    data = load_dataset(DatasetConfig(name="synthetic_classification", samples=500, classes=3))
    assert data.n_train + data.n_val == 500 and data.n_classes == 3 and data.n_features == 20


def test_split_is_seeded_and_stratified() -> None:
    first = load_dataset(DatasetConfig(name="iris", split_seed=7))
    clear_dataset_cache()
    again = load_dataset(DatasetConfig(name="iris", split_seed=7))
    other = load_dataset(DatasetConfig(name="iris", split_seed=8))
    assert np.array_equal(first.x_val, again.x_val) and first.fingerprint == again.fingerprint
    assert not np.array_equal(first.x_val, other.x_val) and first.fingerprint != other.fingerprint
    # iris has 50 rows of each class: a stratified 20% holds exactly 10 of each.
    assert np.bincount(first.y_val).tolist() == [10, 10, 10]
    assert np.bincount(other.y_val).tolist() == [10, 10, 10]


def test_standardisation_is_fitted_on_train_only() -> None:
    config = DatasetConfig(name="digits", validation_fraction=0.25, split_seed=3)
    data = load_dataset(config)
    x, y = load_digits(return_X_y=True)
    train_idx, val_idx = train_test_split(
        np.arange(len(y)), test_size=0.25, random_state=3, stratify=y
    )
    mean, std = x[train_idx].mean(axis=0), x[train_idx].std(axis=0)
    std[std == 0] = 1.0
    np.testing.assert_allclose(data.x_train, (x[train_idx] - mean) / std)
    np.testing.assert_allclose(data.x_val, (x[val_idx] - mean) / std)
    varying = x[train_idx].std(axis=0) > 0
    np.testing.assert_allclose(data.x_train.mean(axis=0), 0, atol=1e-12)
    np.testing.assert_allclose(data.x_train.std(axis=0)[varying], 1)


def test_regression_target_is_standardised_with_train_scale() -> None:
    data = load_dataset(DatasetConfig(name="synthetic_regression", samples=400, features=5))
    assert data.y_train.mean() == pytest.approx(0, abs=1e-12)
    assert data.y_train.std() == pytest.approx(1)
    assert data.target_std > 1  # make_regression targets are in the tens to hundreds


def test_cached_in_process_and_read_only() -> None:
    config = DatasetConfig(name="digits")
    data = load_dataset(config)
    assert load_dataset(DatasetConfig(name="digits")) is data
    with pytest.raises(ValueError, match="read-only"):
        data.x_train[0, 0] = 1.0


def _frame(rows: int = 60) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame(
        {
            "a": rng.normal(size=rows),
            "b": rng.integers(0, 5, size=rows),
            "flag": rng.integers(0, 2, size=rows).astype(bool),
            "target": np.arange(rows) % 3,
        }
    )


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_table_files_load(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"data{suffix}"
    frame = _frame()
    frame.to_csv(path, index=False) if suffix == ".csv" else frame.to_parquet(path)
    data = load_dataset(DatasetConfig(path=str(path)), base_dir=tmp_path)
    assert data.task == "classification" and data.n_classes == 3
    assert data.feature_names == ("a", "b", "flag")
    assert data.n_train + data.n_val == 60
    assert np.bincount(data.y_val).tolist() == [4, 4, 4]


def test_relative_path_is_under_base_dir(tmp_path: Path) -> None:
    _frame().to_csv(tmp_path / "rel.csv", index=False)
    data = load_dataset(DatasetConfig(path="rel.csv"), base_dir=tmp_path)
    assert data.source == "rel.csv"  # as the spec names it, not where the worker keeps it


def test_npz_with_x_and_y(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "d.npz", X=rng.normal(size=(50, 4)), y=rng.normal(size=50))
    data = load_dataset(DatasetConfig(path=str(tmp_path / "d.npz")), base_dir=tmp_path)
    assert data.task == "regression" and data.n_classes is None and data.n_features == 4


def test_npz_with_target_key_or_named_key(tmp_path: Path) -> None:
    x = np.random.default_rng(2).normal(size=(40, 3))
    np.savez(tmp_path / "t.npz", X=x, target=np.arange(40) % 2)
    assert (
        load_dataset(DatasetConfig(path=str(tmp_path / "t.npz")), base_dir=tmp_path).n_classes == 2
    )
    np.savez(tmp_path / "k.npz", X=x, label=np.arange(40) % 4)
    data = load_dataset(
        DatasetConfig(path=str(tmp_path / "k.npz"), target="label"), base_dir=tmp_path
    )
    assert data.n_classes == 4


def test_npz_missing_target_names_it_but_not_the_file_keys(tmp_path: Path) -> None:
    np.savez(tmp_path / "m.npz", X=np.zeros((10, 2)), labels=np.zeros(10))
    with pytest.raises(TrainingError, match=r"no array 'y'") as caught:
        load_dataset(DatasetConfig(path=str(tmp_path / "m.npz"), target="y"), base_dir=tmp_path)
    assert "labels" not in caught.value.reason


def test_auto_task_many_integer_values_is_regression(tmp_path: Path) -> None:
    frame = pd.DataFrame({"x": np.arange(300.0), "target": np.arange(300)})
    frame.to_csv(tmp_path / "r.csv", index=False)
    assert (
        load_dataset(DatasetConfig(path=str(tmp_path / "r.csv")), base_dir=tmp_path).task
        == "regression"
    )
    clear_dataset_cache()
    forced = load_dataset(
        DatasetConfig(path=str(tmp_path / "r.csv"), task="classification"), base_dir=tmp_path
    )
    assert forced.task == "classification" and forced.n_classes == 300


def test_string_target_is_classification(tmp_path: Path) -> None:
    frame = pd.DataFrame({"x": np.arange(30.0), "target": ["cat", "dog", "eel"] * 10})
    frame.to_parquet(tmp_path / "s.parquet")
    data = load_dataset(DatasetConfig(path=str(tmp_path / "s.parquet")), base_dir=tmp_path)
    assert data.class_labels == ("cat", "dog", "eel")


def test_missing_target_column_names_it_but_never_the_header(tmp_path: Path) -> None:
    _frame().to_csv(tmp_path / "d.csv", index=False)
    with pytest.raises(TrainingError) as caught:
        load_dataset(DatasetConfig(path="d.csv", target="label"), base_dir=tmp_path)
    assert caught.value.reason == "dataset.target: no column 'label' in d.csv (4 columns)"


def test_non_numeric_feature_names_it(tmp_path: Path) -> None:
    frame = _frame()
    frame["colour"] = "red"
    frame.to_csv(tmp_path / "d.csv", index=False)
    with pytest.raises(TrainingError, match="feature column 5 is not numeric"):
        load_dataset(DatasetConfig(path=str(tmp_path / "d.csv")), base_dir=tmp_path)


def test_missing_feature_values_name_the_column(tmp_path: Path) -> None:
    frame = _frame()
    frame.loc[3, "a"] = np.nan
    frame.to_csv(tmp_path / "d.csv", index=False)
    with pytest.raises(TrainingError, match=r"column\(s\) 1 have missing values"):
        load_dataset(DatasetConfig(path=str(tmp_path / "d.csv")), base_dir=tmp_path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TrainingError, match=r"dataset.path nope.csv: cannot open"):
        load_dataset(DatasetConfig(path="nope.csv"), base_dir=tmp_path)


def test_unreadable_file(tmp_path: Path) -> None:
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(TrainingError, match=r"bad.parquet: cannot read it as parquet"):
        load_dataset(DatasetConfig(path=str(tmp_path / "bad.parquet")), base_dir=tmp_path)


def test_regression_task_on_text_target_is_refused(tmp_path: Path) -> None:
    frame = pd.DataFrame({"x": np.arange(20.0), "target": ["a", "b"] * 10})
    frame.to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(TrainingError, match="task is regression but the target"):
        load_dataset(
            DatasetConfig(path=str(tmp_path / "t.csv"), task="regression"), base_dir=tmp_path
        )


def test_edited_file_is_reloaded(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    _frame(60).to_csv(path, index=False)
    first = load_dataset(DatasetConfig(path=str(path)), base_dir=tmp_path)
    assert load_dataset(DatasetConfig(path=str(path)), base_dir=tmp_path) is first
    _frame(90).to_csv(path, index=False)
    os.utime(path, ns=(0, path.stat().st_mtime_ns + 1_000_000_000))
    reloaded = load_dataset(DatasetConfig(path=str(path)), base_dir=tmp_path)
    assert reloaded.n_train + reloaded.n_val == 90


def test_too_few_features_for_synthetic_classes() -> None:
    with pytest.raises(TrainingError, match=r"dataset\.features 3 is too few"):
        load_dataset(DatasetConfig(name="synthetic_classification", features=3, classes=20))


def test_unstratifiable_split_falls_back(tmp_path: Path) -> None:
    frame = pd.DataFrame({"x": np.arange(20.0), "target": [0] * 19 + [1]})
    frame.to_csv(tmp_path / "d.csv", index=False)
    data = load_dataset(DatasetConfig(path=str(tmp_path / "d.csv")), base_dir=tmp_path)
    assert data.n_train + data.n_val == 20


# -- the datasets folder: the worker's own check, with its own folder ------------------------

SECRET = "root:x:0:0:secret-header\n1,2\n3,4\n"


def _folders(tmp_path: Path) -> tuple[Path, Path]:
    root, outside = tmp_path / "datasets", tmp_path / "elsewhere"
    root.mkdir()
    outside.mkdir()
    (outside / "private.csv").write_text(SECRET)
    return root, outside


def _refused(config: DatasetConfig, root: Path) -> str:
    with pytest.raises(TrainingError) as caught:
        load_dataset(config, base_dir=root)
    reason = caught.value.reason
    assert "secret-header" not in reason and "root:x" not in reason, reason
    return reason


def test_an_absolute_path_outside_the_folder_is_refused_unread(tmp_path: Path) -> None:
    root, outside = _folders(tmp_path)
    reason = _refused(DatasetConfig(path=str(outside / "private.csv")), root)
    assert "is outside the datasets folder" in reason
    assert str(root) not in reason


def test_a_symlink_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    root, outside = _folders(tmp_path)
    (root / "link.csv").symlink_to(outside / "private.csv")
    (root / "sub").symlink_to(outside)
    assert "leads outside" in _refused(DatasetConfig(path="link.csv"), root)
    assert "leads outside" in _refused(DatasetConfig(path="sub/private.csv"), root)


@pytest.mark.parametrize("path", ["../elsewhere/private.csv", "~/private.csv", "a\x00b.csv"])
def test_paths_that_climb_out_are_refused_even_if_the_api_was_skipped(
    tmp_path: Path, path: str
) -> None:
    # model_construct skips validation: a record written before these rules, or by hand.
    root, _ = _folders(tmp_path)
    reason = _refused(DatasetConfig.model_construct(path=path, name=None), root)
    assert reason.startswith("dataset.path ") and "Traceback" not in reason


def test_inside_the_folder_absolute_relative_and_symlinked_paths_load(tmp_path: Path) -> None:
    root, _ = _folders(tmp_path)
    (root / "sub").mkdir()
    _frame().to_csv(root / "sub" / "d.csv", index=False)
    (root / "alias.csv").symlink_to(root / "sub" / "d.csv")
    for path in (str(root / "sub" / "d.csv"), "sub/d.csv", "alias.csv"):
        clear_dataset_cache()
        assert load_dataset(DatasetConfig(path=path), base_dir=root).n_features == 3


def test_a_file_that_is_not_a_data_set_never_shows_its_contents(tmp_path: Path) -> None:
    root, _ = _folders(tmp_path)
    (root / "passwd.csv").write_text(SECRET)
    reason = _refused(DatasetConfig(path="passwd.csv"), root)
    assert reason == "dataset.target: no column 'target' in passwd.csv (1 columns)"
    (root / "blob.parquet").write_text(SECRET)
    assert "cannot read it as parquet" in _refused(DatasetConfig(path="blob.parquet"), root)
    (root / "dir.csv").mkdir()
    assert "not a file" in _refused(DatasetConfig(path="dir.csv"), root)


def test_a_trial_config_outside_the_workers_folder_fails_with_a_plain_reason(
    tmp_path: Path,
) -> None:
    # What the worker does with a stored config: validate it, train it with its own folder.
    from pydantic import ValidationError

    from core.spec.config import TrialConfig
    from workers.runner import failure_reason
    from workers.training import train

    root, outside = _folders(tmp_path)
    config = TrialConfig.model_validate({"dataset": {"path": str(outside / "private.csv")}})
    with pytest.raises(TrainingError) as caught:
        train(config, data_dir=root)
    assert failure_reason(caught.value).endswith("is outside the datasets folder; give a path "
                                                 "inside it (SWEEPSTACK_DATASETS_DIR)")  # fmt: skip
    with pytest.raises(ValidationError) as invalid:
        TrialConfig.model_validate({"dataset": {"path": "a\x00.csv"}})
    reason = failure_reason(invalid.value)
    assert "must not contain a NUL character" in reason
    assert "Traceback" not in reason and str(Path(__file__).parents[3]) not in reason
