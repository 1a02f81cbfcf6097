"""What a server lets a spec ask for: its dataset files and its resource ceilings.

A valid spec (`core.spec.sweep`) can still ask for more than a deployment should give one user.
`check_spec_limits` holds it to the server's settings (`core.settings.Settings`), and the
API (422) and the CLI (`validate`, `generate`, `submit`, `run`: exit 2) call it before
anything is stored:

- ``dataset.path`` must lie in the datasets folder (``SWEEPSTACK_DATASETS_DIR``): relative
  to it, or absolute inside it, symlinks followed (`confine`); the worker checks again with
  its own folder before it opens the file; `validate` and `run`, whose workers read this
  host's files, also check that it names a file (`dataset_file_problems`), or for a Caffe
  net a folder of images by class (`core.spec.caffe.image_folder`); a Caffe net's first net
  is built on the folder's or the .npz file's image shape (read from headers) and its
  evaluations checked against the validation split;
- ``execution.parallel.world_size`` at most ``SWEEPSTACK_MAX_WORLD_SIZE`` processes;
- the built-in network's parameters, estimated before training from the widest and deepest
  model the spec allows and its data's features and classes, at most
  ``SWEEPSTACK_MAX_MODEL_PARAMETERS`` (`core.spec.mlp`);
- a synthetic set's rows x features at most ``SWEEPSTACK_MAX_DATASET_ELEMENTS``;
- epochs x rows (samples a trial trains on, summed over epochs) at most
  ``SWEEPSTACK_MAX_EPOCH_SAMPLES``;
- the description at most ``SWEEPSTACK_MAX_DESCRIPTION_BYTES`` of UTF-8, and every other
  string and key of the spec (``dataset.target``, a trainable's string parameters, ``name``
  ...) at most ``SWEEPSTACK_MAX_STRING_BYTES`` (`core.spec.strings`);
- a batch's activations (batch x every layer's elements) at most
  ``SWEEPSTACK_MAX_ACTIVATION_ELEMENTS``, and the parameter ceiling, for every kind;
- a spec's ``trainable`` installed here (`core.spec.trainable.trainable_problems`); its
  model is the function's own, held to the parameter and activation ceilings where the
  function declares its cost (`core.spec.trainable_costs`);
- a Caffe spec's net and solver texts at most ``SWEEPSTACK_MAX_PROTOTXT_BYTES`` each, its
  net at most ``SWEEPSTACK_MAX_CAFFE_LAYERS`` layers, and the worst net of its sweep within
  the parameter and activation ceilings (`core.spec.caffe.ceilings`).

What differs by kind, the spec's kind says (`core.spec.kinds.kind_of`): what this host lacks
for it (`TrialKind.host_problems`, listed first), its own ceilings
(`TrialKind.limit_problems`), and whether its data set may be a folder of images
(`TrialKind.image_folders`, `TrialKind.folder_problems`).

The ceilings are checked on the largest value each field can take anywhere in the sweep
(each field on its own, the default included where a dimension is conditional,
`core.spec.ceilings`): an upper bound that needs no expansion, so one check costs the same
for 10 trials or 100,000. A
file's rows, features and classes are not known before a worker reads it: for a file only
the hidden layers count toward the parameters, and epochs x rows is not checked.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePath

from core.errors import Problem, SpecError
from core.settings import Settings
from core.spec.ceilings import SYNTHETIC, candidates, data_shape, over, top
from core.spec.config import dataset_path_rule
from core.spec.kinds import kind_of
from core.spec.spec import SweepSpec
from core.spec.strings import string_problems


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


def _dataset_paths(spec: SweepSpec, root: Path, problems: list[Problem]) -> None:
    images = kind_of(spec).image_folders
    for value in candidates(spec, "dataset.path"):
        if not isinstance(value, str):
            continue
        try:
            confine(value, root, images=images)
        except OutsideDatasets as exc:
            problems.append(Problem("dataset.path", f"{exc}, got {value!r}"))


def dataset_file_problems(spec: SweepSpec, settings: Settings) -> list[Problem]:
    """Each ``dataset.path`` that names no file in this host's datasets folder, each
    folder of a Caffe spec that is no data set of images by class (`core.spec.caffe.image_folder`:
    its classes, files, counts and sizes, and the first trial's net on its images), and what
    the spec's kind finds wrong with a file from its headers (`TrialKind.file_problems`).

    For the commands whose workers read the files of this host (`sweepstack validate`,
    `sweepstack run`); the API and `submit` leave the check to the workers, whose folder
    may be another's. A path outside the folder is `spec_limit_problems`' to report.
    """
    problems = []
    kind = kind_of(spec)
    images = kind.image_folders
    for value in candidates(spec, "dataset.path"):
        if not isinstance(value, str):
            continue
        try:
            real = confine(value, settings.datasets_dir, images=images)
        except OutsideDatasets:
            continue
        if images and PurePath(value).suffix.lower() != ".npz":
            problems += kind.folder_problems(spec, value, real, settings.datasets_dir)
        elif real.is_file():
            problems += kind.file_problems(spec, value, real)
        else:
            what = "is a folder, not a file" if real.is_dir() else "names no file"
            problems.append(
                Problem(
                    "dataset.path",
                    f"{what} in the datasets folder {settings.datasets_dir} "
                    f"(SWEEPSTACK_DATASETS_DIR), got {value!r}",
                )
            )
    return problems


def spec_limit_problems(spec: SweepSpec, settings: Settings) -> list[Problem]:
    """Every way `spec` asks for more than this server allows (see the module docstring)."""
    kind = kind_of(spec)
    problems: list[Problem] = kind.host_problems(spec)
    _dataset_paths(spec, settings.datasets_dir, problems)
    size = len(spec.description.encode("utf-8"))
    if size > settings.max_description_bytes:
        problems.append(
            over("description", "its UTF-8 bytes", size, settings.max_description_bytes,
                 "SWEEPSTACK_MAX_DESCRIPTION_BYTES")
        )  # fmt: skip
    problems += string_problems(spec.document, settings.max_string_bytes)
    world = top(spec, "execution.parallel.world_size")
    if world > settings.max_world_size:
        problems.append(
            over("execution.parallel.world_size", "processes per trial", world,
                 settings.max_world_size, "SWEEPSTACK_MAX_WORLD_SIZE")
        )  # fmt: skip
    problems += kind.limit_problems(spec, settings)
    if set(candidates(spec, "dataset.name")).intersection(SYNTHETIC):
        samples, features = top(spec, "dataset.samples"), top(spec, "dataset.features")
        if samples * features > settings.max_dataset_elements:
            problems.append(
                over("dataset.samples", "dataset.samples x dataset.features",
                     samples * features, settings.max_dataset_elements,
                     "SWEEPSTACK_MAX_DATASET_ELEMENTS", f"{samples:,} x {features:,}")
            )  # fmt: skip
    rows, _, _ = data_shape(spec)
    epochs = top(spec, "training.epochs")
    if rows is not None and epochs * rows > settings.max_epoch_samples:
        problems.append(
            over("training.epochs", "training.epochs x the dataset's rows", epochs * rows,
                 settings.max_epoch_samples, "SWEEPSTACK_MAX_EPOCH_SAMPLES",
                 f"{epochs:,} x {rows:,}")
        )  # fmt: skip
    return problems


def check_spec_limits(spec: SweepSpec, settings: Settings) -> None:
    """Raise `SpecError` listing every limit of this server that `spec` goes past."""
    problems = spec_limit_problems(spec, settings)
    if problems:
        raise SpecError(problems)
