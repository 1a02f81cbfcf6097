"""Every relative link of README.md, CHANGELOG.md and docs/*.md (to a file, a folder, or a
page's ``#heading``) leads somewhere, as `tests.doc_links` reads them; and that reader
catches each kind of broken link."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.doc_links import anchors, broken, slug

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
