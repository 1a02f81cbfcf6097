"""The sweep spec: a YAML or JSON document describing a search space over trial configs.

``load_spec`` parses a document (text, a file, or a mapping) and hands it to its kind
(`core.spec.kinds.kind_of`), whose loader validates it into a `SweepSpec` or raises
`SpecError` listing every problem with its dotted path and the rule it broke, e.g.
``model.hidden_units[2]: must be > 0, got -5``. Nothing is expanded here; see
``scheduler.expand``.

This is the spec language's front door, so the names its readers use with `load_spec` are
importable from here too: `SweepSpec` and `METRICS` (`core.spec.spec`), `Search`
(`core.spec.search`) and `problems_from` (`core.spec.problems`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from core.errors import Problem, SpecError
from core.shares import PRIORITIES
from core.spec.documents import SpecLoader, number_error
from core.spec.kinds import kind_of
from core.spec.problems import problems_from, show_value
from core.spec.search import Search
from core.spec.spec import METRICS, SweepSpec

__all__ = ["METRICS", "Search", "SweepSpec", "load_spec", "load_spec_file", "problems_from"]


def _parse_document(source: str | Path | dict[str, Any], filename: str) -> dict[str, Any]:
    if isinstance(source, dict):
        return source
    if isinstance(source, Path):
        filename = str(source)
        try:
            source = source.read_text(encoding="utf-8")
        except OSError as exc:
            raise SpecError([Problem("", f"{filename}: cannot read: {exc.strerror}")]) from exc
    try:
        data = yaml.load(source, Loader=SpecLoader)  # a SafeLoader subclass
    except ValueError as exc:  # an integer past Python's 4,300-digit conversion limit
        raise SpecError([Problem("", f"{filename}: {number_error(exc)}")]) from exc
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{filename}:{mark.line + 1}:{mark.column + 1}" if mark else filename
        what = exc.problem or exc.context or "invalid syntax"
        raise SpecError([Problem("", f"{where}: YAML syntax error: {what}")]) from exc
    except yaml.YAMLError as exc:
        raise SpecError([Problem("", f"{filename}: YAML error: {exc}")]) from exc
    if not isinstance(data, dict):
        rule = f"{filename}: a spec must be a mapping, got {show_value(data)}"
        raise SpecError([Problem("", rule)])
    return data


def load_spec(source: str | Path | dict[str, Any], filename: str = "<spec>") -> SweepSpec:
    """Parse and validate a sweep spec from YAML/JSON text, a file path, or a dict.

    The document's kind validates it (`core.spec.kind.TrialKind.load_spec`): a spec that
    names ``trainable`` runs a user's training function (`core.spec.trainable`, a
    `TrainableSpec`); one with a ``caffe`` section trains a Caffe net (`core.spec.caffe.spec`,
    a `CaffeSpec`), and read from a file, its ``net`` and ``solver`` paths are read (relative
    to the file) into the texts it stores; any other is the built-in network's
    (`core.spec.mlp`, a `SweepSpec`).
    """
    data = _parse_document(source, filename)
    if "priority" not in data:
        return kind_of(data).load_spec(data, source if isinstance(source, Path) else None)
    # Every kind has it, so it is read here, once: the kind's loader sees the rest.
    priority = data["priority"]
    rest = {key: value for key, value in data.items() if key != "priority"}
    problems: list[Problem] = []
    if not isinstance(priority, str) or priority not in PRIORITIES:
        problems.append(Problem(
            "priority", f"must be one of {', '.join(PRIORITIES)}, got {show_value(priority)}"
        ))  # fmt: skip
    try:
        spec = kind_of(rest).load_spec(rest, source if isinstance(source, Path) else None)
    except SpecError as exc:
        raise SpecError([*problems, *exc.problems], exc.spec) from None
    if problems:
        raise SpecError(problems)
    return spec.model_copy(
        update={"priority": priority, "document": {**spec.document, "priority": priority}}
    )


def load_spec_file(path: str | Path) -> SweepSpec:
    """Read a spec from a .yaml, .yml or .json file."""
    return load_spec(Path(path))
