"""``sweepstack report``: the format from -o's suffix, and bad input that exits 2 (or 1 for
a sweep that is not there) with one line naming the problem, on the real store."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import main
from core.store.store import Store
from tests.core import open_store
from tests.dashboard.conftest import small_sweep_spec
from tests.dashboard.seeding import seed_sweep


@pytest.fixture
def store(secantus_url: str, db_name: str) -> Iterator[Store]:
    yield from open_store(secantus_url, db_name)


def test_report_writes_the_format_its_file_names_and_refuses_bad_input(
    store: Store, secantus_url: str, db_name: str, tmp_path: Path
) -> None:
    sweep_id = seed_sweep(store, small_sweep_spec(), owner="alice").sweep_id
    env = {"SWEEPSTACK_MONGO_URL": secantus_url, "SWEEPSTACK_MONGO_DB": db_name}
    runner = CliRunner()

    out = tmp_path / "found.json"
    done = runner.invoke(main, ["report", sweep_id, "-o", str(out)], env=env)
    assert done.exit_code == 0, done.output
    assert json.loads(out.read_text())["sweep"]["id"] == sweep_id

    bad = runner.invoke(main, ["report", "$where"], env=env)
    assert bad.exit_code == 2 and "sweep_id" in bad.stderr and "Traceback" not in bad.output
    missing = runner.invoke(main, ["report", "0123456789ab"], env=env)
    assert missing.exit_code == 1 and "no sweep 0123456789ab" in missing.stderr
    unwritable = runner.invoke(main, ["report", sweep_id, "-o", str(tmp_path / "no" / "x.md")],
                               env=env)  # fmt: skip
    assert unwritable.exit_code == 1 and "cannot write" in unwritable.stderr
    # No URL: the data folder's store; an empty folder has none, and says so (the
    # `sweepstack` entry point prints this error and exits 1; CliRunner holds it).
    local = runner.invoke(
        main,
        ["report", sweep_id, "--data", str(tmp_path / "empty")],
        env={"SWEEPSTACK_MONGO_URL": ""},
    )
    assert local.exit_code == 1 and "no results in" in str(local.exception), local.output
    wrong = runner.invoke(main, ["report", sweep_id, "--format", "pdf"], env=env)
    assert wrong.exit_code == 2 and "--format" in wrong.stderr


def test_the_markdown_report_shows_a_users_markup_as_text(
    store: Store, secantus_url: str, db_name: str, tmp_path: Path
) -> None:
    from cli.report_files import md

    name = '<img src=x onerror=alert(1)> [click](https://attacker.example) | *loud*'
    sweep_id = seed_sweep(store, small_sweep_spec(name=name), owner="alice").sweep_id
    env = {"SWEEPSTACK_MONGO_URL": secantus_url, "SWEEPSTACK_MONGO_DB": db_name}
    out = tmp_path / "found.md"
    done = CliRunner().invoke(main, ["report", sweep_id, "-o", str(out)], env=env)
    assert done.exit_code == 0, done.output
    text = out.read_text()
    heading = text.splitlines()[0]
    assert heading == f"# What sweep {md(name)} found"
    import re

    assert not re.search(r"(?<!\\)<", text), "an HTML tag Markdown would pass through"
    assert not re.search(r"(?<!\\)\]\(", text), "a Markdown link"
    assert md("a|b <b>&c") == "a\\|b \\<b\\>\\&c" and md("hidden_units") == "hidden_units"
