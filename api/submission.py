"""Reading a sweep spec from a request body, and the server's limits on what it may ask for.

The body is JSON (``application/json``) or YAML (``application/yaml``, ``application/x-yaml``,
``text/yaml``); anything else is 415. A body over ``SWEEPSTACK_API_MAX_BODY_BYTES`` is 413,
with a Content-Length or chunked (`limit_body`), never cut short. Before
`core.spec.sweep.load_spec` sees it, the document is checked for what the spec rules do not cover
but a server must:

- JSON's types only (YAML timestamps stay strings, no sets or binary), string keys, no key
  starting with ``$`` or holding a NUL, no string holding a NUL, no key given twice in one
  mapping, no integer of more than 4,300 digits, at most `MAX_DEPTH` levels, no YAML aliases
  (a "billion laughs" document is small until it is stored) -> 400;
- an ``int`` or ``range`` dimension with more values than the server's trial limit -> 422
  before it is enumerated (the spec parser lists every value of a dimension), in the
  built-in sections, a trainable's ``params`` and a Caffe spec's ``caffe.layers`` and
  ``caffe.solver_params`` alike;
- a Caffe spec's ``caffe.net`` or ``caffe.solver``: a path, which the server never reads
  (422 from the spec rules: send ``net_text`` and ``solver_text``);
- then the spec rules (422, every problem listed: integers past 64 bits, NaN and infinities
  among them), the trial count against the smaller of ``limits.max_trials`` and
  ``SWEEPSTACK_API_MAX_TRIALS`` (422 ``too_many_trials`` naming the count; counting stops
  once past it), ``training.epochs`` against ``SWEEPSTACK_API_MAX_EPOCHS``, and the server's
  ceilings and datasets folder (`core.spec.limits`) (422).
"""

from __future__ import annotations

import json
import math
from typing import Any

import yaml
from flask import abort, request

from core.errors import Problem, SpecError
from core.settings import Settings
from core.spec.config import SECTIONS, TrainingConfig
from core.spec.documents import DuplicateKey, SpecLoader, number_error, unique_keys
from core.spec.fields import get_in, section_model
from core.spec.kinds import PARAMETER_ROOTS
from core.spec.limits import check_spec_limits
from core.spec.space import DIMENSION_KEYS
from core.spec.sweep import SweepSpec, load_spec
from scheduler.expand import check_count
from web.errors import ApiError, bad_parameter

JSON_TYPES = ("application/json",)
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")
MAX_DEPTH = 32


#: After a body passes the limit, at most this many times the limit is read and dropped,
#: so that the client, still sending, reads the 413 instead of a reset connection.
_DRAIN_FACTOR = 4


def limit_body() -> None:
    """413 for a body over the limit, however it is sent (the app's ``before_request``).

    A declared Content-Length is checked before reading. A body without one (``Transfer-
    Encoding: chunked``) is read here, up to one byte past the limit: Werkzeug's own limit
    stops reading at the limit and hands over what it read as if it were the whole body,
    so a longer spec would be cut, not refused. What is read stays cached for the view.
    """
    limit = request.max_content_length
    if limit is None:
        return
    length = request.content_length
    if length is not None:
        if length > limit:
            abort(413)
        return
    if not request.environ.get("wsgi.input_terminated"):
        return  # Werkzeug then reads no body at all: nothing can be cut
    data = request.get_data(cache=True)  # at most `limit` bytes
    if len(data) < limit:
        return
    raw = request.environ["wsgi.input"]
    extra = raw.read(1)
    if extra:
        left = _DRAIN_FACTOR * limit
        while left > 0 and (chunk := raw.read(min(left, 65536))):
            left -= len(chunk)
        abort(413)


class _SpecLoader(SpecLoader):
    """The spec loader (no duplicate keys) without aliases and without timestamps (they stay
    strings)."""

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in SpecLoader.yaml_implicit_resolvers.items()
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
            return json.loads(text, object_pairs_hook=unique_keys)
        return yaml.load(text, Loader=_SpecLoader)  # a SafeLoader subclass
    except RecursionError as exc:
        raise _malformed(f"the body nests deeper than {MAX_DEPTH} levels") from exc
    except DuplicateKey as exc:
        raise ApiError(
            400, "malformed_body", f"duplicate key {exc.key!r} in an object", {"key": exc.key}
        ) from exc
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise _malformed(f"not valid JSON: {exc.msg} at {where}") from exc
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise _malformed(f"not valid YAML: {exc.problem or exc.context}{where}") from exc
    except yaml.YAMLError as exc:
        raise _malformed(f"not valid YAML: {exc}") from exc
    except ValueError as exc:  # an integer past Python's 4,300-digit limit, in either
        raise _malformed(number_error(exc)) from exc


def check_document(value: Any, path: str = "body", depth: int = 0) -> None:
    """400 for anything a stored document must not hold (see the module docstring)."""
    if depth > MAX_DEPTH:
        raise _malformed(f"the body nests deeper than {MAX_DEPTH} levels (at {path})")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise bad_parameter(path, f"keys must be strings, got {key!r}")
            if key.startswith("$") or "\x00" in key:
                shown = key.replace("\x00", "\\0")
                raise bad_parameter(f"{path}.{shown}", "keys may not start with $ or hold NUL")
            check_document(item, f"{path}.{key}", depth + 1)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check_document(item, f"{path}[{i}]", depth + 1)
    elif isinstance(value, str) and "\x00" in value:
        raise bad_parameter(path, "strings may not hold NUL")
    elif not (value is None or isinstance(value, str | int | float | bool)):
        raise bad_parameter(path, f"must be a JSON value, got a {type(value).__name__}")


def _dimension_size(raw: Any) -> tuple[str, float] | None:
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
            steps = (stop - start) / step  # inf when it overflows: [0.0, 1e308, 1e-308]
            return "range", max(math.ceil(steps), 0) if math.isfinite(steps) else math.inf
    return None


def _check_dimension_sizes(document: dict[str, Any], limit: int) -> None:
    for section in SECTIONS:
        _check_sizes_in(section, document.get(section), limit)
    for root in PARAMETER_ROOTS:
        _check_sizes_in(root, get_in(document, root), limit)


#: Where a path lies under a kind's free-form parameters (`core.spec.kinds.PARAMETER_ROOTS`).
_FREE_FORM = tuple(f"{root}." for root in PARAMETER_ROOTS)


def _is_group(path: str, raw: Any) -> bool:
    """Whether `raw` at `path` holds parameters: a sub-section (``execution.parallel``), or
    a group of a kind's free-form parameters (a trainable's ``params``, a Caffe spec's
    fields: a mapping that is no dimension)."""
    if path.startswith(_FREE_FORM):
        return isinstance(raw, dict) and not any(k in raw for k in DIMENSION_KEYS)
    return section_model(path) is not None


def _check_sizes_in(section: str, values: Any, limit: int) -> None:
    """The sizes in one section, and in its sub-sections (``execution.parallel``)."""
    if not isinstance(values, dict):
        return
    for key, raw in values.items():
        path = f"{section}.{key}"
        if isinstance(key, str) and _is_group(path, raw):
            _check_sizes_in(path, raw, limit)
            continue
        size = _dimension_size(raw)
        if size is not None and size[1] > limit:
            many = f"{size[1]:,}" if math.isfinite(size[1]) else "more than any number of"
            rule = f"has {many} values, over this server's limit of {limit:,} trials"
            raise SpecError([Problem(f"{path}.{size[0]}", rule)])


def _max_epochs(spec: SweepSpec) -> float:
    dim = spec.space.get("training.epochs")
    if dim is None:
        return TrainingConfig.model_fields["epochs"].default
    values = dim.values() if dim.finite else [getattr(dim, "high", 0)]
    numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    return max(numbers, default=0)


def check_limits(spec: SweepSpec, settings: Settings) -> int:
    """The trial count, after checking it, the epochs and the server's ceilings
    (`core.spec.limits`, which the CLI applies too) against the server's limits."""
    count = check_count(spec, min(spec.limits.max_trials, settings.api_max_trials))
    epochs = _max_epochs(spec)
    if epochs > settings.api_max_epochs:
        rule = f"must be <= {settings.api_max_epochs:,} on this server, got {epochs:g}"
        raise SpecError([Problem("training.epochs", rule)])
    check_spec_limits(spec, settings)
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
