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

import ast
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


#: Top folders whose paths the pages name in code spans (``cli/main.py``, ``tests/x.py::test_y``).
TOP_FOLDERS = (
    "core", "scheduler", "workers", "web", "api", "dashboard", "cli", "tests", "bench",
    "configs", "docker", "scripts", "examples", "docs",
)  # fmt: skip
#: Our packages, whose dotted module names the pages name in code spans (``core.store.roles``).
PACKAGES = ("core", "scheduler", "workers", "web", "api", "dashboard", "cli")
SOURCE_PATH = re.compile(
    r"^(?:%s)/[\w./-]*?(?:\.\w+|/)(?:::(\w+))?$" % "|".join(TOP_FOLDERS)  # noqa: UP031
)
#: Celery task names: dotted like modules, but names of tasks (DESIGN.md).
TASK_NAMES = {"workers.run_trial", "workers.run_group", "workers.run_ranks"}
DOTTED = re.compile(r"^((?:%s)(?:\.\w+)+)$" % "|".join(PACKAGES))  # noqa: UP031


def code_spans(text: str) -> list[tuple[int, str]]:
    """The inline code spans of a page's prose (fenced blocks left out), numbered by line."""
    return [
        (number, match.group(2).strip())
        for number, line in _prose(text)
        for match in CODE_SPAN.finditer(line)
    ]


def _module_file(root: Path, dotted: str) -> Path | None:
    base = root.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _defines(module: Path, name: str) -> bool:
    """Whether a module defines `name` at its top level (a function, a class, an assignment
    or an import), read with `ast`."""
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name == name:
                return True
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
        elif isinstance(node, ast.Import | ast.ImportFrom) and any(
            (alias.asname or alias.name.split(".")[0]) == name for alias in node.names
        ):
            return True
    return False


def _stale_dotted(root: Path, span: str) -> str | None:
    """Why a dotted name of ours leads nowhere: the longest prefix that is a module must
    define the next name (a method after a class is not followed)."""
    parts = span.split(".")
    for cut in range(len(parts), 1, -1):
        module = ".".join(parts[:cut])
        found = _module_file(root, module)
        if found is None:
            continue
        rest = parts[cut:]
        if rest and not _defines(found, rest[0]):
            return f"{module} defines no {rest[0]}"
        return None
    return "no such module"


def stale_names(page: Path, root: Path) -> list[str]:
    """Code spans of `page` that name a path of the checkout, a test in a file, or one of our
    modules (or a name a module defines) that does not exist, as ``page:line: name: why``.
    Spans with a placeholder (``<...>``, ``*``, ``{...}``) are not names and are skipped, and
    so are the task names (``workers.run_trial``), which name no module."""
    name = page.relative_to(root).as_posix()
    problems: list[str] = []
    for line, span in code_spans(page.read_text()):
        if any(mark in span for mark in "<>*{}$ ") or span in TASK_NAMES:
            continue
        why = None
        if SOURCE_PATH.match(span):
            path, _, test = span.partition("::")
            target = root / path
            if not target.exists():
                why = "no such file or folder"
            elif test and not re.search(rf"^\s*def {re.escape(test)}\b", target.read_text(), re.M):
                why = f"{path} defines no {test}"
        elif DOTTED.match(span):
            why = _stale_dotted(root, span)
        if why is not None:
            problems.append(f"{name}:{line}: {span}: {why}")
    return problems
