"""Reading a Caffe spec's prototxt files, for the CLI: paths in, texts out.

The REST API never reads a path (`core.spec.caffe.spec` refuses one); the CLI reads the files
named by a spec file before the spec is validated and stored, so the stored sweep carries
the texts and a worker on another host needs no shared file system.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.errors import Problem, SpecError
from core.spec.caffe.prototxt import Message, PrototxtError, parse


def _read(path: Path, key: str, hint: str = "") -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise SpecError([Problem(f"caffe.{key}", f"{path}: cannot read: {why}{hint}")]) from exc


def read_caffe_files(data: dict[str, Any], spec_path: Path) -> dict[str, Any]:
    """The document with ``caffe.net``/``caffe.solver`` read into ``net_text``/``solver_text``.

    For the CLI: paths are relative to the spec file; when ``net`` is left out, the solver's
    ``net:`` (or ``train_net:``) names it, relative to the solver file. Each text is parsed
    here with its file's name, so a syntax error names the file, line and column; the names
    are kept (``net_source``, ``solver_source``) for the errors of later checks.
    """
    raw = data.get("caffe")
    if not isinstance(raw, dict) or not any(k in raw for k in ("net", "solver")):
        return data
    caffe = {k: v for k, v in raw.items() if k not in ("net", "solver")}
    here = spec_path.parent
    solver_file = None
    if isinstance(raw.get("solver"), str):
        solver_file = here / raw["solver"]
        caffe["solver_text"] = _read(solver_file, "solver")
    net_file = here / raw["net"] if isinstance(raw.get("net"), str) else None
    hint = ""
    if net_file is None and solver_file is not None:
        solver = _parse_text(caffe["solver_text"], str(solver_file), "caffe.solver")
        field = "net" if solver.has("net") else "train_net"
        named = solver.get(field)
        if isinstance(named, str):
            net_file = solver_file.parent / named
            # Caffe's own solvers name their net from Caffe's root ("examples/mnist/...").
            hint = (
                f" (the solver's {field}: {named!r}, read relative to the solver file); "
                "give the net's file as caffe.net: in the spec, relative to the spec file "
                f"(it overrides the solver's {field}:)"
            )
    if solver_file is not None:
        caffe["solver_source"] = str(solver_file)
    if net_file is not None:
        caffe["net_source"] = str(net_file)
        caffe["net_text"] = _read(net_file, "net", hint)
        _parse_text(caffe["net_text"], str(net_file), "caffe.net")
    if solver_file is not None:
        _parse_text(caffe["solver_text"], str(solver_file), "caffe.solver")
    for key in ("net", "solver"):
        if key in raw and not isinstance(raw[key], str):
            caffe[key] = raw[key]  # reported by the spec rules
    return {**data, "caffe": caffe}


def _parse_text(text: str, source: str, path: str) -> Message:
    try:
        return parse(text, source)
    except PrototxtError as exc:
        raise SpecError([Problem(path, str(exc))]) from exc
