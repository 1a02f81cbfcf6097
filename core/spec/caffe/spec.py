"""Specs of Caffe nets: a ``caffe`` section naming a net and a solver, with sweep dimensions.

::

    name: lenet-digits
    caffe:
      solver: lenet_solver.prototxt     # CLI: paths relative to the spec file (the solver's
      net: lenet_train_test.prototxt    #   own net:/train_net: relative to the solver file)
      resize: [28, 28]                  # optional: resize the data set's images to H x W
      layers:                           # dimensions by layer name, in every form a dimension takes
        ip1: {num_output: [100, 500]}   #   short form: the field of the layer's *_param holding it
        conv1: {convolution_param: {num_output: [10, 20]}}   # full form
      solver_params:
        base_lr: {loguniform: [0.001, 0.1]}
    dataset: {name: digits}

The CLI reads the files (`core.spec.caffe.files`) and stores the texts in their place
(``net_text``, ``solver_text``), so the sweep carries them to workers on other hosts; the REST
API takes only the texts, and a path there is refused naming ``caffe.net``. Parameters are
named by their path (``caffe.layers.ip1.num_output``, ``caffe.solver_params.base_lr``)
wherever parameters show. Each trial's config holds both texts with its values written in
(`core.spec.caffe.targets`).

Of the built-in sections, ``dataset`` is required (the images the net's data layer reads:
``digits``, 1x8x8, a ``.npz`` file, or a folder of PNG/JPEG files by class,
`core.spec.caffe.image_folder`), ``training.seed`` and ``execution.device``,
``time_limit`` and ``dtype`` (float32 or float64) apply; the solver says the rest (iterations,
rates). A Caffe trial trains alone on one process: ``execution.fuse`` and
``execution.parallel`` are refused. `core.spec.caffe.checks` builds each net and solver at
validation time, so a broken one is refused before any worker sees it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, PrivateAttr, TypeAdapter, ValidationError

from core.errors import Problem, SpecError
from core.spec.artifacts import Artifacts
from core.spec.caffe.checks import check_points, first_param_count, first_params, first_problems
from core.spec.caffe.prototxt import Message, PrototxtError, dumps, parse
from core.spec.caffe.section import parse_caffe
from core.spec.caffe.solver import parse_solver
from core.spec.caffe.targets import Target, apply
from core.spec.caffe.trial import CaffeDataset, ImagePath
from core.spec.documents import value_problems
from core.spec.fields import field_adapter, set_in
from core.spec.objectives import goal_parts, goal_problems, multi_objective_problems
from core.spec.problems import problems_from
from core.spec.search import Pruning, Search, check_search
from core.spec.sections import parse_section
from core.spec.space import Dimension, Fixed
from core.spec.spec import OBJECTIVE_METRICS, Limits, Objective, SweepSpec
from core.spec.suggest import unknown_key

#: The built-in settings a Caffe spec may give, by section (all of ``dataset``).
APPLIES = {"training": ("seed",), "execution": ("device", "time_limit", "dtype")}
#: Why the other built-in settings do not apply, by section.
_WHY = {
    "training": "the solver says how a Caffe net trains; sweep its fields under "
    "caffe.solver_params (max_iter, base_lr, ...)",
    "execution": "a Caffe trial trains alone on one process (no fusing, no data-parallel strategy)",
}
_KNOWN = (
    "name",
    "description",
    "caffe",
    "dataset",
    "training",
    "execution",
    "objective",
    "objectives",
    "constraints",
    "search",
    "pruning",
    "limits",
    "artifacts",
)
DTYPES = ("float32", "float64")
#: Leaves whose rule differs for a Caffe net: its data set may be a folder of images.
_ADAPTERS = {"dataset.path": TypeAdapter(ImagePath)}


class CaffeSpec(SweepSpec):
    """A validated Caffe spec: the net's and solver's texts, and where each dimension lands."""

    net_text: str
    solver_text: str
    net_source: str = "caffe.net_text"
    solver_source: str = "caffe.solver_text"
    resize: tuple[int, int] | None = None
    targets: dict[str, Target] = {}
    _net: Message = PrivateAttr()
    _solver: Message = PrivateAttr()

    def model_post_init(self, context: Any) -> None:
        self._net = parse(self.net_text, self.net_source)
        self._solver = parse(self.solver_text, self.solver_source)

    def messages(self, params: dict[str, Any]) -> tuple[Message, Message]:
        """Copies of the net and the solver with the spec's fixed values and `params` set."""
        net, solver = self._net.copy(), self._solver.copy()
        values = [
            (self.targets[p], d.value)
            for p, d in self.space.items()
            if p in self.targets and isinstance(d, Fixed) and not d.when
        ]
        values += [(self.targets[p], v) for p, v in params.items() if p in self.targets]
        apply(net, solver, values)
        return net, solver

    def base_config(self) -> dict[str, Any]:
        """The sections a Caffe trial has, with every unconditional fixed value: the texts
        with the fixed values written in, the file names errors show, and the resize."""
        base: dict[str, Any] = {"training": {}, "execution": {}}
        if "dataset" in self.document:
            base["dataset"] = {}
        for path, dim in self.space.items():
            if path not in self.targets and isinstance(dim, Fixed) and not dim.when:
                set_in(base, path, dim.value)
        net, solver = self.messages({})
        base["caffe"] = {
            "net_text": dumps(net),
            "solver_text": dumps(solver),
            "net_source": self.net_source,
            "solver_source": self.solver_source,
        }
        if self.resize is not None:
            base["caffe"]["resize"] = list(self.resize)
        return base

    def resolve(self, params: dict[str, Any], base: dict | None = None) -> dict[str, Any]:
        """The trial's config: `base` with the built-in params set and the net's and the
        solver's params written into copies of the texts."""
        base = base if base is not None else self.base_config()
        config = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
        for path, value in params.items():
            if path not in self.targets:
                set_in(config, path, value)
        if any(p in self.targets for p in params):
            net, solver = self.messages(params)
            config["caffe"] = {
                **config["caffe"],
                "net_text": dumps(net),
                "solver_text": dumps(solver),
            }
        return config

    def config_model(self, section: str) -> type[BaseModel] | None:
        """``dataset`` is a `CaffeDataset` (an .npz file or a folder of images by class)."""
        return CaffeDataset if section == "dataset" else super().config_model(section)

    def planned_epochs(self) -> int:
        """The epoch rows the first trial reports: its solver's evaluations (a pruner's
        largest resource, as ``training.epochs`` is for a built-in trial)."""
        _, solver = self.messages(first_params(self))
        config = parse_solver(solver, self.solver_source)
        if config.test_interval <= 0 or config.test_iter <= 0:
            return 1
        return (config.max_iter - 1) // config.test_interval + 1

    def first_param_count(self) -> int | None:
        """The parameters of the first trial's net, where this host can build it."""
        return first_param_count(self)

    def check_trials(self, points: list[dict[str, Any]]) -> None:
        """Build every distinct net and solver of these trials (`core.spec.caffe.checks`)."""
        check_points(self, points)


def _parse_builtin(section: str, raw: Any, problems: list[Problem]) -> dict[str, Dimension]:
    allowed = APPLIES.get(section)
    if allowed is None or not isinstance(raw, dict):
        return parse_section(section, raw, problems, _ADAPTERS)
    kept = {}
    for key, value in raw.items():
        if key in allowed:
            kept[key] = value
        elif (section, key) == ("execution", "parallel"):
            rule = (
                "data-parallel strategies (allreduce, local_sgd, easgd) do not apply to a "
                "Caffe net yet: a Caffe trial trains on one process; leave execution.parallel out"
            )
            problems.append(Problem("execution.parallel", rule))
        else:
            rule = f"does not apply to a Caffe net (of {section}, only {', '.join(allowed)} do): "
            problems.append(Problem(f"{section}.{key}", rule + _WHY[section]))
    space = parse_section(section, kept, problems)
    dtype = space.get("execution.dtype")
    if dtype is not None and dtype.finite and any(v not in DTYPES for v in dtype.values()):
        rule = f"must be one of {', '.join(DTYPES)} for a Caffe net"
        problems.append(Problem("execution.dtype", rule))
    return space


def _check_conditions(space: dict[str, Dimension], problems: list[Problem]) -> None:
    for path, dim in space.items():
        for target in dim.when:
            if target == path:
                problems.append(Problem(f"{path}.when", "a dimension cannot depend on itself"))
            elif target not in space and field_adapter(target) is None:
                rule = "no such parameter in this spec; name one by its full path"
                problems.append(Problem(f"{path}.when.{target}", rule))


def load_caffe_spec(data: dict[str, Any]) -> CaffeSpec:
    """Validate a parsed spec document with a ``caffe`` section (`core.spec.caffe.kind`)."""
    if bad := value_problems(data):
        raise SpecError(bad)
    problems: list[Problem] = []
    space: dict[str, Dimension] = {}
    caffe: dict[str, Any] = {}
    for key, raw in data.items():
        if key == "caffe":
            caffe = parse_caffe(raw, problems)
            space.update(caffe["space"])
        elif key == "model":
            rule = (
                "does not apply to a Caffe net: the net is the model; sweep its fields "
                "under caffe.layers"
            )
            problems.append(Problem("model", rule))
        elif key in ("dataset", "training", "execution"):
            space.update(_parse_builtin(key, raw, problems))
        elif key not in _KNOWN:
            problems.append(Problem(str(key), unknown_key(key, _KNOWN)))
    for key, rule in (
        ("name", "is required"),
        (
            "dataset",
            (
                "is required: the images the net's data layer reads (digits, an .npz file, or "
                "a folder of images by class); a Data layer's LMDB/LevelDB source is not read"
            ),
        ),
    ):
        if key not in data:
            problems.append(Problem(key, rule))
    name = space.get("dataset.name")
    if name is not None and name.finite and any(v not in ("digits", None) for v in name.values()):
        problems.append(
            Problem(
                "dataset.name",
                (
                    "a Caffe net reads images: digits (1x8x8), or as dataset.path an .npz file "
                    "(X of shape N,C,H,W or N,H,W) or a folder with one sub-folder of PNG/JPEG "
                    f"files per class, got {name.values()}"
                ),
            )
        )
    parts: dict[str, Any] = {k: data[k] for k in ("name", "description") if k in data}
    parts.update(goal_parts(data, Objective, OBJECTIVE_METRICS, problems))
    for key, model in (
        ("search", Search),
        ("pruning", Pruning),
        ("limits", Limits),
        ("artifacts", Artifacts),
    ):
        if key in data:
            try:
                parts[key] = model.model_validate(data[key])
            except ValidationError as exc:
                problems.extend(problems_from(exc, key, data[key]))
    _check_conditions(space, problems)
    if "search" in parts or "search" not in data:
        problems.extend(check_search(space, parts.get("search", Search()), parts.get("pruning")))
    objectives = parts.get("objectives") or (parts.get("objective", Objective()),)
    problems.extend(goal_problems(objectives, parts.get("pruning")))
    problems.extend(multi_objective_problems(objectives, parts.get("search", Search()).algorithm))
    if problems:
        # The net and the solver are still built where the caffe section could be read, so
        # one run lists every problem of the spec, not the first section's.
        partial = _partial(data, space, caffe)
        if partial is not None:
            problems += first_problems(partial)
        raise SpecError(list(dict.fromkeys(problems)), spec=partial)
    try:
        spec = _build(data, space, caffe, parts)
    except ValidationError as exc:
        raise SpecError(problems_from(exc, "")) from exc
    found = first_problems(spec)
    if found:
        raise SpecError(found, spec=spec)
    return spec


def _build(
    data: dict[str, Any], space: dict[str, Dimension], caffe: dict[str, Any], parts: dict
) -> CaffeSpec:
    return CaffeSpec(
        space=space,
        document=data,
        net_text=caffe["net_text"],
        solver_text=caffe["solver_text"],
        **{k: caffe[k] for k in ("net_source", "solver_source") if k in caffe},
        resize=caffe.get("resize"),
        targets=caffe["targets"],
        **parts,
    )


def _partial(
    data: dict[str, Any], space: dict[str, Dimension], caffe: dict[str, Any]
) -> CaffeSpec | None:
    """The spec without its broken sections (objective, search ... at their defaults), to
    build its net on; None when the caffe section itself could not be read."""
    if not all(k in caffe for k in ("net_text", "solver_text", "targets")):
        return None
    try:
        return _build(data, space, caffe, {"name": str(data.get("name", "partial"))})
    except (ValidationError, PrototxtError, SpecError):
        return None
