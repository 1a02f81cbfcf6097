"""A Caffe spec against the server's ceilings, over every trial of its sweep: its net's layers,
its parameters and its activations.

`CaffeKind.limit_problems` asks `net_problems`. The layers are counted in the text, before
anything is built (``SWEEPSTACK_MAX_CAFFE_LAYERS``: each distinct net is built for both phases
inside the request, `core.spec.caffe.checks`). Then the figures of the sweep's worst net are
held to ``SWEEPSTACK_MAX_MODEL_PARAMETERS`` (the TRAIN net's learnable values) and
``SWEEPSTACK_MAX_ACTIVATION_ELEMENTS`` (every blob of a phase at once, batch included: what a
worker holds for one forward and backward pass, the larger phase).

The worst net is found without building every trial's. Each dimension over a layer's field
takes its candidates (a range its bounds, a conditional one its values, `core.spec.ceilings`);
the *bound* net sets each field at the candidate that makes the blobs largest (`LARGER`:
``num_output``, ``pad``, ``batch_size`` ...; `SMALLER`: ``stride``, ``dilation``, ``group``
and, for the blobs' sizes, ``kernel_size``), the others at their first candidate. Caffe's shape
rules grow with the first and shrink with the second, so no trial's blobs are larger than the
bound net's; a swept ``kernel_size`` makes its own weights larger, which the bound scales up by
(largest / smallest kernel) per axis. One net is built, for 10 trials or 100,000: when it is
within the ceilings, so is every trial. Where it is over, it is a trial of the sweep, and the
problem names the values it has; only where its scaled kernel weights alone go over, or it
does not build (two fields that must agree, each at its extreme), are the distinct nets built
one by one, at most `MAX_NETS` of them within `MAX_SECONDS`; past that the bound is the answer.

The images' shape is the data set's where it is known here (digits, `caffe.resize`); for a
file or a folder it is what `core.spec.caffe.cost` guesses (the shape the net's Input or
MemoryData layer declares, else ``caffe.resize`` with 3 channels, else 3 x 32 x 32).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.errors import Problem, SpecError
from core.spec.caffe.checks import CaffeNets, first_params, input_shape, solver_states
from core.spec.caffe.cost import guess_shape
from core.spec.caffe.fields import MAX_BATCH_SIZE, MAX_DILATION, MAX_PAD
from core.spec.caffe.net import NetGraph, build_graph
from core.spec.caffe.prototxt import Message
from core.spec.caffe.shapes import count, dims
from core.spec.ceilings import UNSET, dimension_candidates, over
from core.spec.space import Fixed

if TYPE_CHECKING:
    from core.settings import Settings

#: Fields whose larger value makes a net's blobs larger (a message's field, by its name).
LARGER = frozenset({"num_output", "pad", "pad_h", "pad_w", "batch_size", "dim", "crop_size",
                    "bias_term", "new_height", "new_width", "channels", "height",
                    "width"})  # fmt: skip
#: Fields whose smaller value makes a net's blobs larger.
SMALLER = frozenset({"stride", "stride_h", "stride_w", "dilation", "group", "kernel_size",
                     "kernel_h", "kernel_w"})  # fmt: skip
#: A convolution's kernel fields: its weights grow with them (`_kernel_scale`).
KERNELS = frozenset({"kernel_size", "kernel_h", "kernel_w"})
#: The most distinct nets built one by one when the bound net cannot answer, and the seconds
#: they may take together: past either, the bound is the answer.
MAX_NETS = 64
MAX_SECONDS = 2.0
#: The fields with a ceiling of their own (`core.spec.caffe.fields`), checked on every
#: candidate of a dimension before any net is built.
FIELD_CEILINGS = {"pad": MAX_PAD, "pad_h": MAX_PAD, "pad_w": MAX_PAD, "dilation": MAX_DILATION,
                  "batch_size": MAX_BATCH_SIZE}  # fmt: skip


@dataclass(frozen=True)
class Figures:
    """What one net asks for: its parameters and its activations, with where they peak."""

    params: int
    activations: int
    #: the phase, blob and shape holding the most elements, for the problem's words.
    peak: str
    #: the layer whose top that blob is.
    peak_layer: str
    #: the layer holding the most parameters.
    heaviest: str


def layer_count(net: Message) -> int:
    """The ``layer { }`` (and older ``layers { }``) messages of the net's text."""
    return len(net.getall("layer")) + len(net.getall("layers"))


def layer_dimensions(spec: CaffeNets) -> list[tuple[str, list[Any]]]:
    """Each dimension over a layer's field that varies (a fixed one is in every net), with its
    candidates."""
    out = []
    for path, dim in spec.space.items():
        target = spec.targets.get(path)
        if target is None or target.kind != "layer":
            continue
        if isinstance(dim, Fixed) and not dim.when:
            continue
        out.append((path, dimension_candidates(dim)))
    return out


def field_problems(spec: CaffeNets, dimensions: list[tuple[str, list[Any]]]) -> list[Problem]:
    """Each dimension with a candidate past its field's own ceiling (`FIELD_CEILINGS`)."""
    problems = []
    for path, values in dimensions:
        most = FIELD_CEILINGS.get(_field(spec, path))
        largest = max((_size(v) for v in values if v is not UNSET), default=-math.inf)
        if most is not None and largest > most:
            rule = f"must be <= {most:,} (a ceiling of the field itself), got {largest:,.0f}"
            problems.append(Problem(path, rule))
    return problems


def _size(value: Any) -> float:
    items = value if isinstance(value, list) else [value]
    numbers = [float(v) for v in items if isinstance(v, int | float)]
    return max(numbers, default=-math.inf)


def _field(spec: CaffeNets, path: str) -> str:
    return spec.targets[path].path[-1]


def bound_point(spec: CaffeNets, dimensions: list[tuple[str, list[Any]]]) -> dict[str, Any]:
    """Each dimension at the candidate that makes the blobs largest (module docstring)."""
    point = {}
    for path, values in dimensions:
        given = [v for v in values if v is not UNSET]
        field = _field(spec, path)
        if field in LARGER:
            point[path] = max(given, key=_size)
        elif field in SMALLER:
            point[path] = min(given, key=_size)
        else:
            point[path] = given[0]
    return point


def _shape(spec: CaffeNets) -> tuple[tuple[int, ...], int | None, bool]:
    """One sample's shape, the classes, and whether they are the data set's (not a guess)."""
    known = input_shape(spec)
    if known is not None:
        return (*known, True)
    return guess_shape(spec.net_text, spec.resize, False), None, False


def _graphs(spec: CaffeNets, point: dict[str, Any], shape: Any, classes: Any) -> list[NetGraph]:
    """The TRAIN graph of the point's net, and its TEST graph where it builds; `SpecError`
    when the TRAIN net does not build."""
    net, solver = spec.messages({p: v for p, v in point.items() if v is not UNSET})
    states = solver_states(solver)
    graphs = [build_graph(net, "TRAIN", shape, classes, spec.net_source, states["TRAIN"])]
    with contextlib.suppress(SpecError):  # `core.spec.caffe.checks` reports a TEST net's
        graphs.append(build_graph(net, "TEST", shape, classes, spec.net_source, states["TEST"]))
    return graphs


def figures(graphs: list[NetGraph]) -> Figures:
    """The parameters of the TRAIN net (the TEST net shares them), and the activations of the
    phase that holds more."""
    train = graphs[0]
    totals = [(sum(count(s) for s in g.shapes.values()), g) for g in graphs]
    activations, graph = max(totals, key=lambda item: item[0])
    blob, shape = max(graph.shapes.items(), key=lambda item: count(item[1]))
    heaviest = max(train.layers, key=lambda layer: layer.param_count).name
    producer = next((layer.name for layer in reversed(graph.layers) if blob in layer.tops), blob)
    peak = f"the {graph.phase} net's largest blob '{blob}' is {dims(shape)}"
    return Figures(train.param_count, activations, peak, producer, heaviest)


def _kernel_scale(spec: CaffeNets, point: dict[str, Any], dimensions: list, train: NetGraph) -> int:
    """What the bound adds to the parameters for swept kernels: each such convolution's
    weights, scaled from the smallest kernel (the bound's, for the blobs) to the largest."""
    ratio: dict[str, float] = {}
    for path, values in dimensions:
        field = _field(spec, path)
        if field not in KERNELS:
            continue
        layer = spec.targets[path].layer
        largest = _size(max((v for v in values if v is not UNSET), key=_size))
        smallest = max(_size(point[path]), 1.0)
        axes = 2 if field == "kernel_size" else 1  # kernel_h, kernel_w: one axis each
        ratio[layer] = ratio.get(layer, 1.0) * (largest / smallest) ** axes
    extra = 0
    for layer in train.layers:
        if layer.name in ratio and layer.type == "Convolution" and layer.param_shapes:
            extra += math.ceil(count(layer.param_shapes[0]) * (ratio[layer.name] - 1))
    return extra


def _show(point: dict[str, Any]) -> str:
    shown = {p: v for p, v in point.items() if v is not UNSET}
    return ", ".join(f"{p}={json.dumps(v)}" for p, v in shown.items())


def _path(spec: CaffeNets, point: dict[str, Any], layer: str) -> str:
    """The field the problem names: a dimension of the worst trial set past the first trial's
    value, over the layer that peaks if one is; else any dimension over that layer; else any
    of the trial's; else the net."""
    first = first_params(spec)
    moved = [p for p, v in point.items() if v is not UNSET and v != first.get(p)]
    on_layer = [p for p in moved if spec.targets[p].layer == layer]
    if on_layer or moved:
        return (on_layer or moved)[0]
    fixed = [p for p, t in spec.targets.items() if t.kind == "layer" and t.layer == layer]
    return (fixed or list(point) or ["caffe.net_text"])[0]


def _problems(
    spec: CaffeNets, settings: Settings, found: Figures, params: int, how: str,
    point: dict[str, Any],
) -> list[Problem]:  # fmt: skip
    problems = []
    if params > settings.max_model_parameters:
        problems.append(
            over(_path(spec, point, found.heaviest), "the net's parameters", params,
                 settings.max_model_parameters, "SWEEPSTACK_MAX_MODEL_PARAMETERS",
                 f"{how}; its layer '{found.heaviest}' holds the most")
        )  # fmt: skip
    if found.activations > settings.max_activation_elements:
        problems.append(
            over(_path(spec, point, found.peak_layer),
                 "the elements of the net's blobs at once (batch x every blob of a sample)",
                 found.activations, settings.max_activation_elements,
                 "SWEEPSTACK_MAX_ACTIVATION_ELEMENTS", f"{how}; {found.peak}")
        )  # fmt: skip
    return problems


def _trial_words(point: dict[str, Any]) -> str:
    shown = _show(point)
    return f"the net of the trial with {shown}" if shown else "the net of every trial"


def _points(dimensions: list[tuple[str, list[Any]]]) -> Iterator[dict[str, Any]]:
    paths = [p for p, _ in dimensions]
    for values in itertools.product(*(v for _, v in dimensions)):
        yield dict(zip(paths, values, strict=True))


def net_problems(spec: CaffeNets, net: Message, settings: Settings) -> list[Problem]:
    """Every ceiling the sweep's nets go past (the module docstring), each naming the field."""
    layers = layer_count(net)
    if layers > settings.max_caffe_layers:
        return [over("caffe.net_text", "the net's layers", layers, settings.max_caffe_layers,
                     "SWEEPSTACK_MAX_CAFFE_LAYERS")]  # fmt: skip
    dimensions = layer_dimensions(spec)
    fields = field_problems(spec, dimensions)
    if fields:
        return fields
    shape, classes, known = _shape(spec)
    total = math.prod(len(values) for _, values in dimensions)
    bound = bound_point(spec, dimensions)
    try:
        graphs = _graphs(spec, bound, shape, classes)
    except SpecError:
        pass  # two fields that must agree, each at its extreme: the nets one by one
    else:
        found = figures(graphs)
        exact = _problems(spec, settings, found, found.params, _trial_words(bound), bound)
        scaled = found.params + _kernel_scale(spec, bound, dimensions, graphs[0])
        if exact or scaled <= settings.max_model_parameters:
            return exact
    return _net_by_net(spec, settings, dimensions, total, (shape, classes, known), bound)


def _net_by_net(
    spec: CaffeNets, settings: Settings, dimensions: list[tuple[str, list[Any]]], total: int,
    data: tuple[Any, Any, bool], bound: dict[str, Any],
) -> list[Problem]:  # fmt: skip
    """The distinct nets built one by one, at most `MAX_NETS` within `MAX_SECONDS`: the first
    one over a ceiling, or that does not build on the data set's shape; where not every net
    was built, the bound's problems."""
    shape, classes, known = data
    deadline = time.monotonic() + MAX_SECONDS
    built = 0
    broken: list[Problem] = []
    for point in itertools.islice(_points(dimensions), MAX_NETS):
        if time.monotonic() > deadline:
            break
        built += 1
        try:
            found = figures(_graphs(spec, point, shape, classes))
        except SpecError as exc:  # a field past its own ceiling (`core.spec.caffe.fields`) ...
            when = f" (when {_show(point)})"
            if known:
                broken += [Problem(_path(spec, point, ""), p.message + when) for p in exc.problems]
            continue
        problems = _problems(spec, settings, found, found.params, _trial_words(point), point)
        if problems:
            return problems
    if broken or built == total:
        return broken[:1]
    checked = f"{built:,} of its {total:,} distinct nets were built"
    try:
        graphs = _graphs(spec, bound, shape, classes)
    except SpecError as exc:
        if not known:
            return []  # a net may not build on a guessed shape; its worker builds it on the real
        rule = (
            f"cannot be bounded within this server's ceilings: {checked}, and the net with each "
            f"field at its largest size ({_show(bound)}) does not build: {exc.problems[0].message}"
            "; sweep fewer values of the layers' fields"
        )
        return [Problem(next(iter(bound), "caffe.net_text"), rule)]
    found = figures(graphs)
    scaled = found.params + _kernel_scale(spec, bound, dimensions, graphs[0])
    how = f"an upper bound ({checked}): {_show(bound)} with each kernel at its largest"
    return _problems(spec, settings, found, scaled, how, bound)
