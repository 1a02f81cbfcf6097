"""Building a Caffe spec's nets and solvers at validation time, so no worker meets a broken one.

`first_problems` runs when the spec loads (`sweepstack validate`, ``submit``, the API), even
when other sections of the spec are broken (one run lists every problem): the net of the first
trial (each dimension at its first value, or its low bound) through the layer
graph (`core.spec.caffe.net.build_graph`, TRAIN and TEST phases) and its solver through
`core.spec.caffe.solver.parse_solver`. `check_points` runs when a grid or random sweep is
expanded (`scheduler.expand`, inside the submitting request), on every distinct net and every
distinct solver of its trials, at most `MAX_CHECKED` of each and for at most `CHECK_SECONDS`
together (a net of 1,000 layers takes about 0.2 s a phase); a problem names the values it
happened with. The nets not built here are built by the worker of each trial before it
trains (a broken one fails its trial, saying why); the server's ceilings hold for them all
the same, checked on a bound (`core.spec.caffe.ceilings`).

The data set's shape is known here for ``digits`` (1 x 8 x 8, or 1 x H x W with
``caffe.resize``); a ``.npz`` file lies in a worker's datasets folder, so for one the graph
is checked by the worker that reads it (the solver still is here). A folder of images is
read from its files' headers by the commands whose workers share this host's datasets
folder (`sweepstack validate`, `run`: `folder_problems`), which build the first trial's net
on its shape and classes too.
"""

from __future__ import annotations

import json
import math
import time
import zipfile
from pathlib import Path
from typing import Any, Protocol

from core.errors import Problem, SpecError
from core.spec.caffe.image_folder import ImageFolderError, scan_folder
from core.spec.caffe.net import PHASES, NetGraph, build_graph, check_shared
from core.spec.caffe.npz import npz_shape
from core.spec.caffe.prototxt import Message
from core.spec.caffe.solver import SolverConfig, parse_solver
from core.spec.caffe.targets import Target
from core.spec.config import DatasetConfig
from core.spec.fields import leaf_defaults
from core.spec.space import Dimension, Fixed, IntRange, Uniform

#: The most distinct nets (and solvers) one expansion builds, and the seconds it may take
#: building them; the rest are built by workers.
MAX_CHECKED = 500
CHECK_SECONDS = 3.0
#: Problems reported before giving up.
MAX_PROBLEMS = 10
#: (channels, height, width) and classes of the built-in image set, and its images.
DIGITS = ((1, 8, 8), 10)
DIGITS_ROWS = 1797
DEFAULT_VALIDATION_FRACTION = DatasetConfig.model_fields["validation_fraction"].default


class CaffeNets(Protocol):
    """What these checks read of a Caffe spec: `core.spec.caffe.spec.CaffeSpec` is the one,
    and its loader runs them, so this module reads it through this outline instead of
    importing it."""

    @property
    def space(self) -> dict[str, Dimension]:
        """Every given leaf path's dimension."""
        ...

    @property
    def resize(self) -> tuple[int, int] | None:
        """The H x W the data set's images are resized to, if any."""
        ...

    @property
    def targets(self) -> dict[str, Target]:
        """Where each of the net's and the solver's dimensions lands."""
        ...

    @property
    def net_text(self) -> str:
        """The net's prototxt text, as the spec gives it."""
        ...

    @property
    def net_source(self) -> str:
        """The net's file name, as errors show it."""
        ...

    @property
    def solver_source(self) -> str:
        """The solver's file name, as errors show it."""
        ...

    def messages(self, params: dict[str, Any]) -> tuple[Message, Message]:
        """Copies of the net and the solver with the spec's fixed values and `params` set."""
        ...


def input_shape(spec: CaffeNets) -> tuple[tuple[int, ...], int | None] | None:
    """One sample's (C, H, W) and the class count, or None when only a worker knows them."""
    name = spec.space.get("dataset.name")
    if not isinstance(name, Fixed) or name.value != "digits":
        return None
    (channels, height, width), classes = DIGITS
    if spec.resize is not None:
        height, width = spec.resize
    return (channels, height, width), classes


def _problems(exc: SpecError, when: str) -> list[Problem]:
    suffix = f" (when {when})" if when else ""
    return [Problem(p.path, p.message + suffix) for p in exc.problems]


def solver_states(solver: Message | None) -> dict[str, Message | None]:
    """The solver's ``train_state`` and ``test_state`` by phase, as far as they are messages
    (`core.spec.caffe.solver.parse_solver` reports the rest)."""
    states: dict[str, Message | None] = {}
    for phase, name in zip(PHASES, ("train_state", "test_state"), strict=True):
        item = solver.get(name) if solver is not None else None
        states[phase] = item if isinstance(item, Message) else None
    return states


def check_messages(
    spec: CaffeNets,
    net: Message | None,
    solver: Message | None,
    when: str = "",
    shape: tuple[tuple[int, ...], int | None] | None = None,
    states: Message | None = None,
    rows: int | None = None,
) -> list[Problem]:
    """The problems of building `net` (both phases, with the train_state and test_state of
    `states`, by default `solver`) and parsing `solver`; `shape` is the data set's (sample
    shape, classes) where the caller read it (a folder), else `input_shape`'s; `rows`, the
    data set's images where known, checks an evaluation against the validation split."""
    problems: list[Problem] = []
    shape = shape if shape is not None else input_shape(spec)
    if shape is not None and rows is None:
        rows = DIGITS_ROWS if input_shape(spec) is not None else None
    chosen = solver_states(states if states is not None else solver)
    test: NetGraph | None = None
    if net is not None and shape is not None:
        try:
            train, test = (
                build_graph(net, phase, shape[0], shape[1], spec.net_source, chosen[phase])
                for phase in PHASES
            )
            check_shared(train, test)
            problems.extend(_problems(SpecError(loss_problems(train)), when))
        except SpecError as exc:  # the other phase mostly fails the same way: one is enough
            problems.extend(_problems(exc, when))
            test = None
    config = None
    read = solver if solver is not None else states  # `states` only for the evaluation check
    if read is not None:
        try:
            config = parse_solver(read, spec.solver_source)
        except SpecError as exc:
            if solver is not None:
                problems.extend(_problems(exc, when))
    if config is not None and test is not None and rows is not None:
        problems.extend(_problems(SpecError(evaluation_problems(spec, config, test, rows)), when))
    return problems


def evaluation_problems(
    spec: CaffeNets, solver: SolverConfig, test: NetGraph, rows: int
) -> list[Problem]:
    """An evaluation (``test_iter`` batches of the TEST net) larger than the validation split
    would count its images more than once (the worker wraps round, as Caffe's cursor does)."""
    fraction = spec.space.get("dataset.validation_fraction")
    share = fraction.value if isinstance(fraction, Fixed) else DEFAULT_VALIDATION_FRACTION
    if not isinstance(share, int | float) or not solver.test_iter or solver.test_interval <= 0:
        return []
    held_out = math.ceil(share * rows)
    batch = test.data.batch_size
    if solver.test_iter * batch <= held_out:
        return []
    rule = (
        f"{solver.test_iter} x the TEST batch size {batch} (layer '{test.data.layer}') = "
        f"{solver.test_iter * batch} images per evaluation, more than the {held_out} of the "
        f"validation split (dataset.validation_fraction {share} of {rows} images); lower "
        f"test_iter to {max(1, held_out // batch)} or raise dataset.validation_fraction"
    )
    return [Problem("caffe.solver.test_iter", rule)]


def npz_problems(spec: CaffeNets, value: str, real: Path) -> list[Problem]:
    """What is wrong with the .npz file `value` (at `real`) as this spec's data set, read
    from its arrays' headers only: ``X``'s shape, and the first trial's net built on it."""
    try:
        shape = npz_shape(real, "X")
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        return [Problem("dataset.path", f"cannot read it as npz ({type(exc).__name__}), got "
                        f"{value!r}")]  # fmt: skip
    if shape is None or len(shape) not in (3, 4):
        got = "no array 'X'" if shape is None else f"'X' of shape {shape}"
        rule = f"must hold 'X' of shape (N, C, H, W) or (N, H, W) images; {got}"
        return [Problem("dataset.path", f"{rule}, got {value!r}")]
    sample = shape[1:] if len(shape) == 4 else (1, *shape[1:])
    if spec.resize is not None:
        sample = (sample[0], *spec.resize)
    net, solver = spec.messages(first_params(spec))
    when = f"dataset.path={value} of X shape {list(shape)}"
    return check_messages(spec, net, None, when, (sample, None), states=solver, rows=shape[0])


def loss_problems(train: NetGraph) -> list[Problem]:
    """A TRAIN net without a weighted top has nothing to minimise (a worker stops at once)."""
    if any(any(layer.loss_weights) for layer in train.layers):
        return []
    last = train.layers[-1]
    rule = (
        f"the TRAIN net has no loss: no layer's top has a loss_weight (its last layer is "
        f"'{last.name}' ({last.type})); add a loss layer (SoftmaxWithLoss, EuclideanLoss, "
        "SigmoidCrossEntropyLoss) in the TRAIN phase, or give a top a loss_weight"
    )
    return [Problem("caffe.net", rule)]


def _first(dim: Any) -> Any:
    if isinstance(dim, Uniform | IntRange):
        return dim.low
    return dim.values()[0]


def first_params(spec: CaffeNets) -> dict[str, Any]:
    """The first trial a grid would list: each active dimension at its first value."""
    lookup = leaf_defaults()
    lookup.update(
        {p: d.value for p, d in spec.space.items() if isinstance(d, Fixed) and not d.when}
    )
    params: dict[str, Any] = {}
    for path, dim in spec.space.items():
        if dim.varies and (not dim.when or dim.active(lookup)):
            params[path] = lookup[path] = _first(dim)
    return params


def first_problems(spec: CaffeNets) -> list[Problem]:
    """The problems of building the first trial's net and solver."""
    net, solver = spec.messages(first_params(spec))
    return check_messages(spec, net, solver)



def first_param_count(spec: CaffeNets) -> int | None:
    """The learnable parameters of the first trial's net, or None when only a worker can
    build it (a file's shape) or it cannot be built (reported by `first_problems`)."""
    shape = input_shape(spec)
    if shape is None:
        return None
    net, solver = spec.messages(first_params(spec))
    state = solver_states(solver)["TRAIN"]
    try:
        return build_graph(net, "TRAIN", shape[0], shape[1], spec.net_source, state).param_count
    except SpecError:
        return None


def _show(values: dict[str, Any]) -> str:
    return ", ".join(f"{p}={json.dumps(v)}" for p, v in values.items())


def check_points(spec: CaffeNets, points: list[dict[str, Any]]) -> None:
    """Raise `SpecError` if a distinct net or solver among these trials cannot be built (at
    most `MAX_CHECKED` of each, within `CHECK_SECONDS`: the module docstring)."""
    problems: list[Problem] = []
    deadline = time.monotonic() + CHECK_SECONDS
    for kind in ("solver", "layer"):  # solvers first: they are cheap, nets may not be
        seen: set[str] = set()
        for params in points:
            if len(seen) >= MAX_CHECKED or time.monotonic() > deadline:
                break
            mine = {p: v for p, v in params.items() if _kind(spec.targets.get(p)) == kind}
            key = json.dumps(mine, sort_keys=True, default=str)
            if key in seen:
                continue
            seen.add(key)
            if not mine and kind == "layer" and len(seen) > 1:
                continue
            net, solver = spec.messages(mine)
            found = check_messages(
                spec,
                net if kind == "layer" else None,
                solver if kind == "solver" else None,
                _show(mine),
                states=solver,
            )
            problems.extend(p for p in found if p not in problems)
            if len(problems) >= MAX_PROBLEMS:
                raise SpecError(problems)
    if problems:
        raise SpecError(problems)


def _kind(target: Target | None) -> str | None:
    return target.kind if target is not None else None


def folder_problems(spec: CaffeNets, value: str, real: Path, datasets: Path) -> list[Problem]:
    """What is wrong with the folder `value` (at `real` in the datasets folder `datasets`)
    as this spec's data set (`core.spec.caffe.image_folder`), and, once it is read, with the
    first trial's net built on its images' shape and classes."""
    where = f"in the datasets folder {datasets} (SWEEPSTACK_DATASETS_DIR)"
    if not real.exists():
        return [Problem("dataset.path", f"names no folder {where}, got {value!r}")]
    if not real.is_dir():
        rule = "is a file, but a Caffe net reads an .npz file or a folder of images by class"
        return [Problem("dataset.path", f"{rule}, got {value!r}")]
    try:
        scan = scan_folder(real, value, spec.resize)
    except ImageFolderError as err:
        return [Problem("dataset.path", f"{err} ({where})")]
    net, solver = spec.messages(first_params(spec))
    shape = (scan.shape, len(scan.classes))
    when = f"dataset.path={value}"
    return check_messages(spec, net, None, when, shape, states=solver, rows=len(scan.files))
