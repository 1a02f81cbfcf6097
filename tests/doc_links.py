"""The relative links of our Markdown pages and whether they lead anywhere, for
`tests/test_readme.py`.

A link is ``[text](target)``, an image ``![alt](target)`` or a reference definition
``[name]: target``, outside fenced blocks and inline code. A relative target must name a
file or folder of the checkout, and its ``#anchor``, when it has one and leads to a
Markdown page, one of that page's headings as GitHub spells them (`slug`) or an explicit
``id``/``name``. Links with a scheme (``https:``, ``mailto:``) are not followed. Pure text
and the file system: nothing here reaches the network.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
INLINE = re.compile(
    r"!?\[(?:[^\[\]\\]|\\.|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+[\"'(].*?[\"')])?\s*\)"
)
DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HTML_ANCHOR = re.compile(r"<a\s[^>]*\b(?:id|name)=[\"']([^\"']+)[\"']", re.IGNORECASE)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:|^//")


@dataclass(frozen=True)
class Link:
    """One link of a page."""

    line: int  # from 1
    target: str


def _prose(text: str) -> list[tuple[int, str]]:
    """The page's lines outside fenced blocks, numbered from 1."""
    out: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if match and (fence is None or line.strip().startswith(fence)):
            if fence is None:
                fence = match.group(1)
            elif line.strip().strip(fence[0]) == "":
                fence = None
            continue
        if fence is None:
            out.append((number, line))
    return out


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text as drawn (code spans, links and tags
    reduced to their text), lower case, punctuation dropped, each space a hyphen."""
    text = CODE_SPAN.sub(lambda m: m.group(2).strip(), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor a page has: its headings' slugs (a repeated one numbered ``-1``, ``-2``
    as GitHub does) and explicit ``<a id=…>`` or ``name=…``."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in _prose(text):
        heading = HEADING.match(line)
        if heading is not None:
            base = slug(heading.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        found.update(HTML_ANCHOR.findall(line))
    return found


def links(text: str) -> list[Link]:
    """The page's links, in order, code left out."""
    out: list[Link] = []
    for number, line in _prose(text):
        line = CODE_SPAN.sub("", line)
        definition = DEFINITION.match(line)
        if definition is not None:
            out.append(Link(number, definition.group(1)))
            continue
        out.extend(Link(number, match.group(1)) for match in INLINE.finditer(line))
    return out


def broken(page: Path, root: Path) -> list[str]:
    """Why each relative link of `page` leads nowhere, as ``page:line: target: why``."""
    name = page.relative_to(root).as_posix()
    problems: list[str] = []
    for link in links(page.read_text()):
        target = link.target
        if not target or SCHEME.match(target):
            continue
        where, _, anchor = target.partition("#")
        if where.startswith("/"):
            path = (root / where.lstrip("/")).resolve()
        else:
            path = (page.parent / where).resolve() if where else page.resolve()
        why = None
        if not path.is_relative_to(root.resolve()):
            why = "leads out of the checkout"
        elif not path.exists():
            why = "no such file or folder"
        elif anchor and path.suffix == ".md" and anchor not in anchors(path.read_text()):
            why = f"{path.relative_to(root.resolve()).as_posix()} has no heading #{anchor}"
        if why is not None:
            problems.append(f"{name}:{link.line}: {target}: {why}")
    return problems
