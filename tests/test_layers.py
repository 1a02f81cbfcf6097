"""Who may import whom (DESIGN.md, "Folders and who may import whom"), read from the
source with `ast`: a module-level or function-level import alike counts, and so does a
string that names one of our modules as an entry point (``"cli.wsgi:app"`` for gunicorn,
``"workers.main"`` for ``python -m``), since the process it starts runs that module.

The floors, bottom up: `core` (itself in floors: the plumbing modules, then `core.spec`, then
`core.store`, then `core.analysis`); `scheduler` and `workers` on `core`; the shared web
layer `web` on `core`; `api` (which may also use the scheduler) and `dashboard` on `web`,
never each other; `cli` on top of everything, imported by nothing. Beside `cli`, the library
`sweepstack` (what a user's own Python imports: `sweepstack.load_model`) stands on `core` and
`workers` alone, and nothing of ours imports it: it needs the workers' model code but no
server, CLI or web layer. Only `core.store` imports
pymongo; only `workers` imports torch; only `scheduler`, `workers` and `core.spec.pruners`
import optuna (the spec's pruner is built in one place, for the scheduler and for the
workers that run the pruners needing no other trial in flight, `workers.pruning`);
flask, celery and plotly stay out of `core`. And no two of our modules import each other,
however far round.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = ("core", "scheduler", "workers", "web", "api", "dashboard", "cli", "sweepstack")
#: package -> the packages of ours it may import (itself always).
ALLOWED = {
    "core": set(),
    "scheduler": {"core"},
    "workers": {"core"},
    "web": {"core"},
    "api": {"core", "web", "scheduler"},
    "dashboard": {"core", "web"},
    "cli": {"core", "scheduler", "workers", "web", "api", "dashboard"},
    "sweepstack": {"core", "workers"},
}
#: The floors inside `core`, bottom up: each may import only itself and those below.
CORE_FLOORS = ("core", "core.spec", "core.store", "core.analysis")
#: third-party module -> the only places (packages, core floors or modules) that may import it.
ONLY = {
    "pymongo": {"core.store"},
    "bson": {"core.store"},
    "torch": {"workers"},
    "optuna": {"scheduler", "workers", "core.spec.pruners"},
}
#: third-party modules that never enter `core`.
NEVER_IN_CORE = {"flask", "werkzeug", "celery", "plotly"}
#: A string naming one of our modules, optionally with an attribute (``mod:attr``) or
#: gunicorn's ``python:`` prefix.
ENTRY = re.compile(r"^(?:python:)?((?:" + "|".join(OURS) + r")(?:\.\w+)+)(?::(\w+))?$")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {
    module_name(path): path for package in OURS for path in sorted((ROOT / package).rglob("*.py"))
}


def core_floor(module: str) -> str:
    """The floor of `core` a module of it stands on."""
    for floor in reversed(CORE_FLOORS[1:]):
        if module == floor or module.startswith(floor + "."):
            return floor
    return "core"


def _imported(node: ast.AST) -> Iterator[str]:
    """The dotted names an import statement reaches: ``from a.b import c`` reaches ``a.b.c``
    when that is a module of ours, else ``a.b``."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        for alias in node.names:
            full = f"{node.module}.{alias.name}"
            yield full if full in MODULES else node.module


def _entry_points(tree: ast.AST) -> Iterator[str]:
    """Our modules named by string constants (checked to exist by the test below)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = ENTRY.match(node.value)
            if match and match.group(1) in MODULES:
                yield match.group(1)


def imports_of(path: Path) -> set[str]:
    """The dotted names a Python file imports, or starts as an entry point."""
    tree = ast.parse(path.read_text(), str(path))
    names = {name for node in ast.walk(tree) for name in _imported(node)}
    return names | set(_entry_points(tree))


GRAPH = {module: imports_of(path) for module, path in MODULES.items()}


def _problems(module: str, names: set[str]) -> list[str]:
    package = module.split(".")[0]
    tops = {name.split(".")[0] for name in names}
    wrong = sorted((tops & set(OURS)) - ALLOWED[package] - {package})
    place = core_floor(module) if package == "core" else package
    wrong += sorted(
        name for name, who in ONLY.items() if name in tops and not {place, module} & who
    )
    if package == "core":
        wrong += sorted(tops & NEVER_IN_CORE)
        below = CORE_FLOORS[: CORE_FLOORS.index(place) + 1]
        wrong += sorted(
            name for name in names if name in MODULES and name.startswith("core.")
            and core_floor(name) not in below
        )
    return wrong


@pytest.mark.parametrize("package", OURS)
def test_packages_import_only_what_the_design_allows(package: str) -> None:
    wrong = []
    for module, names in sorted(GRAPH.items()):
        if module.split(".")[0] == package and (problems := _problems(module, names)):
            wrong.append(f"{MODULES[module].relative_to(ROOT)}: {problems}")
    assert wrong == [], wrong


def test_the_rules_catch_a_wrong_import() -> None:
    assert _problems("core.spec.sweep", {"core.store.records"}) == ["core.store.records"]
    assert _problems("core.spec.sweep", {"pymongo"}) == ["pymongo"]
    assert _problems("core.errors", {"flask"}) == ["flask"]
    assert _problems("dashboard.data", {"api.errors"}) == ["api"]
    assert _problems("web.auth", {"cli.app"}) == ["cli"]
    assert _problems("cli.main", {"api.app", "workers.main", "torch"}) == ["torch"]
    assert _problems("sweepstack", {"cli.local", "workers.models_io", "torch"}) == [
        "cli", "torch"
    ]


def test_string_entry_points_name_modules_that_exist() -> None:
    """Every ``package.module[:attr]`` string of ours names a module that exists (and, with an
    attribute, one the module defines), so a rename cannot leave a dead entry point."""
    wrong = []
    for module, path in sorted(MODULES.items()):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            match = ENTRY.match(node.value)
            if not match or not (match.group(2) or node.value.startswith("python:")):
                continue
            target, attr = match.groups()
            if target not in MODULES:
                wrong.append(f"{module}: {node.value!r} names no module")
            elif attr and not re.search(
                rf"^(?:{attr}\b\s*[:=]|def {attr}\b|class {attr}\b)",
                MODULES[target].read_text(),
                re.MULTILINE,
            ):
                wrong.append(f"{module}: {node.value!r}: {target} defines no {attr}")
    assert wrong == [], wrong


def test_the_string_entry_points_are_seen() -> None:
    assert "cli.wsgi" in GRAPH["cli.api_server"]
    assert "workers.main" in GRAPH["cli.worker"]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root] & graph.keys())))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child] & graph.keys()))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_no_import_cycles_between_our_modules() -> None:
    graph = {module: names - {module} for module, names in GRAPH.items()}
    assert _cycles(graph) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
