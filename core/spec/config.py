"""The concrete configuration of one trial: what a worker needs to train it.

A sweep spec (`core.spec.sweep`) has the same sections, but any leaf may be a search dimension;
expanding the spec gives one `TrialConfig` per trial. Each field's rule lives here once and
serves both: the spec validates every candidate value of a dimension against the field it
targets, and the worker validates the resolved config again before it trains.
"""

from __future__ import annotations

import re
from pathlib import PurePath
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

BUILTIN_DATASETS = (
    "digits",
    "iris",
    "wine",
    "breast_cancer",
    "synthetic_classification",
    "synthetic_regression",
)
REGRESSION_DATASETS = ("synthetic_regression",)
DATASET_FILE_SUFFIXES = (".npz", ".csv", ".parquet")
ACTIVATIONS = ("relu", "tanh", "sigmoid", "elu", "gelu", "leaky_relu", "selu")
INITS = (
    "default",
    "xavier_uniform",
    "xavier_normal",
    "kaiming_uniform",
    "kaiming_normal",
    "orthogonal",
)
OPTIMIZERS = ("sgd", "momentum", "nesterov", "adam", "adamw", "rmsprop")
SCHEDULES = ("none", "step", "cosine")
DTYPES = ("float32", "float64", "bfloat16", "float16")
_DEVICE_RE = re.compile(r"^(auto|cpu|cuda|cuda:\d+)$")

PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]
Fraction = Annotated[float, Field(gt=0, lt=1)]


#: Where a folder may be a data set, said to a spec that names one where it may not.
FOLDERS_ARE_FOR_CAFFE = (
    "a folder of images by class is a data set for Caffe nets only (a spec with a caffe section)"
)
#: The files that hold tables, not images: never a Caffe net's data set.
TABLE_SUFFIXES = (".csv", ".parquet")


def dataset_path_rule(value: str, *, images: bool = False) -> str | None:
    """The rule a `dataset.path` breaks on its own, before any folder is consulted, or None.

    Files are read from the datasets folder (``SWEEPSTACK_DATASETS_DIR``, `core.spec.limits`), so
    a path may not climb out of it by its spelling: no NUL, no ``~``, no ``..`` part. A
    built-in model reads a .npz, .csv or .parquet file; with `images` (a Caffe net's data
    set, `core.spec.caffe.trial.CaffeDataset`) the path is an .npz file or else a folder of
    images by class (`core.spec.caffe.image_folder`), so only the table suffixes are refused.
    """
    if "\x00" in value:
        return "must not contain a NUL character"
    if value.startswith("~"):
        return "must not start with ~: paths are read from the datasets folder"
    if ".." in PurePath(value).parts:
        return "must not contain a .. part: paths are read from the datasets folder"
    suffix = PurePath(value).suffix.lower()
    if images and suffix in TABLE_SUFFIXES:
        return (
            f"a Caffe net reads images, not a {suffix[1:]} table: give an .npz file (X of "
            "shape N,C,H,W or N,H,W) or a folder with one sub-folder of PNG/JPEG files per class"
        )
    if not images and suffix not in DATASET_FILE_SUFFIXES:
        return f"must end in one of {', '.join(DATASET_FILE_SUFFIXES)}; {FOLDERS_ARE_FOR_CAFFE}"
    return None


def _check_dataset_path(value: str | None) -> str | None:
    if value is not None and (rule := dataset_path_rule(value)) is not None:
        raise ValueError(rule)
    return value


def check_image_path(value: str | None) -> str | None:
    """`dataset.path`'s validator for a Caffe net: an .npz file or a folder of images."""
    if value is not None and (rule := dataset_path_rule(value, images=True)) is not None:
        raise ValueError(rule)
    return value


def _check_device(value: str) -> str:
    if not _DEVICE_RE.match(value):
        raise ValueError("must be auto, cpu, cuda or cuda:N")
    return value


FUSE_MAX = 1024


def _check_fuse(value: Any) -> Any:
    # YAML 1.1 reads a bare `off` as false; that is what a user writing `fuse: off` means.
    if value is False:
        return "off"
    if value in ("off", "auto") and isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= FUSE_MAX:
        return value
    raise ValueError(f"must be off, auto or a group size from 1 to {FUSE_MAX}, got {value!r}")


# Fields that take part in a rule across fields; expansion checks each distinct combination.
# Keys are (sub-)sections, fields are dotted below them.
CROSS_FIELDS: dict[str, tuple[str, ...]] = {
    "dataset": ("name", "path"),
    "model": ("hidden_layers", "hidden_units"),
    "execution.parallel": ("world_size", "strategy", "alpha", "asynchronous"),
    "execution": ("device", "parallel.backend", "parallel.world_size"),
}


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)


class DatasetConfig(_Section):
    """Where the data comes from and how it is split.

    Exactly one of `name` (a built-in set) or `path` (a .npz, .csv or .parquet file in the
    datasets folder, relative to it or absolute inside it) is given.
    """

    name: Literal[BUILTIN_DATASETS] | None = None  # type: ignore[valid-type]
    path: Annotated[str | None, AfterValidator(_check_dataset_path)] = None
    target: str | None = None
    task: Literal["auto", "classification", "regression"] = "auto"
    validation_fraction: Fraction = 0.2
    split_seed: NonNegativeInt = 0
    samples: Annotated[int, Field(ge=10, le=10_000_000)] = 2000
    features: Annotated[int, Field(ge=1, le=100_000)] = 20
    classes: Annotated[int, Field(ge=2, le=1000)] = 2
    noise: Annotated[float, Field(ge=0)] = 0.1

    @model_validator(mode="after")
    def _one_source(self) -> DatasetConfig:
        if (self.name is None) == (self.path is None):
            raise ValueError("give exactly one of dataset.name or dataset.path")
        return self

    @property
    def resolved_task(self) -> str:
        """classification or regression; `auto` is decided by the built-in name or the file."""
        if self.task != "auto":
            return self.task
        if self.name is not None:
            return "regression" if self.name in REGRESSION_DATASETS else "classification"
        return "auto"


class ModelConfig(_Section):
    """A multilayer perceptron: depth, widths, activation and regularisation."""

    kind: Literal["mlp"] = "mlp"
    hidden_layers: Annotated[int, Field(ge=0, le=128)] = 2
    hidden_units: (
        Annotated[int, Field(gt=0, le=1_000_000)] | list[Annotated[int, Field(gt=0, le=1_000_000)]]
    ) = 64
    activation: Literal[ACTIVATIONS] = "relu"  # type: ignore[valid-type]
    dropout: Annotated[float, Field(ge=0, lt=1)] = 0.0
    batch_norm: bool = False
    init: Literal[INITS] = "default"  # type: ignore[valid-type]

    @model_validator(mode="after")
    def _widths_match_depth(self) -> ModelConfig:
        if isinstance(self.hidden_units, list) and len(self.hidden_units) != self.hidden_layers:
            raise ValueError(
                f"lists {len(self.hidden_units)} widths but model.hidden_layers is "
                f"{self.hidden_layers}; they must match"
            )
        return self

    @property
    def widths(self) -> list[int]:
        """One width per hidden layer."""
        if isinstance(self.hidden_units, list):
            return list(self.hidden_units)
        return [self.hidden_units] * self.hidden_layers


class TrainingConfig(_Section):
    """Optimiser, learning rate schedule, batch size, epochs and the trial's seed."""

    optimizer: Literal[OPTIMIZERS] = "adam"  # type: ignore[valid-type]
    lr: Annotated[float, Field(gt=0, le=100)] = 1e-3
    weight_decay: Annotated[float, Field(ge=0)] = 0.0
    momentum: Annotated[float, Field(ge=0, lt=1)] = 0.9
    beta1: Annotated[float, Field(ge=0, lt=1)] = 0.9
    beta2: Annotated[float, Field(ge=0, lt=1)] = 0.999
    batch_size: Annotated[int, Field(gt=0, le=1_000_000)] = 64
    epochs: Annotated[int, Field(ge=0, le=100_000)] = 10
    lr_schedule: Literal[SCHEDULES] = "none"  # type: ignore[valid-type]
    lr_step_size: PositiveInt = 10
    lr_gamma: Annotated[float, Field(gt=0, le=1)] = 0.1
    seed: NonNegativeInt | None = None


#: The longest `execution.time_limit`, and the longest a fused group's message may run.
MAX_TIME_LIMIT = 7 * 24 * 3600
STRATEGIES = ("allreduce", "local_sgd", "easgd")
BACKENDS = ("auto", "gloo", "nccl")
WORLD_SIZE_MAX = 1024


class ParallelConfig(_Section):
    """Data-parallel training of one trial on `world_size` processes (`execution.parallel`).

    `allreduce` (PCL-DNN): every rank takes 1/world_size of each global batch and the
    gradients are summed, so the result is that of one process on the global batch.
    `local_sgd` (SparkNet): `tau` local steps, then the ranks' parameters are averaged.
    `easgd` (DeepSpark): every `tau` steps each rank moves toward a centre variable by
    `alpha` and the centre toward the ranks; `asynchronous` exchanges with a centre held by
    rank 0 without a global barrier. `alpha` defaults to 0.9 / world_size (EASGD's beta 0.9).
    `timeout` bounds every collective, so a dead rank fails the trial instead of hanging it.
    `hosts` spreads the ranks over that many workers' hosts, gathered through the queue.
    """

    world_size: Annotated[int, Field(ge=1, le=WORLD_SIZE_MAX)] = 1
    strategy: Literal[STRATEGIES] = "allreduce"  # type: ignore[valid-type]
    tau: Annotated[int, Field(ge=1, le=1_000_000)] = 10
    alpha: Annotated[float, Field(gt=0, le=1)] | None = None
    asynchronous: bool = False
    backend: Literal[BACKENDS] = "auto"  # type: ignore[valid-type]
    timeout: Annotated[float, Field(gt=0, le=24 * 3600)] = 300.0
    #: Hosts the ranks spread over, `world_size / hosts` each: the worker that claims the
    #: trial runs the first share and gathers a worker for each other share through the
    #: queue (`workers.gang`), waiting at most `gather_timeout` seconds for them.
    hosts: Annotated[int, Field(ge=1, le=WORLD_SIZE_MAX)] = 1
    gather_timeout: Annotated[float, Field(gt=0, le=3600)] = 120.0

    @model_validator(mode="after")
    def _rules(self) -> ParallelConfig:
        if self.world_size % self.hosts:
            raise ValueError(
                f"hosts must divide world_size (each host runs world_size / hosts ranks), "
                f"got world_size={self.world_size}, hosts={self.hosts}"
            )
        if self.hosts > 1 and self.asynchronous:
            raise ValueError(
                "asynchronous easgd runs its ranks on one host; set hosts: 1 or asynchronous: false"
            )
        if self.asynchronous and self.strategy != "easgd":
            raise ValueError(
                "asynchronous is only for strategy easgd, but strategy is "
                f"{self.strategy!r}; set asynchronous: false"
            )
        if (
            self.strategy == "easgd"
            and not self.asynchronous
            and self.alpha is not None
            and self.alpha * self.world_size > 1
        ):
            raise ValueError(
                f"alpha * world_size must be <= 1 for synchronous easgd (the centre moves by "
                f"alpha times the sum of {self.world_size} differences), got alpha={self.alpha}"
            )
        return self

    @property
    def elastic_alpha(self) -> float:
        """`alpha`, or its default 0.9 / world_size."""
        return self.alpha if self.alpha is not None else 0.9 / self.world_size

    @property
    def enabled(self) -> bool:
        """Whether the trial trains on more than one process."""
        return self.world_size > 1


class ExecutionConfig(_Section):
    """Where and how a trial runs: THEANO_FLAGS' `device` and `floatX`, a time limit, fusing
    and data-parallel training (`parallel`)."""

    device: Annotated[str, AfterValidator(_check_device)] = "auto"
    dtype: Literal[DTYPES] = "float32"  # type: ignore[valid-type]
    time_limit: Annotated[float, Field(gt=0, le=MAX_TIME_LIMIT)] = 3600.0
    # Fused trials (`scheduler.grouping`): off, auto (group size from memory) or at most K.
    fuse: Annotated[str | int, BeforeValidator(_check_fuse)] = "auto"
    parallel: ParallelConfig = ParallelConfig()

    @model_validator(mode="after")
    def _parallel_fits_device(self) -> ExecutionConfig:
        if self.parallel.backend == "nccl" and self.device == "cpu":
            raise ValueError(
                "parallel.backend nccl needs a CUDA device, but device is cpu; use gloo or auto"
            )
        if self.parallel.world_size > 1 and self.device.startswith("cuda:"):
            raise ValueError(
                f"device {self.device} pins one GPU, but a parallel trial takes one GPU per "
                f"rank (parallel.world_size {self.parallel.world_size}); use cuda or auto"
            )
        return self


SECTIONS: dict[str, type[_Section]] = {
    "dataset": DatasetConfig,
    "model": ModelConfig,
    "training": TrainingConfig,
    "execution": ExecutionConfig,
}


class TrialConfig(BaseModel):
    """The full resolved configuration of one trial."""

    model_config = ConfigDict(extra="forbid")

    dataset: DatasetConfig
    model: ModelConfig = ModelConfig()
    training: TrainingConfig = TrainingConfig()
    execution: ExecutionConfig = ExecutionConfig()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialConfig:
        return cls.model_validate(data)
