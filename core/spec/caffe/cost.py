"""What a Caffe trial's training costs, from its layer graph, for the scheduler's ordering.

The scheduler sends the most expensive work first (`scheduler.order`) and sizes fused
groups around single trials (`scheduler.grouping`); a Caffe trial's cost is its graph's
arithmetic, not a default MLP's. `macs_per_sample` counts the multiply-accumulates of one
sample's forward pass through the Convolution and InnerProduct layers, the layers that
hold nearly all of a net's arithmetic (the others are a few operations per element):
a layer's weights times its output positions (for a convolution its output's height x
width, for an inner product the rows before its ``axis``), which covers ``group``,
``dilation``, ``stride`` and ``axis`` through the graph's shapes. `trial_work` reads the
rest from the solver: ``max_iter`` x ``iter_size`` batches of the TRAIN data layer's
``batch_size``, and ``test_iter`` batches of the TEST net's at each evaluation the worker
runs (every ``test_interval`` iterations and after the last).

The scheduler does not read data sets, so the graph is built on a sample shape guessed
from the config (`sample_shape`): the digits' 1 x 8 x 8 (or ``caffe.resize``), else the
shape the net's ``Input`` or ``MemoryData`` layer declares, else 3 x ``caffe.resize`` or
`GUESSED_SAMPLE`. A net that does not build on the guess counts no arithmetic (its cost is
then its steps' fixed part alone). Costs are relative, for ordering: the guess is the same
for every trial of a sweep, which is what an order needs.

`trial_work` is memoised by the texts (a sweep over the base rate shares one net text among
all its trials; each distinct net is built once per process, for its TRAIN and TEST phase),
so scoring 50,000 trials builds each distinct net once. Pure logic: no torch.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.errors import SpecError
from core.spec.caffe.net import LayerDef, NetGraph, build_graph
from core.spec.caffe.phases import layers_for_phase
from core.spec.caffe.prototxt import Message, PrototxtError, parse
from core.spec.caffe.shapes import count
from core.spec.caffe.solver import SolverConfig, parse_solver

#: The layer types whose arithmetic is counted, with the field that holds ``num_output``.
COUNTED = {"Convolution": "convolution_param", "InnerProduct": "inner_product_param"}
#: One sample's (C, H, W) when nothing in the config says it: a small colour image.
GUESSED_SAMPLE = (3, 32, 32)
#: The digits' image shape (`core.spec.caffe.checks.DIGITS`).
_DIGITS = (1, 8, 8)
#: Distinct (net, solver, shape) entries kept; a sweep rarely has more distinct nets.
_CACHE_SIZE = 4096


@dataclass(frozen=True)
class TrialWork:
    """The arithmetic of one Caffe trial: per sample and how many samples pass."""

    #: forward multiply-accumulates of one sample, TRAIN and TEST net.
    train_macs: int
    test_macs: int
    #: samples through the TRAIN net (forward and backward) over the whole trial.
    train_samples: int
    #: samples through the TEST net (forward only) over all its evaluations.
    test_samples: int
    #: layers of the TRAIN net (each step's fixed cost grows with them).
    layers: int
    #: updates over the trial (``max_iter`` x ``iter_size`` passes).
    steps: int
    #: learnable parameters of the TRAIN net (0 when it does not build).
    param_count: int = 0

    @property
    def macs(self) -> int:
        """The trial's multiply-accumulates: a backward pass costs about two forward ones."""
        return 3 * self.train_macs * self.train_samples + self.test_macs * self.test_samples


def layer_macs(layer: LayerDef) -> int:
    """Multiply-accumulates of one batch through a Convolution or InnerProduct layer (0 for
    other types): each weight is used once per output position of its output channel."""
    field = COUNTED.get(layer.type)
    if field is None or not layer.param_shapes or not layer.top_shapes:
        return 0
    outputs = int(layer.param(field)["num_output"])
    return count(layer.param_shapes[0]) * count(layer.top_shapes[0]) // max(1, outputs)


def macs_per_sample(graph: NetGraph) -> int:
    """Forward multiply-accumulates of one sample through `graph` (module docstring)."""
    batch = max(1, graph.data.batch_size)
    return sum(layer_macs(layer) for layer in graph.layers) // batch


def sample_shape(config: Mapping[str, Any]) -> tuple[int, ...]:
    """The (C, H, W) the cost of a trial is worked out on (module docstring)."""
    caffe = config.get("caffe") or {}
    digits = (config.get("dataset") or {}).get("name") == "digits"
    return guess_shape(str(caffe.get("net_text", "")), _resize(caffe), digits)


def config_costs(config: Mapping[str, Any]) -> dict[str, int]:
    """The TRAIN net's ``param_count`` and ``macs`` (forward, one sample) where the config
    says the sample's shape (the digits, or the net's ``Input`` or ``MemoryData`` layer):
    what a Pareto-rank pruner ranks a cost objective with before the trial trains
    (`core.spec.kind.TrialKind.costs_before_training`). Nothing where only the worker can
    tell the shape (an image folder or a file) or the net does not build."""
    caffe = config.get("caffe") or {}
    net_text, solver_text = str(caffe.get("net_text", "")), str(caffe.get("solver_text", ""))
    resize = _resize(caffe)
    digits = (config.get("dataset") or {}).get("name") == "digits"
    shape = declared_shape(net_text, resize, digits)
    if shape is None:
        return {}
    work = trial_work(net_text, solver_text, shape)
    if not work.param_count:
        return {}
    return {"param_count": work.param_count, "macs": work.train_macs}


def _resize(caffe: Mapping[str, Any]) -> tuple[int, int] | None:
    resize = caffe.get("resize")
    return (int(resize[0]), int(resize[1])) if isinstance(resize, list | tuple) else None


@functools.lru_cache(maxsize=_CACHE_SIZE)
def guess_shape(net_text: str, resize: tuple[int, int] | None, digits: bool) -> tuple[int, ...]:
    """One sample's (C, H, W) for a net of `net_text` (module docstring: `sample_shape`)."""
    declared = declared_shape(net_text, resize, digits)
    if declared is not None:
        return declared
    return (GUESSED_SAMPLE[0], *resize) if resize else GUESSED_SAMPLE


@functools.lru_cache(maxsize=_CACHE_SIZE)
def declared_shape(
    net_text: str, resize: tuple[int, int] | None, digits: bool
) -> tuple[int, ...] | None:
    """One sample's (C, H, W) as the config says it: the digits' (or ``caffe.resize``), else
    the net's ``Input`` or ``MemoryData`` layer's; None when only the data can say."""
    if digits:
        return (1, *resize) if resize else _DIGITS
    try:
        layers = layers_for_phase(_parsed(net_text), "TRAIN")
    except (PrototxtError, SpecError):
        layers = []
    for layer in layers:
        kind, param = layer.get("type"), layer.get("input_param") or layer.get("memory_data_param")
        if kind == "Input" and isinstance(param, Message):
            shapes = param.getall("shape")  # the first is the images', as the graph reads it
            dims = shapes[0].getall("dim") if shapes and isinstance(shapes[0], Message) else []
            if len(dims) > 1 and all(isinstance(d, int) and d > 0 for d in dims):
                return tuple(int(d) for d in dims[1:])  # type: ignore[call-overload]
        if kind == "MemoryData" and isinstance(param, Message):
            chw = [param.get(k) for k in ("channels", "height", "width")]
            if all(isinstance(v, int) and v > 0 for v in chw):
                return tuple(int(v) for v in chw)  # type: ignore[arg-type]
    return None


def config_work(config: Mapping[str, Any]) -> TrialWork:
    """The `TrialWork` of a Caffe trial's resolved config (its texts, data set, resize)."""
    caffe = config.get("caffe") or {}
    net_text, solver_text = str(caffe.get("net_text", "")), str(caffe.get("solver_text", ""))
    return trial_work(net_text, solver_text, sample_shape(config))


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _parsed(text: str) -> Message:
    return parse(text)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def trial_work(net_text: str, solver_text: str, shape: tuple[int, ...]) -> TrialWork:
    """The `TrialWork` of a net and solver on samples of `shape` (memoised; see the module).
    A text that does not parse, or a net that does not build, counts no arithmetic."""
    try:
        solver = parse_solver(_parsed(solver_text))
    except (PrototxtError, SpecError):
        return TrialWork(0, 0, 1, 0, 1, 1)
    steps = max(1, solver.max_iter * solver.iter_size)
    evaluations = _evaluations(solver)
    graphs: dict[str, NetGraph] = {}
    try:
        net = _parsed(net_text)
        for phase in ("TRAIN", "TEST") if evaluations else ("TRAIN",):
            state = solver.train_state if phase == "TRAIN" else solver.test_state
            graphs[phase] = build_graph(net, phase, shape, None, solver_state=state)
    except (PrototxtError, SpecError):
        return TrialWork(0, 0, steps, 0, 1, steps)
    train = graphs["TRAIN"]
    test = graphs.get("TEST")
    return TrialWork(
        train_macs=macs_per_sample(train),
        test_macs=macs_per_sample(test) if test is not None else 0,
        train_samples=steps * train.data.batch_size,
        test_samples=evaluations * solver.test_iter * test.data.batch_size if test else 0,
        layers=len(train.layers),
        steps=steps,
        param_count=train.param_count,
    )


def _evaluations(solver: SolverConfig) -> int:
    """The TEST passes a worker runs (`workers.training.caffe.loop`): every
    ``test_interval`` iterations and once after the last, none without testing."""
    if solver.test_interval <= 0 or solver.test_iter <= 0:
        return 0
    return (max(1, solver.max_iter) - 1) // solver.test_interval + 1
