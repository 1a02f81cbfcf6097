"""The ``caffe`` section of a spec: the texts, the resize, and each dimension with its target.

`parse_caffe` checks the section's keys, parses the net's and the solver's texts (an error
names the file, line and column), and turns every leaf under ``layers`` and
``solver_params`` into a dimension (any form: grid list, ``{loguniform: ...}``,
``{int: ...}``, ``when:``) at its full path, with the `Target` it sets in the texts
(`core.spec.caffe.targets`). Problems are appended, each at the path the spec wrote.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from core.errors import Problem
from core.spec.caffe.prototxt import Message, PrototxtError, parse
from core.spec.caffe.solver import SolverConfig
from core.spec.caffe.targets import Target, resolve_layer_field
from core.spec.space import DIMENSION_KEYS, Categorical, Dimension, dedupe, parse_dimension
from core.spec.suggest import did_you_mean, unknown_key

#: The keys of the ``caffe`` section.
CAFFE_KEYS = ("net", "solver", "net_text", "solver_text", "net_source", "solver_source", "resize",
              "layers", "solver_params")  # fmt: skip
#: A layer's name as a spec may address it (a parameter's path is split at dots).
LAYER_NAME = re.compile(r"^[^.$\s][^.\s]{0,199}$")
#: The longest ``net_source``/``solver_source``: the file names errors show.
MAX_SOURCE = 300
#: The largest side of ``caffe.resize``.
MAX_RESIZE = 4096


def _group(raw: Any) -> bool:
    return isinstance(raw, dict) and not any(k in raw for k in DIMENSION_KEYS)


def _dimensions(
    raw: Any,
    path: str,
    parts: list[str],
    out: list[tuple[str, list[str], Any]],
    problems: list[Problem],
) -> None:
    """Each leaf below `path` as (path, parts below the layer or solver, raw leaf)."""
    if not isinstance(raw, dict):
        problems.append(Problem(path, "must be a mapping of field names to values"))
        return
    layer_level = path == "caffe.layers"
    for key, leaf in raw.items():
        at = f"{path}.{key}"
        if layer_level and not (isinstance(key, str) and LAYER_NAME.match(key)):
            rule = "a layer's name here must have no dot or space, nor start with $"
            problems.append(Problem(at, rule))
        elif not layer_level and not (isinstance(key, str) and key.isidentifier()):
            problems.append(Problem(at, "a field name must be an identifier"))
        elif layer_level and not isinstance(leaf, dict):
            problems.append(Problem(at, "must be a mapping of the layer's fields to values"))
        elif _group(leaf):
            _dimensions(leaf, at, [*parts, key], out, problems)
        else:
            out.append((at, [*parts, key], leaf))


def _leaf(raw: Any, path: str, problems: list[Problem]) -> Dimension | None:
    before = len(problems)
    dim, _ = parse_dimension(raw, path, problems)
    if len(problems) > before:
        return None
    values = dim.values() if dim.finite else []
    for value in values:
        items = value if isinstance(value, list) else [value]
        if any(v is None or isinstance(v, dict | list) for v in items):
            rule = f"must be a number, a word or a list of them, got {value!r}"
            problems.append(Problem(path, rule))
            return None
    if isinstance(dim, Categorical):
        dim = dim.model_copy(update={"choices": tuple(dedupe(dim.choices))})
    return dim


_SEPARATE_TEST = (
    "a separate test net is not supported: write one net whose test-only layers say "
    "include { phase: TEST }, as Caffe's train_test.prototxt files do"
)
_INLINE = "an inline net is not read: give the net as a file (caffe.net, or the solver's net:)"
#: Solver fields naming nets the trial would not train: refused rather than ignored.
_OTHER_NETS = {
    "test_net": _SEPARATE_TEST,
    "test_net_param": _SEPARATE_TEST,
    "net_param": _INLINE,
    "train_net_param": _INLINE,
}


def solver_fields() -> list[str]:
    """The solver fields a sweep may set: those `SolverConfig` keeps (and the older enum
    ``solver_type``), without the nets."""
    names = [f.name for f in dataclasses.fields(SolverConfig)]
    kept = [n for n in names if n != "source" and "net" not in n]
    return [*kept, "solver_type"]


def parse_caffe(raw: Any, problems: list[Problem]) -> dict[str, Any]:
    """The ``caffe`` section: texts, resize, and the dimensions with their targets."""
    out: dict[str, Any] = {"space": {}, "targets": {}}
    if not isinstance(raw, dict):
        problems.append(Problem("caffe", "must be a mapping (net_text, solver_text, layers, ...)"))
        return out
    for key in raw:
        if key not in CAFFE_KEYS:
            problems.append(Problem(f"caffe.{key}", unknown_key(key, CAFFE_KEYS)))
    for key in ("net", "solver"):
        if key in raw:
            problems.append(
                Problem(
                    f"caffe.{key}",
                    (
                        "is a file path, which only the CLI reads (relative to the spec "
                        f"file); send the file's text as caffe.{key}_text"
                    ),
                )
            )
    for key in ("net_source", "solver_source"):
        source = raw.get(key)
        if isinstance(source, str) and 0 < len(source) <= MAX_SOURCE:
            out[key] = source
        elif key in raw:
            rule = f"must be a file's name (1 to {MAX_SOURCE} characters), got {source!r}"
            problems.append(Problem(f"caffe.{key}", rule))
    messages: dict[str, Message] = {}
    for key in ("net_text", "solver_text"):
        text = raw.get(key)
        if key not in raw and f"{key[:-5]}" not in raw:
            problems.append(Problem(f"caffe.{key}", "is required (the prototxt text)"))
        elif key in raw and not isinstance(text, str):
            problems.append(Problem(f"caffe.{key}", f"must be the prototxt text, got {text!r}"))
        elif isinstance(text, str):
            try:
                source = out.get(f"{key[:-5]}_source", f"caffe.{key}")
                messages[key] = parse(text, source)
                out[key] = text
            except PrototxtError as exc:
                problems.append(Problem(f"caffe.{key}", str(exc)))
    resize = raw.get("resize")
    if resize is not None:
        ok = (
            isinstance(resize, list)
            and len(resize) == 2
            and all(type(v) is int and 1 <= v <= MAX_RESIZE for v in resize)
        )
        if ok:
            out["resize"] = tuple(resize)
        else:
            problems.append(
                Problem(
                    "caffe.resize",
                    (f"must be [height, width], integers from 1 to {MAX_RESIZE}, got {resize!r}"),
                )
            )
    leaves: list[tuple[str, list[str], Any]] = []
    for key in ("layers", "solver_params"):
        if key in raw:
            _dimensions(raw[key], f"caffe.{key}", [], leaves, problems)
    net, solver = messages.get("net_text"), messages.get("solver_text")
    if solver is not None:
        for name, rule in _OTHER_NETS.items():
            if solver.has(name):
                problems.append(Problem(f"caffe.solver.{name}", rule))
    fields = solver_fields()
    for path, parts, leaf in leaves:
        target: Target | str | None = None
        if path.startswith("caffe.solver_params."):
            if len(parts) > 1:
                target = "a solver field is a value, not a message"
            elif parts[0] not in fields and not (
                solver is not None and solver.has(parts[0]) and "net" not in parts[0]
            ):
                target = (
                    f"no solver field {parts[0]!r} (known: {', '.join(fields)})"
                    + did_you_mean(parts[0], fields)
                )
            else:
                target = Target("solver", "", (parts[0],))
        elif len(parts) < 2:
            target = "name a field of the layer (caffe.layers.<layer>.<field>)"
        elif net is not None:
            target = resolve_layer_field(net, parts[0], parts[1:])
            if isinstance(target, str) and target.startswith("no layer"):
                problems.append(Problem(f"caffe.layers.{parts[0]}", target))
                continue
        if isinstance(target, str):
            problems.append(Problem(path, target))
            continue
        dim = _leaf(leaf, path, problems)
        if dim is not None:
            out["space"][path] = dim
            if target is not None:
                out["targets"][path] = target
    return out
