"""Who may import whom (DESIGN.md, "Folders and who may import whom"), read from the
source with `ast`: a module-level or function-level import alike counts.

``api`` and ``dashboard`` never import each other or ``web`` (the composition that mounts
both); only ``core`` imports pymongo; only ``workers`` imports torch; only ``scheduler``
imports optuna (the API reaches it through the scheduler; workers and the dashboard never
need it).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = {"core", "scheduler", "workers", "api", "dashboard", "web"}
#: package -> the packages of ours it may import (itself always).
ALLOWED = {
    "core": set(),
    "scheduler": {"core"},
    "workers": {"core"},
    "api": {"core", "scheduler"},
    "dashboard": {"core"},
    "web": {"core", "scheduler", "api", "dashboard"},
}
#: third-party module -> the only packages that may import it.
ONLY = {
    "pymongo": {"core"},
    "bson": {"core"},
    "torch": {"workers"},
    "optuna": {"scheduler"},
}


def imports_of(path: Path) -> set[str]:
    """The top-level names of every absolute import in a Python file."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_packages_import_only_what_the_design_allows(package: str) -> None:
    wrong = []
    for path in sorted((ROOT / package).rglob("*.py")):
        names = imports_of(path)
        ours = (names & OURS) - ALLOWED[package] - {package}
        third = {name for name, who in ONLY.items() if name in names and package not in who}
        if ours or third:
            wrong.append(f"{path.relative_to(ROOT)}: {sorted(ours | third)}")
    assert wrong == [], wrong
