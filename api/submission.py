"""Reading a sweep spec from a request body, and the server's limits on what it may ask for.

The body is JSON (``application/json``) or YAML (``application/yaml``, ``application/x-yaml``,
``text/yaml``); anything else is 415. Before `core.spec.load_spec` sees it, the document is
checked for what the spec rules do not cover but a server must:

- JSON's types only (YAML timestamps stay strings, no sets or binary), string keys, no key
  starting with ``$`` or holding a NUL, at most `MAX_DEPTH` levels, no YAML aliases (a
  "billion laughs" document is small until it is stored) -> 400;
- an ``int`` or ``range`` dimension with more values than the server's trial limit -> 422
  before it is enumerated (the spec parser lists every value of a dimension);
- then the spec rules (422, every problem listed), the trial count against the smaller of
  ``limits.max_trials`` and ``SWEEPSTACK_API_MAX_TRIALS`` (422 ``too_many_trials`` naming the
  count), and ``training.epochs`` against ``SWEEPSTACK_API_MAX_EPOCHS`` (422).
"""

from __future__ import annotations

import json
import math
from typing import Any

import yaml
from flask import request

from api.errors import ApiError, bad_parameter
from core.config import SECTIONS, TrainingConfig
from core.errors import Problem, SpecError, TooManyTrials
from core.fields import section_model
from core.settings import Settings
from core.spec import SweepSpec, load_spec
from scheduler.expand import count_trials

JSON_TYPES = ("application/json",)
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")
MAX_DEPTH = 32


class _SpecLoader(yaml.SafeLoader):
    """YAML's safe loader without aliases and without timestamps (they stay strings)."""

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.MarkedYAMLError(
                None, None, "aliases (*name) are not accepted in a spec", event.start_mark
            )
        return super().compose_node(parent, index)


def _malformed(message: str) -> ApiError:
    return ApiError(400, "malformed_body", message)


def _parse(text: str, yaml_body: bool) -> Any:
    try:
        if not yaml_body:
            return json.loads(text)
        return yaml.load(text, Loader=_SpecLoader)  # a SafeLoader subclass
    except RecursionError as exc:
        raise _malformed(f"the body nests deeper than {MAX_DEPTH} levels") from exc
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise _malformed(f"not valid JSON: {exc.msg} at {where}") from exc
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise _malformed(f"not valid YAML: {exc.problem or exc.context}{where}") from exc
    except yaml.YAMLError as exc:
        raise _malformed(f"not valid YAML: {exc}") from exc


def check_document(value: Any, path: str = "body", depth: int = 0) -> None:
    """400 for anything a stored document must not hold (see the module docstring)."""
    if depth > MAX_DEPTH:
        raise _malformed(f"the body nests deeper than {MAX_DEPTH} levels (at {path})")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise bad_parameter(path, f"keys must be strings, got {key!r}")
            if key.startswith("$") or "\x00" in key:
                raise bad_parameter(f"{path}.{key}", "keys may not start with $ or hold NUL")
            check_document(item, f"{path}.{key}", depth + 1)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check_document(item, f"{path}[{i}]", depth + 1)
    elif not (value is None or isinstance(value, str | int | float | bool)):
        raise bad_parameter(path, f"must be a JSON value, got a {type(value).__name__}")


def _dimension_size(raw: Any) -> tuple[str, int] | None:
    """How many values an ``int`` or ``range`` dimension has, without listing them."""
    if not isinstance(raw, dict):
        return None
    body = raw.get("int")
    if isinstance(body, list) and len(body) == 2 and all(type(x) is int for x in body):
        step = raw.get("step", 1)
        step = step if type(step) is int and step > 0 else 1
        return "int", max((body[1] - body[0]) // step + 1, 0)
    body = raw.get("range")
    numbers = isinstance(body, list) and len(body) == 3
    if numbers and all(type(x) in (int, float) and math.isfinite(x) for x in body):
        start, stop, step = body
        if step > 0:
            return "range", max(math.ceil((stop - start) / step), 0)
    return None


def _check_dimension_sizes(document: dict[str, Any], limit: int) -> None:
    for section in SECTIONS:
        _check_sizes_in(section, document.get(section), limit)


def _check_sizes_in(section: str, values: Any, limit: int) -> None:
    """The sizes in one section, and in its sub-sections (``execution.parallel``)."""
    if not isinstance(values, dict):
        return
    for key, raw in values.items():
        path = f"{section}.{key}"
        if isinstance(key, str) and section_model(path) is not None:
            _check_sizes_in(path, raw, limit)
            continue
        size = _dimension_size(raw)
        if size is not None and size[1] > limit:
            rule = f"has {size[1]:,} values, over this server's limit of {limit:,} trials"
            raise SpecError([Problem(f"{path}.{size[0]}", rule)])


def _max_epochs(spec: SweepSpec) -> float:
    dim = spec.space.get("training.epochs")
    if dim is None:
        return TrainingConfig.model_fields["epochs"].default
    values = dim.values() if dim.finite else [getattr(dim, "high", 0)]
    numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    return max(numbers, default=0)


def check_limits(spec: SweepSpec, settings: Settings) -> int:
    """The trial count, after checking it and the epochs against the server's limits."""
    count = count_trials(spec)
    limit = min(spec.limits.max_trials, settings.api_max_trials)
    if count > limit:
        raise TooManyTrials(count, limit)
    epochs = _max_epochs(spec)
    if epochs > settings.api_max_epochs:
        rule = f"must be <= {settings.api_max_epochs:,} on this server, got {epochs:g}"
        raise SpecError([Problem("training.epochs", rule)])
    return count


def read_spec(settings: Settings) -> SweepSpec:
    """The request body as a validated spec within the server's limits, or an error."""
    mimetype = request.mimetype
    if mimetype not in JSON_TYPES + YAML_TYPES:
        got = request.content_type or "no Content-Type"
        raise ApiError(
            415,
            "unsupported_media_type",
            f"send the spec as application/json or application/yaml, got {got}",
            {"accepted": [*JSON_TYPES, *YAML_TYPES]},
        )
    try:
        text = request.get_data(cache=False).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _malformed(f"the body is not UTF-8 (byte {exc.start})") from exc
    document = _parse(text, mimetype in YAML_TYPES)
    check_document(document)
    if not isinstance(document, dict):
        kind = "nothing" if document is None else f"a {type(document).__name__}"
        raise SpecError([Problem("", f"a spec must be a mapping, got {kind}")])
    _check_dimension_sizes(document, settings.api_max_trials)
    spec = load_spec(document)
    check_limits(spec, settings)
    return spec
