"""What a server lets a spec ask for: its dataset files and its resource ceilings.

A valid spec (`core.spec.sweep`) can still ask for more than a deployment should give one user.
`check_spec_limits` holds it to the server's settings (`core.settings.Settings`), and the
API (422) and the CLI (`validate`, `generate`, `submit`, `run`: exit 2) call it before
anything is stored:

- ``dataset.path`` must lie in the datasets folder (``SWEEPSTACK_DATASETS_DIR``): relative
  to it, or absolute inside it, symlinks followed (`confine`); the worker checks again with
  its own folder before it opens the file; `validate` and `run`, whose workers read this
  host's files, also check that it names a file (`dataset_file_problems`), or for a Caffe
  net a folder of images by class (`core.spec.caffe.image_folder`), whose first net is built on
  its images' shape;
- ``execution.parallel.world_size`` at most ``SWEEPSTACK_MAX_WORLD_SIZE`` processes;
- the model's parameters, estimated before training from the widest and deepest model the
  spec allows and its data's features and classes, at most ``SWEEPSTACK_MAX_MODEL_PARAMETERS``;
- a synthetic set's rows x features at most ``SWEEPSTACK_MAX_DATASET_ELEMENTS``;
- epochs x rows (samples a trial trains on, summed over epochs) at most
  ``SWEEPSTACK_MAX_EPOCH_SAMPLES``;
- the description at most ``SWEEPSTACK_MAX_DESCRIPTION_BYTES`` of UTF-8;
- a spec's ``trainable`` installed here (`core.spec.trainable.trainable_problems`); its
  model is the function's own, so the parameter ceiling does not apply to it;
- a Caffe spec's net and solver texts at most ``SWEEPSTACK_MAX_PROTOTXT_BYTES`` each, and
  its first trial's net (`core.spec.caffe.checks`) within the parameter ceiling.

The ceilings are checked on the largest value each field can take anywhere in the sweep
(each field on its own, the default included where a dimension is conditional): an upper
bound that needs no expansion, so one check costs the same for 10 trials or 100,000. A
file's rows, features and classes are not known before a worker reads it: for a file only
the hidden layers count toward the parameters, and epochs x rows is not checked.
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Iterable
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from core.errors import Problem, SpecError
from core.settings import Settings
from core.spec.config import REGRESSION_DATASETS, dataset_path_rule
from core.spec.fields import leaf_defaults
from core.spec.space import Fixed, IntRange, Uniform
from core.spec.sweep import SweepSpec
from core.spec.trainable import TrainableSpec, trainable_problems

if TYPE_CHECKING:
    from core.spec.caffe.spec import CaffeSpec

#: (rows, features, classes) of the bundled sets (scikit-learn's loaders).
BUILTIN_SHAPES = {
    "digits": (1797, 64, 10),
    "iris": (150, 4, 3),
    "wine": (178, 13, 3),
    "breast_cancer": (569, 30, 2),
}
SYNTHETIC = ("synthetic_classification", "synthetic_regression")


class OutsideDatasets(ValueError):
    """A dataset path that is not inside the datasets folder; the message is the rule."""


def confine(value: str, root: Path, *, images: bool = False) -> Path:
    """The real path of the dataset file `value` names, inside `root`, or `OutsideDatasets`.

    A relative `value` is taken from `root`; an absolute one must lie in it. Symlinks are
    followed (on the path and on `root`), so a link that points out is refused too. The
    file need not exist: a missing one is reported by whoever opens it. With `images` (a
    Caffe net's data set) `value` may name a folder of images as well (`dataset_path_rule`).
    """
    rule = dataset_path_rule(value, images=images)
    if rule is not None:
        raise OutsideDatasets(rule)
    real_root = Path(os.path.realpath(root))
    given = Path(value)
    candidate = given if given.is_absolute() else Path(os.path.abspath(root)) / given
    real = Path(os.path.realpath(candidate))
    if not real.is_relative_to(real_root) or real == real_root:
        where = "is outside" if given.is_absolute() else "leads outside (a symlink)"
        raise OutsideDatasets(
            f"{where} the datasets folder; give a path inside it (SWEEPSTACK_DATASETS_DIR)"
        )
    return real


def _candidates(spec: SweepSpec, path: str) -> list[Any]:
    """Every value `path` can take in the sweep: a dimension's values (a range's bounds),
    and the default as well where the dimension is conditional; else the fixed value or
    the default."""
    dim = spec.space.get(path)
    default = leaf_defaults().get(path)
    if dim is None:
        return [default]
    if isinstance(dim, Uniform | IntRange):
        values: list[Any] = [dim.low, dim.high]
    elif isinstance(dim, Fixed):
        values = [dim.value]
    else:
        values = dim.values()
    return [*values, default] if dim.when else values


def _numbers(values: Iterable[Any]) -> list[float]:
    return [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]


def _top(spec: SweepSpec, path: str) -> int:
    return int(max(_numbers(_candidates(spec, path)), default=0))


def _mlp_parameters(features: int, widths: list[int], outputs: int, batch_norm: bool) -> int:
    sizes = [features, *widths, outputs]
    linear = sum((a + 1) * b for a, b in itertools.pairwise(sizes))
    return linear + (2 * sum(widths) if batch_norm else 0)


def _data_shape(spec: SweepSpec) -> tuple[int | None, int, int]:
    """The most rows, features and outputs any trial's data has (rows None: a file)."""
    names = [n for n in _candidates(spec, "dataset.name") if n is not None]
    has_file = any(p is not None for p in _candidates(spec, "dataset.path"))
    rows: list[int] = []
    features: list[int] = []
    outputs: list[int] = [1]
    for name in names:
        if name in BUILTIN_SHAPES:
            n, f, c = BUILTIN_SHAPES[name]
            rows.append(n)
            features.append(f)
            outputs.append(c)
        elif name in SYNTHETIC:
            rows.append(_top(spec, "dataset.samples"))
            features.append(_top(spec, "dataset.features"))
            if name not in REGRESSION_DATASETS:
                outputs.append(_top(spec, "dataset.classes"))
    top_rows = None if has_file or not rows else max(rows)
    return top_rows, max(features, default=1), max(outputs)


def _model_parameters(spec: SweepSpec) -> tuple[int, str]:
    """The largest parameter count the spec allows, and how it was reached."""
    _, features, outputs = _data_shape(spec)
    layers = _top(spec, "model.hidden_layers")
    batch_norm = any(v is True for v in _candidates(spec, "model.batch_norm"))
    best, how = 0, ""
    for units in _candidates(spec, "model.hidden_units"):
        if isinstance(units, list):
            widths = [int(u) for u in _numbers(units)]
            shape = f"hidden_units {units}"
        elif isinstance(units, int) and not isinstance(units, bool):
            widths = [units] * layers
            shape = f"hidden_layers {layers} x hidden_units {units}"
        else:
            continue
        count = _mlp_parameters(features, widths, outputs, batch_norm)
        if count > best:
            best, how = count, f"{shape}, {features} features, {outputs} outputs"
    return best, how


def _over(field: str, what: str, got: int, limit: int, setting: str, how: str = "") -> Problem:
    rule = f"{what} must be <= {limit:,} on this server ({setting}), got {got:,}"
    return Problem(field, f"{rule} ({how})" if how else rule)


def _dataset_paths(spec: SweepSpec, root: Path, problems: list[Problem]) -> None:
    for value in _candidates(spec, "dataset.path"):
        if not isinstance(value, str):
            continue
        try:
            confine(value, root, images=_is_caffe_spec(spec))
        except OutsideDatasets as exc:
            problems.append(Problem("dataset.path", f"{exc}, got {value!r}"))


def dataset_file_problems(spec: SweepSpec, settings: Settings) -> list[Problem]:
    """Each ``dataset.path`` that names no file in this host's datasets folder, and each
    folder of a Caffe spec that is no data set of images by class (`core.spec.caffe.image_folder`:
    its classes, files, counts and sizes, and the first trial's net on its images).

    For the commands whose workers read the files of this host (`sweepstack validate`,
    `sweepstack run`); the API and `submit` leave the check to the workers, whose folder
    may be another's. A path outside the folder is `spec_limit_problems`' to report.
    """
    problems = []
    images = _is_caffe_spec(spec)
    for value in _candidates(spec, "dataset.path"):
        if not isinstance(value, str):
            continue
        try:
            real = confine(value, settings.datasets_dir, images=images)
        except OutsideDatasets:
            continue
        if images and PurePath(value).suffix.lower() != ".npz":
            from core.spec.caffe.checks import folder_problems

            problems += folder_problems(spec, value, real, settings.datasets_dir)
        elif not real.is_file():
            what = "is a folder, not a file" if real.is_dir() else "names no file"
            problems.append(
                Problem(
                    "dataset.path",
                    f"{what} in the datasets folder {settings.datasets_dir} "
                    f"(SWEEPSTACK_DATASETS_DIR), got {value!r}",
                )
            )
    return problems


def _is_caffe_spec(spec: SweepSpec) -> bool:
    """Whether `spec` is a `CaffeSpec`, without loading the Caffe code for the specs that
    are not (a `CaffeSpec` exists only once `core.spec.caffe.spec` has been imported)."""
    module = sys.modules.get("core.spec.caffe.spec")
    return module is not None and isinstance(spec, module.CaffeSpec)


def _caffe_limits(spec: CaffeSpec, settings: Settings, problems: list[Problem]) -> None:
    for key, text in (("caffe.net_text", spec.net_text), ("caffe.solver_text", spec.solver_text)):
        size = len(text.encode("utf-8"))
        if size > settings.max_prototxt_bytes:
            problems.append(
                _over(key, "its UTF-8 bytes", size, settings.max_prototxt_bytes,
                      "SWEEPSTACK_MAX_PROTOTXT_BYTES")
            )  # fmt: skip
    count = spec.first_param_count()
    if count is not None and count > settings.max_model_parameters:
        problems.append(
            _over("caffe.net_text", "the net's parameters", count, settings.max_model_parameters,
                  "SWEEPSTACK_MAX_MODEL_PARAMETERS", "its first trial's net")
        )  # fmt: skip


def spec_limit_problems(spec: SweepSpec, settings: Settings) -> list[Problem]:
    """Every way `spec` asks for more than this server allows (see the module docstring)."""
    problems: list[Problem] = trainable_problems(spec)
    _dataset_paths(spec, settings.datasets_dir, problems)
    size = len(spec.description.encode("utf-8"))
    if size > settings.max_description_bytes:
        problems.append(
            _over("description", "its UTF-8 bytes", size, settings.max_description_bytes,
                  "SWEEPSTACK_MAX_DESCRIPTION_BYTES")
        )  # fmt: skip
    world = _top(spec, "execution.parallel.world_size")
    if world > settings.max_world_size:
        problems.append(
            _over("execution.parallel.world_size", "processes per trial", world,
                  settings.max_world_size, "SWEEPSTACK_MAX_WORLD_SIZE")
        )  # fmt: skip
    caffe = _is_caffe_spec(spec)
    if caffe:
        _caffe_limits(spec, settings, problems)  # type: ignore[arg-type]  # a CaffeSpec
    parameters, how = (
        (0, "") if caffe or isinstance(spec, TrainableSpec) else _model_parameters(spec)
    )
    if parameters > settings.max_model_parameters:
        problems.append(
            _over("model.hidden_units", "the model's parameters", parameters,
                  settings.max_model_parameters, "SWEEPSTACK_MAX_MODEL_PARAMETERS", how)
        )  # fmt: skip
    if set(_candidates(spec, "dataset.name")).intersection(SYNTHETIC):
        samples, features = _top(spec, "dataset.samples"), _top(spec, "dataset.features")
        if samples * features > settings.max_dataset_elements:
            problems.append(
                _over("dataset.samples", "dataset.samples x dataset.features",
                      samples * features, settings.max_dataset_elements,
                      "SWEEPSTACK_MAX_DATASET_ELEMENTS", f"{samples:,} x {features:,}")
            )  # fmt: skip
    rows, _, _ = _data_shape(spec)
    epochs = _top(spec, "training.epochs")
    if rows is not None and epochs * rows > settings.max_epoch_samples:
        problems.append(
            _over("training.epochs", "training.epochs x the dataset's rows", epochs * rows,
                  settings.max_epoch_samples, "SWEEPSTACK_MAX_EPOCH_SAMPLES",
                  f"{epochs:,} x {rows:,}")
        )  # fmt: skip
    return problems


def check_spec_limits(spec: SweepSpec, settings: Settings) -> None:
    """Raise `SpecError` listing every limit of this server that `spec` goes past."""
    problems = spec_limit_problems(spec, settings)
    if problems:
        raise SpecError(problems)
