"""Every relative link of README.md, CHANGELOG.md and docs/*.md (to a file, a folder, or a
page's ``#heading``) leads somewhere, as `tests.doc_links` reads them; and that reader
catches each kind of broken link."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.doc_links import anchors, broken, slug, stale_names

ROOT = Path(__file__).resolve().parents[1]
#: The pages whose links are followed: the README, the changelog and the pages of docs/.
LINKED = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("page", LINKED, ids=_name)
def test_no_relative_link_is_broken(page: Path) -> None:
    problems = broken(page, ROOT)
    assert not problems, "\n".join(problems)


def test_the_link_checker_catches_what_would_escape_it(tmp_path: Path) -> None:
    """The rules of `tests.doc_links`, on pages that break each of them once."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text(
        "# B page\n\n## One machine, no servers: `sweepstack run`\n\n## Twice\n\n## Twice\n"
    )
    page = tmp_path / "a.md"
    page.write_text("\n".join([
        "# A",
        "[fine](docs/b.md) [fine](docs/b.md#one-machine-no-servers-sweepstack-run)",
        "[fine](#a) [fine](docs/) [fine](https://example.com/x.md) ![fine](docs/b.md#twice-1)",
        "[gone](docs/c.md)",
        "[no heading](docs/b.md#two-machines)",
        "![no image](docs/shot.png) [out](../elsewhere.md)",
        "`[in code](docs/c.md)`",
        "```",
        "[in a block](docs/c.md)",
        "```",
        "[here](#nowhere)",
        "[ref]: docs/d.md",
    ]))  # fmt: skip
    assert slug("Analysis: what the sweep found") == "analysis-what-the-sweep-found"
    assert {"twice", "twice-1", "b-page"} <= anchors((tmp_path / "docs" / "b.md").read_text())
    found = broken(page, tmp_path)
    assert [line.split(": ", 1)[0] for line in found] == [
        "a.md:4",
        "a.md:5",
        "a.md:6",
        "a.md:6",
        "a.md:11",
        "a.md:12",
    ], found
    assert "no such file" in found[0] and "has no heading #two-machines" in found[1]
    assert "leads out of the checkout" in found[3] and "#nowhere" in found[4]


@pytest.mark.parametrize("page", LINKED, ids=_name)
def test_the_paths_and_modules_a_page_names_exist(page: Path) -> None:
    """A page that names ``cli/main.py``, ``tests/x.py::test_y`` or ``core.store.roles`` in
    code names something that is there: a move or a rename updates the pages too."""
    problems = stale_names(page, ROOT)
    assert not problems, "\n".join(problems)


def test_the_name_checker_catches_stale_names(tmp_path: Path) -> None:
    (tmp_path / "core" / "store").mkdir(parents=True)
    (tmp_path / "core" / "store" / "roles.py").write_text("class Reads:\n    pass\nX = 1\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def test_one():\n    pass\n")
    page = tmp_path / "a.md"
    page.write_text("\n".join([
        "`core/store/roles.py` `core.store.roles` `core.store.roles.Reads.trials`",
        "`core.store.roles.X` `workers.run_trial`",
        "`tests/test_a.py::test_one` `core/<floor>/x.py` `core/store/`",
        "`core/spec.py`",
        "`tests/test_a.py::test_two`",
        "`core.store.reads`",
        "`core.store.roles.Writes`",
        "```",
        "`core/gone.py`",
        "```",
    ]))  # fmt: skip
    assert stale_names(page, tmp_path) == [
        "a.md:4: core/spec.py: no such file or folder",
        "a.md:5: tests/test_a.py::test_two: tests/test_a.py defines no test_two",
        "a.md:6: core.store.reads: no such module",
        "a.md:7: core.store.roles.Writes: core.store.roles defines no Writes",
    ]
