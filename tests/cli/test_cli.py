"""The `sweepstack` CLI: exit codes, formats and messages."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import main
from core.spec.config import TrialConfig

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
MCLEOD = str(CONFIGS / "mcleod-digits.yaml")
SWEEPSTACK = str(Path(sys.executable).parent / "sweepstack")


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def bad_spec(tmp_path: Path) -> str:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "name: bad\ndataset: {name: digits}\n"
        "model:\n  hidden_units: [16, 32, -5]\n  activation: swish\n"
    )
    return str(path)


def test_count_of_mcleod_is_360(runner: CliRunner) -> None:
    result = runner.invoke(main, ["generate", MCLEOD, "--count"])
    assert result.exit_code == 0
    assert result.output == "360\n"


def test_console_script_exit_codes(bad_spec: str) -> None:
    ok = subprocess.run([SWEEPSTACK, "generate", MCLEOD, "--count"], capture_output=True, text=True)
    assert (ok.returncode, ok.stdout) == (0, "360\n")
    bad = subprocess.run([SWEEPSTACK, "validate", bad_spec], capture_output=True, text=True)
    assert bad.returncode == 2
    lines = bad.stderr.strip().splitlines()
    assert lines[0] == "error: model.hidden_units[2]: must be > 0, got -5"
    assert lines[1].startswith("error: model.activation: must be one of")
    assert bad.stdout == ""


def test_validate_ok(runner: CliRunner) -> None:
    result = runner.invoke(main, ["validate", MCLEOD])
    assert result.exit_code == 0
    assert "mcleod-digits: 360 trials over 4 dimensions (grid search)" in result.output


def test_generate_bad_spec_exits_2(runner: CliRunner, bad_spec: str) -> None:
    result = runner.invoke(main, ["generate", bad_spec])
    assert result.exit_code == 2


def test_missing_file_exits_2_with_its_name(runner: CliRunner, tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.yaml")
    result = runner.invoke(main, ["validate", missing])
    assert result.exit_code == 2
    assert missing in result.output


def test_yaml_syntax_error_exits_2_with_line(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("name: x\ndataset:\n  name: digits\n  model: [1,\n")
    result = runner.invoke(main, ["validate", str(path)])
    assert result.exit_code == 2
    assert f"{path}:5:" in result.output and "YAML syntax error" in result.output


def test_too_many_trials_exits_2(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(
        "name: big\ndataset: {name: digits}\nmodel:\n  hidden_units: {int: [1, 1000]}\n"
        "  hidden_layers: {int: [1, 100]}\n  dropout: [0, 0.5]\n"
    )
    result = runner.invoke(main, ["validate", str(path)])
    assert result.exit_code == 2
    assert "limits.max_trials: the sweep expands to 200,000 trials" in result.output


def test_validate_and_generate_apply_the_servers_ceilings(
    runner: CliRunner, tmp_path: Path
) -> None:
    path = tmp_path / "wide.yaml"
    path.write_text(
        "name: wide\ndataset: {path: /etc/passwd.csv}\nexecution: {parallel: {world_size: 1024}}\n"
    )
    env = {"SWEEPSTACK_DATASETS_DIR": str(tmp_path)}
    for command in ("validate", "generate"):
        result = runner.invoke(main, [command, str(path)], env=env)
        assert result.exit_code == 2, result.output
        assert "error: dataset.path: is outside the datasets folder" in result.output
        assert "error: execution.parallel.world_size: processes per trial must be <= 8" in (
            result.output
        )
    path.write_text("name: ok\ndataset: {path: d.csv}\nexecution: {parallel: {world_size: 16}}\n")
    (tmp_path / "d.csv").write_text("x,target\n1,0\n")
    result = runner.invoke(
        main, ["validate", str(path)], env={**env, "SWEEPSTACK_MAX_WORLD_SIZE": "16"}
    )
    assert result.exit_code == 0, result.output


def test_jsonl_has_id_and_params(runner: CliRunner) -> None:
    result = runner.invoke(main, ["generate", MCLEOD, "--format", "jsonl"])
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert len(rows) == 360
    assert set(rows[0]) == {"id", "index", "seed", "params"}
    assert rows[0]["params"]["model.hidden_units"] == 16


def test_csv_has_a_column_per_param(runner: CliRunner) -> None:
    result = runner.invoke(
        main, ["generate", str(CONFIGS / "random-search.yaml"), "--format", "csv"]
    )
    rows = list(csv.DictReader(io.StringIO(result.output)))
    assert len(rows) == 40
    assert "training.momentum" in rows[0] and "training.lr" in rows[0]
    adam = [r for r in rows if r["training.optimizer"] == "adam"]
    assert adam and all(r["training.momentum"] == "" for r in adam)


def test_csv_quotes_cells_a_spreadsheet_would_run(runner: CliRunner, tmp_path: Path) -> None:
    spec = tmp_path / "formulas.yaml"
    spec.write_text("name: f\ndataset: {path: ['=1+2.npz', '@A1.npz', ok.npz]}\n"
                    "model: {hidden_units: 8}\n")  # fmt: skip
    result = runner.invoke(main, ["generate", str(spec), "--format", "csv"])
    assert result.exit_code == 0, result.output
    paths = [r["dataset.path"] for r in csv.DictReader(io.StringIO(result.output))]
    assert paths == ["'=1+2.npz", "'@A1.npz", "ok.npz"]


def test_table_is_limited_and_says_so(runner: CliRunner) -> None:
    result = runner.invoke(main, ["generate", MCLEOD, "--limit", "5"])
    assert result.exit_code == 0
    assert "mcleod-digits: 360 trials" in result.output
    assert "355 more" in result.output
    assert "hidden_units" in result.output


def test_out_writes_a_file(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "trials.jsonl"
    result = runner.invoke(main, ["generate", MCLEOD, "--format", "jsonl", "--out", str(out)])
    assert result.exit_code == 0
    assert len(out.read_text().splitlines()) == 360


def test_help_lists_commands(runner: CliRunner) -> None:
    result = runner.invoke(main, ["--help"])
    assert result.exit_code == 0
    assert "validate" in result.output and "generate" in result.output
    result = runner.invoke(main, ["generate", "--help"])
    assert "--format [table|jsonl|csv]" in result.output


def test_jsonl_with_config_gives_what_a_worker_trains(runner: CliRunner) -> None:
    spec = str(CONFIGS / "parallel-tau.yaml")
    result = runner.invoke(main, ["generate", spec, "--format", "jsonl", "--with-config"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert len(rows) == 8
    config = TrialConfig.model_validate(rows[3]["config"])
    assert config.execution.parallel.world_size == 2
    assert config.execution.parallel.tau == rows[3]["params"]["execution.parallel.tau"]
    assert config.training.seed == rows[3]["seed"]
    plain = runner.invoke(main, ["generate", spec, "--format", "jsonl"])
    assert "config" not in json.loads(plain.output.splitlines()[0])


def test_validate_says_which_key_a_misspelled_one_meant(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "typos.yaml"
    path.write_text(
        "name: typos\ndataset: {name: digits}\nmodle: {hidden_layers: 1}\n"
        "model: {hiden_units: 3, colour: red}\nsearch: {algoritm: grid}\n"
    )
    result = runner.invoke(main, ["validate", str(path)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert any(
        line.startswith("error: modle: unknown key (known: name,")
        and line.endswith("; did you mean 'model'?")
        for line in lines
    ), lines
    assert any(
        line.startswith("error: model.hiden_units: unknown key (known: kind,")
        and line.endswith("; did you mean 'hidden_units'?")
        for line in lines
    ), lines
    assert "error: search.algoritm: unknown key (known: algorithm, trials" in result.output
    assert "did you mean 'algorithm'?" in result.output
    (colour,) = [line for line in lines if line.startswith("error: model.colour")]
    assert "did you mean" not in colour  # nothing close: no guess


def test_validate_refuses_a_dataset_path_that_names_no_file(
    runner: CliRunner, tmp_path: Path
) -> None:
    path = tmp_path / "file.yaml"
    path.write_text("name: f\ndataset: {path: [here.csv, missing.csv, sub.csv]}\n")
    (tmp_path / "here.csv").write_text("x,target\n1,0\n")
    (tmp_path / "sub.csv").mkdir()
    env = {"SWEEPSTACK_DATASETS_DIR": str(tmp_path)}
    result = runner.invoke(main, ["validate", str(path)], env=env)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert lines == [
        f"error: dataset.path: names no file in the datasets folder {tmp_path} "
        "(SWEEPSTACK_DATASETS_DIR), got 'missing.csv'",
        f"error: dataset.path: is a folder, not a file in the datasets folder {tmp_path} "
        "(SWEEPSTACK_DATASETS_DIR), got 'sub.csv'",
    ]
    # `run` checks the same before anything starts.
    result = runner.invoke(main, ["run", str(path), "--data", str(tmp_path / "data")], env=env)
    assert result.exit_code == 2 and lines[0] in result.output
    assert not (tmp_path / "data" / "logs").exists()
    path.write_text("name: f\ndataset: {path: here.csv}\n")
    assert runner.invoke(main, ["validate", str(path)], env=env).exit_code == 0


def test_every_command_loads_and_run_starts_without_the_servers_libraries() -> None:
    """Commands are imported when they run (`cli.main.COMMANDS`): each one named there
    exists under its name, and `sweepstack run` reaches the start of its workers without
    importing pymongo, Flask or Optuna (they come once the workers are on their way)."""
    from cli.main import COMMANDS, load_command

    assert sorted(load_command(name).name for name in COMMANDS) == sorted(COMMANDS)
    code = (
        "import sys, cli.main, cli.run; "
        "print(sorted(m for m in ('pymongo', 'flask', 'optuna', 'torch') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.stdout.strip() == "[]"


def test_a_long_free_string_exits_2_naming_the_field(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "long.yaml"
    path.write_text("name: long\ndataset: {path: d.csv, target: " + "t" * 5000 + "}\n")
    for command in ("validate", "generate"):
        result = runner.invoke(
            main, [command, str(path)], env={"SWEEPSTACK_DATASETS_DIR": str(tmp_path)}
        )
        assert result.exit_code == 2, result.output
        assert (
            "error: dataset.target: its UTF-8 bytes must be <= 4,096 on this server "
            "(SWEEPSTACK_MAX_STRING_BYTES), got 5,000"
        ) in result.output
