"""The fenced blocks of README.md and docs/*.md and the rules they follow, for
`tests/test_readme.py`.

`parse` reads a page's blocks and their ``<!-- readme-test: ... -->`` markers, `check` says
why a block is neither run as it stands nor validly marked, `runnable` picks those the test
runs. Every page follows the same rules with the same markers. Pure text: nothing here runs
a block.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Why a block may be left out, and nothing else: each names something this test cannot have.
SKIP_REASONS = {
    "docker": "needs a Docker engine",
    "gpu": "needs a GPU",
    "hosts": "needs a second machine, or runs on one you reach over the network",
    "bench": "a benchmark: minutes of work that prints figures",
    "long": "runs for minutes, or until Ctrl-C",
}
#: The marker of a block that runs against RabbitMQ and MongoDB at their default ports.
SERVICES = "services"
#: The marker of a block that serves a URL until Ctrl-C.
SERVES = "serves"
#: Fence languages; commands go in ``bash`` blocks, so no other shell name is allowed.
LANGUAGES = {"bash", "yaml", "toml", "python", "json", ""}
#: A first line that reads as a command: such a block must be a ``bash`` one.
COMMAND_START = re.compile(r"^(\.venv/bin/|sweepstack |python3? |docker |make |curl |export )")
#: What keeps running after a block ends or never ends; such a block needs a marker.
LINGERS = re.compile(r"(\bsweepstack\s+open\b|--hold\b|--watch\b|(?<!&)&\s*(#.*)?$)", re.MULTILINE)
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<lang>[^`\s]*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*readme-test:\s*(?P<body>.*?)\s*-->\s*$")
SKIP = re.compile(r"^skip\s+(?P<reason>[a-z]+)(\s*:\s*(?P<why>.+))?$")


@dataclass(frozen=True)
class Block:
    """One fenced block of a page (README.md or one of docs/*.md)."""

    line: int  # of its opening fence, from 1
    lang: str
    text: str
    heading: str
    marker: str | None  # the readme-test comment's body right before the fence
    doc: str = "README.md"  # the page, as a path from the checkout's root

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line} ({self.heading})"

    @property
    def services(self) -> bool:
        return self.marker == SERVICES

    @property
    def serves(self) -> bool:
        return self.marker == SERVES

    @property
    def skip_reason(self) -> str | None:
        if self.marker is None or self.services or self.serves:
            return None
        match = SKIP.match(self.marker)
        return match["reason"] if match else None


def parse(text: str, doc: str = "README.md") -> tuple[list[Block], list[str]]:
    """The fenced blocks of a Markdown text (the page `doc`), and the problems with its
    readme-test markers."""
    lines = text.splitlines()
    blocks: list[Block] = []
    problems: list[str] = []
    heading = "top"
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = FENCE.match(line)
        if fence is None:
            if line.startswith("#"):
                heading = line.lstrip("#").strip()
            marker = MARKER.match(line)
            if marker is not None:
                after = FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
                if after is None or after["lang"] != "bash":
                    problems.append(
                        f"{doc}:{i + 1}: a readme-test marker must be the line right "
                        "before a ```bash fence"
                    )
            i += 1
            continue
        indent, close = fence["indent"], fence["fence"]
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not (
            lines[j].strip().startswith(close) and lines[j].strip().strip(close[0]) == ""
        ):
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j])
            j += 1
        if j == len(lines):
            problems.append(f"{doc}:{i + 1}: a fence that is never closed")
        previous = MARKER.match(lines[i - 1]) if i > 0 else None
        blocks.append(
            Block(
                line=i + 1,
                lang=fence["lang"],
                text="\n".join(body) + "\n",
                heading=heading,
                marker=previous["body"] if previous else None,
                doc=doc,
            )
        )
        i = j + 1
    return blocks, problems


def check(blocks: list[Block]) -> list[str]:
    """Why any block is neither run as it stands nor validly marked."""
    problems: list[str] = []
    for block in blocks:
        if block.lang not in LANGUAGES:
            problems.append(
                f"{block.where}: ```{block.lang} block; write commands as ```bash so this "
                f"test runs them (languages: {', '.join(sorted(LANGUAGES - {''}))})"
            )
        first = block.text.lstrip().splitlines()[0] if block.text.strip() else ""
        if block.lang != "bash" and COMMAND_START.match(first):
            problems.append(f"{block.where}: reads as commands; make it a ```bash block")
        known = block.services or block.serves or block.skip_reason in SKIP_REASONS
        if block.marker is not None and not known:
            problems.append(
                f"{block.where}: marker {block.marker!r}: must be `{SERVICES}`, `{SERVES}`, "
                f"`skip REASON` or `skip REASON: why`, REASON one of {', '.join(SKIP_REASONS)}"
            )
        if block.lang == "bash" and block.marker is None and LINGERS.search(block.text):
            problems.append(
                f"{block.where}: starts something that keeps running (open, --hold, --watch, "
                "a trailing &); mark it <!-- readme-test: skip long --> or split it off"
            )
    return problems


def runnable(blocks: list[Block]) -> list[Block]:
    return [b for b in blocks if b.lang == "bash" and (b.marker is None or b.services or b.serves)]
