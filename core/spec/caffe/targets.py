"""Where a sweep dimension of a Caffe spec lands in the net or the solver, and setting it there.

A spec names a net field by layer name (``caffe.layers.ip1.num_output``) and a solver field by
its own name (``caffe.solver_params.base_lr``). `resolve_layer_field` turns the parts after the
layer's name into a `Target`: the path of message fields from the layer down to the field.

- **Short form** (``ip1: {num_output: ...}``): the first part is a field of exactly one of the
  layer's ``*_param`` messages (``inner_product_param``), the one that has it; nested
  messages follow (``conv1: {weight_filler: {std: ...}}``).
- **Full form** (``conv1: {convolution_param: {num_output: ...}}``): the first part is the
  ``*_param`` message itself.
- ``loss_weight``, a field of the layer itself.

The fields a layer can have are those its text writes and those its type takes in the layer
graph's tables (`core.spec.caffe.layers`, `core.spec.caffe.fields`); an unknown layer or field names
the layer and lists what exists, with a "did you mean" (`core.spec.suggest`). `apply` writes a
value into a copy of the net: a layer name shared by several layers (a TRAIN and a TEST
data layer both called ``mnist``) sets the field in each. A value becomes a bare word (an
enum, ``MAX``) where the tables say the field is an enum; where they do not know it, where
the text writes a bare word there, or where it looks like one (upper case) and the text
writes none.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from core.spec.caffe.fields import SCHEMAS
from core.spec.caffe.layers import LAYER_TYPES
from core.spec.caffe.prototxt import Ident, Message, Value
from core.spec.suggest import did_you_mean

#: Fields of a layer itself that a sweep may set; the rest (name, type, bottom, top,
#: include, exclude) shape the graph and stay as written.
LAYER_FIELDS = ("loss_weight",)
#: The message fields every layer may hold besides its own ``<type>_param``.
COMMON_PARAMS = ("transform_param", "loss_param")
_ENUM = re.compile(r"^[A-Z][A-Z0-9_]*$")


@dataclass(frozen=True)
class Target:
    """A field of the net (`layer` and the message path below it) or of the solver."""

    kind: str  # "layer" or "solver"
    layer: str
    path: tuple[str, ...]

    @property
    def where(self) -> str:
        """``layer 'ip1' inner_product_param.num_output`` or ``solver base_lr``, for messages."""
        if self.kind == "solver":
            return f"solver {'.'.join(self.path)}"
        return f"layer {self.layer!r} {'.'.join(self.path)}"


def layers_named(net: Message, name: str) -> list[Message]:
    """Every ``layer { ... }`` of the net called `name` (several: one per phase, say)."""
    return [m for m in net.getall("layer") if isinstance(m, Message) and m.get("name") == name]


def layer_names(net: Message) -> list[str]:
    """The names of the net's layers, each once, in order."""
    names = [m.get("name") for m in net.getall("layer") if isinstance(m, Message)]
    return list(dict.fromkeys(str(n) for n in names if isinstance(n, str)))


def _snake(type_name: str) -> str:
    """Caffe's convention for a layer type's parameter message: InnerProduct -> inner_product."""
    special = {
        "ReLU": "relu",
        "PReLU": "prelu",
        "ELU": "elu",
        "TanH": "tanh",
        "LRN": "lrn",
        "HDF5Data": "hdf5_data",
        "SoftmaxWithLoss": "softmax",
        "AbsVal": "absval",
    }
    if type_name in special:
        return special[type_name]
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", type_name).lower()


def known_params(layer_type: str) -> dict[str, tuple[str, ...]]:
    """The parameter messages a layer type takes, each with the fields known for it.

    From the layer graph's tables (`core.spec.caffe.layers`, `core.spec.caffe.fields`) for a type
    they know; else (a type the graph refuses, with its own message) the message Caffe's naming
    gives the type (``inner_product_param``), its fields then known only from the text.
    """
    kind = LAYER_TYPES.get(layer_type)
    if kind is None:
        return {f"{_snake(layer_type)}_param": ()}
    return {name: tuple(SCHEMAS.get(schema, {})) for name, schema in kind.params.items()}


def _is_enum(layer_type: str, path: tuple[str, ...]) -> bool | None:
    """Whether the field at `path` of a layer of this type is an enum (a bare word), or None
    when the tables do not say."""
    kind = LAYER_TYPES.get(layer_type)
    if kind is None or path[0] not in kind.params:
        return None
    fields = SCHEMAS.get(kind.params[path[0]], {})
    for part in path[1:-1]:
        spec = fields.get(part)
        if spec is None or spec.schema is None:
            return None
        fields = SCHEMAS.get(spec.schema, {})
    spec = fields.get(path[-1])
    return None if spec is None else spec.kind == "enum"


def _fields_of(layers: list[Message]) -> dict[str, set[str]]:
    """For each parameter message the layers may hold: the fields known or written."""
    out: dict[str, set[str]] = {}
    for layer in layers:
        kind = layer.get("type")
        for name, fields in known_params(str(kind) if isinstance(kind, str) else "").items():
            out.setdefault(name, set()).update(fields)
        for item in layer.fields:
            if item.name.endswith("_param") and isinstance(item.value, Message):
                out.setdefault(item.name, set()).update(item.value.names())
    return out


def _describe(layers: list[Message]) -> str:
    kind = layers[0].get("type")
    return f"layer {layers[0].get('name')!r} ({kind})"


def resolve_layer_field(net: Message, layer: str, parts: list[str]) -> Target | str:
    """The `Target` of ``caffe.layers.<layer>.<parts>``, or the rule it breaks (a message)."""
    layers = layers_named(net, layer)
    if not layers:
        names = layer_names(net)
        return (
            f"no layer {layer!r} in the net (its layers: {', '.join(names) or 'none'})"
            + did_you_mean(layer, names)
        )
    params = _fields_of(layers)
    head = parts[0]
    if head in LAYER_FIELDS:
        if len(parts) > 1:
            return f"{head} is a value of the layer, not a message"
        return Target("layer", layer, (head,))
    if head in params or head in COMMON_PARAMS:
        if len(parts) == 1:
            return f"{head} is a message: name one of its fields ({head}: {{field: ...}})"
        return Target("layer", layer, tuple(parts))
    holders = sorted(name for name, fields in params.items() if head in fields)
    if len(holders) == 1:
        return Target("layer", layer, (holders[0], *parts))
    if len(holders) > 1:
        return (
            f"{head} is a field of several of {_describe(layers)}'s messages "
            f"({', '.join(holders)}): name one, as {layer}: {{{holders[0]}: {{{head}: ...}}}}"
        )
    known = sorted({f"{p}.{f}" for p, fields in params.items() for f in fields})
    short = sorted({f for fields in params.values() for f in fields} | set(LAYER_FIELDS))
    listed = ", ".join([*known, *LAYER_FIELDS]) or "none known"
    return (
        f"{_describe(layers)} has no field {head!r} (its fields: {listed}; or a message "
        f"of it: {', '.join(sorted(params))})" + did_you_mean(head, [*short, *params])
    )


def _scalar(value: Any, existing: Value | None, enum: bool | None) -> Value:
    if enum is None:
        enum = isinstance(existing, Ident) or (existing is None and bool(_ENUM.match(str(value))))
    if isinstance(value, str) and not isinstance(value, Ident) and enum:
        return Ident(value)
    return value


def _set(message: Message, path: tuple[str, ...], value: Any, enum: bool | None = None) -> None:
    for part in path[:-1]:
        inner = message.get(part)
        if not isinstance(inner, Message):
            inner = Message()
            message.set(part, inner)
        message = inner
    field = path[-1]
    existing = message.get(field)
    if isinstance(value, list):
        message.set(field, [_scalar(v, existing, enum) for v in value])
    else:
        message.set(field, _scalar(value, existing, enum))


def apply(net: Message, solver: Message, values: Iterable[tuple[Target, Any]]) -> None:
    """Write each value at its target, in place (give copies: `Message.copy`)."""
    for target, value in values:
        if target.kind == "solver":
            _set(solver, target.path, value)
            continue
        for layer in layers_named(net, target.layer):
            kind = layer.get("type")
            _set(layer, target.path, value, _is_enum(str(kind), target.path))
