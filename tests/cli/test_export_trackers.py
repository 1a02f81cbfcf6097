"""The tracker formats of `sweepstack export` before anything is read or written: their
options, MLflow's batches and keys, the trial folders TensorBoard's export may make. The
exports themselves, into a real MLflow server and read back with TensorBoard's readers:
tests/integration/test_export_trackers.py."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from cli.export_mlflow import MAX_ENTRIES, MAX_PARAMS, MAX_TAGS, batches, key
from cli.export_tensorboard import hparam_value, trial_folder
from cli.main import main


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--format", "tensorboard"], "give it with -o DIR"),
        (["--format", "mlflow"], "give --tracking-uri URI"),
        (["--format", "mlflow", "--tracking-uri", "http://x", "-o", "f"], "not -o"),
        (["--format", "mlflow", "--tracking-uri", "http://x", "--epochs"], "--epochs is for csv"),
        (["--format", "tensorboard", "-o", "d", "--epochs"], "--epochs is for csv"),
        (["--format", "csv", "--tracking-uri", "http://x"], "are for --format mlflow"),
        (["--format", "jsonl", "--experiment", "e"], "are for --format mlflow"),
    ],
)
def test_tracker_options_are_checked_before_the_store_is_opened(
    args: list[str], says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    data = tmp_path / "nothing-here"
    result = CliRunner().invoke(main, ["export", "abc", "--data", str(data), *args])
    assert result.exit_code == 2, result.output
    assert says in result.output
    assert not data.exists()


def test_a_file_format_still_refuses_a_folder(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["export", "abc", "--data", str(tmp_path / "d"),
                                       "-o", str(tmp_path)])  # fmt: skip
    assert result.exit_code == 2 and "is a directory" in result.output, result.output


def test_batches_keep_to_mlflows_limits_and_send_everything_once() -> None:
    metrics, params, tags = list(range(2500)), list(range(250)), list(range(130))
    sent = list(batches(metrics, params, tags))  # type: ignore[arg-type]
    for m, p, t in sent:
        assert len(p) <= MAX_PARAMS and len(t) <= MAX_TAGS
        assert len(m) + len(p) + len(t) <= MAX_ENTRIES
    assert [x for m, _, _ in sent for x in m] == metrics
    assert [x for _, p, _ in sent for x in p] == params
    assert [x for _, _, t in sent for x in t] == tags
    assert len(sent) == 3  # 100 + 100 + 800, 100 + 30 + 870, 50 + 830
    assert list(batches([], [], [])) == []


def test_keys_are_what_mlflow_accepts() -> None:
    assert key("model.hidden_units") == "model.hidden_units"
    assert key("val/acc") == "val/acc"
    assert key("acc@1 (top)") == "acc_1 _top_"
    assert key("a/../b") == "a_.._b"
    assert key("/abs") == "_abs"
    assert key("") == "_"
    assert len(key("x" * 400)) == 250


@pytest.mark.parametrize("name", ["../up", "..", ".", "a/b", "/etc", ".hidden", "a\\b", "é", ""])
def test_a_trial_folder_is_a_plain_name_inside_the_root(name: str, tmp_path: Path) -> None:
    with pytest.raises(click.ClickException, match="not a plain folder name"):
        trial_folder(tmp_path, name)


def test_a_trial_folder_never_follows_a_link_out(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "abc123-0001").symlink_to(outside)
    with pytest.raises(click.ClickException, match="not a plain folder name"):
        trial_folder(root, "abc123-0001")
    assert trial_folder(root, "abc123-0002") == root / "abc123-0002"


def test_hparam_values_are_booleans_numbers_or_text() -> None:
    assert hparam_value(True) is True
    assert hparam_value(64) == 64.0 and isinstance(hparam_value(64), float)
    assert hparam_value("relu") == "relu"
    assert hparam_value([128, 64]) == "[128,64]"
