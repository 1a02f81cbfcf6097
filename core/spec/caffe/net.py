"""A Caffe net read as a graph of named blobs and layers, for one phase, without Caffe.

`build_graph(net, phase, input_shape, num_classes)` keeps the layers whose ``include`` /
``exclude`` rules admit the phase (Caffe's NetStateRule: phase, min/max_level, stage,
not_stage, against the net's ``state`` level and stages), checks every field against
caffe.proto (`core.spec.caffe.fields`), wires bottoms to the tops produced before them (a top
equal to its bottom at the same index is in place, as Caffe has it), infers every blob's
shape from the data set's sample shape (`core.spec.caffe.layers`, `core.spec.caffe.data`),
counts the learnable parameters, and returns a `NetGraph`. Anything it cannot build is
refused at once as a `SpecError` whose problems read ``layer 'conv1' (Convolution): <what
is wrong>; <what to change> [file:line]``, so that a sweep fails at validation, never first
in a worker.

Two nets of one solver (TRAIN and TEST) share the parameters of layers with the same name,
as Caffe's ShareTrainedLayersWith does; `check_shared` refuses a pair whose shapes differ.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.errors import Problem, SpecError
from core.spec.caffe.data import DataInput, batch_size
from core.spec.caffe.fields import check, resolve
from core.spec.caffe.layers import LAYER_TYPES, REFUSED_TYPES
from core.spec.caffe.phases import layers_for_phase
from core.spec.caffe.prototxt import Message
from core.spec.caffe.shapes import Ctx, LayerError, Shape, Shaped, count
from core.spec.suggest import did_you_mean

PHASES = ("TRAIN", "TEST")
PATH = "caffe.net"

#: The fields of a LayerParameter read for every type (the *_param ones are per type).
_COMMON = {
    "name",
    "type",
    "bottom",
    "top",
    "loss_weight",
    "param",
    "propagate_down",
    "include",
    "exclude",
}
_REFUSED_COMMON = {
    "phase": "a layer's phase is set by the net; use include { phase: ... }",
    "blobs": "stored weights inside the prototxt are not read",
}


@dataclass(frozen=True)
class LayerDef:
    """One layer kept for a phase, with its wiring, shapes and per-blob solver multipliers."""

    name: str
    type: str
    bottoms: tuple[str, ...]
    tops: tuple[str, ...]
    message: Message
    loss_weights: tuple[float, ...]
    bottom_shapes: tuple[Shape, ...] = ()
    top_shapes: tuple[Shape, ...] = ()
    #: learnable blobs, in Caffe's order (weights, then bias ...).
    param_shapes: tuple[Shape, ...] = ()
    #: blobs kept but never updated by a solver (BatchNorm's mean, variance, factor).
    stat_shapes: tuple[Shape, ...] = ()
    lr_mults: tuple[float, ...] = ()
    decay_mults: tuple[float, ...] = ()
    propagate_down: tuple[bool, ...] = ()

    def param(self, name: str) -> dict[str, Any]:
        """A ``*_param`` message of the layer with Caffe's defaults filled in."""
        schema = LAYER_TYPES[self.type].params[name]
        sub = self.message.get(name)
        return resolve(sub if isinstance(sub, Message) else None, schema)

    @property
    def param_count(self) -> int:
        return sum(count(s) for s in self.param_shapes)


@dataclass(frozen=True)
class NetGraph:
    """A net for one phase: layers in execution order, the data input, every blob's shape."""

    name: str
    phase: str
    layers: tuple[LayerDef, ...]
    data: DataInput
    shapes: dict[str, Shape] = field(default_factory=dict)
    param_count: int = 0

    def layer(self, name: str) -> LayerDef:
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise KeyError(name)

    def outputs(self) -> list[str]:
        """The tops reported after a pass: each loss top and each Accuracy's first top."""
        out: list[str] = []
        for layer in self.layers:
            for i, (top, weight) in enumerate(zip(layer.tops, layer.loss_weights, strict=True)):
                is_loss = LAYER_TYPES[layer.type].loss and i == 0
                if (weight or is_loss or (layer.type == "Accuracy" and i == 0)) and top not in out:
                    out.append(top)
        return out

    def layer_table(self) -> list[dict[str, Any]]:
        """One row per layer for the trial page: name, type, bottoms, tops, output shapes,
        learnable parameters."""
        return [
            {
                "name": layer.name,
                "type": layer.type,
                "bottoms": list(layer.bottoms),
                "tops": list(layer.tops),
                "output": [list(s) for s in layer.top_shapes],
                "params": layer.param_count,
            }
            for layer in self.layers
        ]


def _fail(message: str) -> SpecError:
    return SpecError([Problem(PATH, message)])


def _where(msg: Message, source: str) -> str:
    return f" [{source}:{msg.line}]" if msg.line else ""


def _head(name: str, kind: str) -> str:
    return f"layer '{name}' ({kind}): "


def _field_problems(layer: Message, kind: str) -> list[str]:
    """Every field of a layer Caffe does not have, Sweepstack refuses, or of the wrong kind."""
    spec = LAYER_TYPES[kind]
    out: list[str] = []
    for name in layer.names():
        if name in _REFUSED_COMMON:
            out.append(f"{name} is not supported: {_REFUSED_COMMON[name]}")
        elif name in spec.params:
            value = layer.get(name)
            if not isinstance(value, Message):
                out.append(f"{name} must be a message {{ ... }}, not {value!r}")
            elif len(layer.getall(name)) > 1:
                out.append(f"{name} is written {len(layer.getall(name))} times; it takes one")
            else:
                out.extend(check(value, spec.params[name], name))
        elif name.endswith("_param") or name not in _COMMON:
            reads = ", ".join(spec.params) or "no *_param"
            out.append(f"{name} is not a field a {kind} layer reads (it reads {reads})")
    for item in layer.getall("param"):
        out.extend(
            check(item, "ParamSpec", "param")
            if isinstance(item, Message)
            else ["param must be a message"]
        )
    if layer.has("include") and layer.has("exclude"):
        out.append("give include rules or exclude rules, not both")
    for name in ("bottom", "top"):
        if any(not isinstance(v, str) for v in layer.getall(name)):
            out.append(f"{name} must be quoted blob names")
    if any(
        isinstance(v, bool) or not isinstance(v, int | float) for v in layer.getall("loss_weight")
    ):
        out.append("loss_weight must be numbers")
    if any(not isinstance(v, bool) for v in layer.getall("propagate_down")):
        out.append("propagate_down must be true or false")
    return out


def _check_fields(layers: list[Message], source: str) -> None:
    """Every field problem of every kept layer at once (the sweep's author fixes them all)."""
    problems: list[Problem] = []
    for layer in layers:
        name, kind = layer.get("name"), layer.get("type")
        where = _where(layer, source)
        if not isinstance(name, str) or not name:
            problems.append(Problem(PATH, f"a layer has no name; give every layer a name{where}"))
            continue
        if not isinstance(kind, str) or not kind:
            problems.append(Problem(PATH, f"{_head(name, '?')}no type; give its type{where}"))
            continue
        head = _head(name, kind)
        if kind not in LAYER_TYPES:
            why = f" ({REFUSED_TYPES[kind]})" if kind in REFUSED_TYPES else ""
            supported = ", ".join(LAYER_TYPES)
            # A refused type has its own advice; any other may be a misspelt supported one.
            guess = "" if why else did_you_mean(kind, list(LAYER_TYPES))
            text = f"the layer type {kind!r} is not supported{why}; supported types: {supported}"
            text += guess
            problems.append(Problem(PATH, f"{head}{text}{where}"))
            continue
        problems += [Problem(PATH, f"{head}{p}{where}") for p in _field_problems(layer, kind)]
    if problems:
        raise SpecError(problems)


def _counts(kind: str, bottoms: int, tops: int) -> str | None:
    spec = LAYER_TYPES[kind]
    for what, n, (low, high) in (("bottom", bottoms, spec.bottoms), ("top", tops, spec.tops)):
        if n < low or (high is not None and n > high):
            want = f"{low}" if low == high else f"{low} to {high}" if high else f"at least {low}"
            return f"takes {want} {what}(s), not {n}"
    return None


class _Layer:
    """One layer being built: its name, type and place, to word its errors."""

    def __init__(self, msg: Message, source: str) -> None:
        self.msg = msg
        self.name, self.type = str(msg.get("name")), str(msg.get("type"))
        self.bottoms = tuple(str(b) for b in msg.getall("bottom"))
        self.tops = tuple(str(t) for t in msg.getall("top"))
        self.where = _where(msg, source)

    def fail(self, text: str) -> SpecError:
        return _fail(f"{_head(self.name, self.type)}{text}{self.where}")


def build_graph(
    net: Message,
    phase: str,
    input_shape: tuple[int, ...],
    num_classes: int | None,
    source: str = "net",
    solver_state: Message | None = None,
) -> NetGraph:
    """The layer graph of `net` for `phase` fed samples of `input_shape` (C, H, W or D,).

    `num_classes` (None for regression) checks that classifier scores have enough classes;
    `source` names the file in errors; `solver_state` is the solver's ``train_state`` or
    ``test_state`` for this phase (`core.spec.caffe.phases`). Raises `SpecError` naming the
    layer, its type and what to change.
    """
    if phase not in PHASES:
        raise _fail(f"phase must be TRAIN or TEST, not {phase!r}")
    messages = layers_for_phase(net, phase, solver_state)
    _check_fields(messages, source)
    shapes: dict[str, Shape] = {}
    producer: dict[str, str] = {}
    defs: list[LayerDef] = []
    data: DataInput | None = None
    for msg in messages:
        layer = _Layer(msg, source)
        wrong = _counts(layer.type, len(layer.bottoms), len(layer.tops))
        if wrong:
            raise layer.fail(wrong)
        for bottom in layer.bottoms:
            if bottom not in shapes:
                known = ", ".join(shapes) or "none yet"
                raise layer.fail(
                    f"bottom '{bottom}' is not produced by any layer before it in the {phase} "
                    f"net; produce it first or use one of the blobs so far: {known}"
                )
        spec = LAYER_TYPES[layer.type]
        params = {p: resolve(msg.get(p), s) for p, s in spec.params.items()}  # type: ignore[arg-type]
        bottom_shapes = [shapes[b] for b in layer.bottoms]
        ctx = Ctx(layer.type, msg, params, bottom_shapes, len(layer.tops), tuple(input_shape))
        ctx.num_classes = num_classes
        try:
            shaped = spec.rule(ctx)
        except LayerError as exc:
            raise layer.fail(str(exc)) from None
        for i, top in enumerate(layer.tops):
            in_place = i < len(layer.bottoms) and layer.bottoms[i] == top
            if in_place and shaped.tops[i] != shapes[top]:
                raise layer.fail(
                    f"top '{top}' cannot be computed in place: the layer changes its shape; "
                    "give the top another name"
                )
            if not in_place and top in shapes:
                raise layer.fail(
                    f"top '{top}' is already produced by layer '{producer[top]}'; give it "
                    "another name (in place needs top i == bottom i)"
                )
        for top, top_shape in zip(layer.tops, shaped.tops, strict=True):
            shapes[top], producer[top] = top_shape, layer.name
        defs.append(_layer_def(layer, ctx, shaped))
        if spec.data:
            if data is not None:
                raise layer.fail(
                    f"a second data layer in the {phase} net (after '{data.layer}'); keep one "
                    "per phase"
                )
            transform = msg.get("transform_param")
            data = DataInput(
                layer.name,
                layer.type,
                layer.tops,
                batch_size(ctx),
                transform if isinstance(transform, Message) else None,
                shaped.tops[0][1:],
            )
    if data is None:
        raise _fail(
            f"the {phase} net has no data layer; add one of Data, ImageData, MemoryData, "
            "HDF5Data or Input (the spec's dataset feeds it)"
        )
    _check_holders(defs, phase, source)
    total = sum(d.param_count for d in defs)
    return NetGraph(str(net.get("name", "")), phase, tuple(defs), data, shapes, total)


def _holds(layer: LayerDef) -> bool:
    return bool(layer.param_shapes or layer.stat_shapes)


def _check_holders(defs: list[LayerDef], phase: str, source: str) -> None:
    """Layer names may repeat, as Caffe's do (two ``loss`` layers); but blobs are shared
    between the phases by layer name, so two layers of one name holding blobs in one phase
    would make that sharing ambiguous (Caffe shares the TEST net's first of them)."""
    holders: dict[str, LayerDef] = {}
    for layer in defs:
        if not _holds(layer):
            continue
        first = holders.setdefault(layer.name, layer)
        if first is not layer:
            where = _where(layer.message, source)
            raise _fail(
                f"{_head(layer.name, layer.type)}a second layer of this name with learnable "
                f"blobs in the {phase} net (after the {first.type} layer); layers of one name "
                f"share their blobs across phases, so rename one{where}"
            )


def _layer_def(layer: _Layer, ctx: Ctx, shaped: Shaped) -> LayerDef:
    msg, tops, bottoms = layer.msg, layer.tops, layer.bottoms
    weights = [float(w) for w in msg.getall("loss_weight")]  # type: ignore[arg-type]
    if weights and len(weights) != len(tops):
        raise layer.fail(f"loss_weight has {len(weights)} values for {len(tops)} tops; one per top")
    if not weights:
        loss = LAYER_TYPES[layer.type].loss
        weights = [1.0 if loss and i == 0 else 0.0 for i in range(len(tops))]
    specs = [resolve(p, "ParamSpec") for p in msg.getall("param")]  # type: ignore[arg-type]
    blobs = len(shaped.params) + len(shaped.stats)
    if len(specs) > blobs:
        raise layer.fail(f"{len(specs)} param {{ }} blocks for {blobs} blobs; at most one per blob")
    specs += [resolve(None, "ParamSpec")] * (len(shaped.params) - len(specs))
    down = [bool(d) for d in msg.getall("propagate_down")]
    if down and len(down) != len(bottoms):
        raise layer.fail(
            f"propagate_down has {len(down)} values for {len(bottoms)} bottoms; one each"
        )
    learnable = specs[: len(shaped.params)]
    return LayerDef(
        layer.name,
        layer.type,
        bottoms,
        tops,
        msg,
        tuple(weights),
        bottom_shapes=tuple(ctx.bottoms),
        top_shapes=tuple(shaped.tops),
        param_shapes=tuple(shaped.params),
        stat_shapes=tuple(shaped.stats),
        lr_mults=tuple(s["lr_mult"] for s in learnable),
        decay_mults=tuple(s["decay_mult"] for s in learnable),
        propagate_down=tuple(down) or (True,) * len(bottoms),
    )


def check_shared(train: NetGraph, test: NetGraph) -> None:
    """Refuse a TEST layer that shares a TRAIN layer's name but not its blobs' shapes."""
    problems = []
    by_name = {layer.name: layer for layer in train.layers if _holds(layer)}
    for layer in test.layers:
        other = by_name.get(layer.name)
        if other is None or not (layer.param_shapes or layer.stat_shapes):
            continue
        if (other.param_shapes, other.stat_shapes) != (layer.param_shapes, layer.stat_shapes):
            problems.append(
                Problem(
                    PATH,
                    f"{_head(layer.name, layer.type)}the TEST net's blobs "
                    f"{[list(s) for s in layer.param_shapes + layer.stat_shapes]} differ from "
                    f"the TRAIN net's {[list(s) for s in other.param_shapes + other.stat_shapes]}"
                    " (layers of one name share their weights); make them agree or rename one",
                )
            )
    if problems:
        raise SpecError(problems)
