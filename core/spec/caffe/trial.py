"""The resolved config of one Caffe trial, as the store keeps it and a worker trains it.

`core.spec.caffe.spec` writes it: the net's and the solver's texts with the trial's values set
(``caffe.net_text``, ``caffe.solver_text``), the file names errors show, the optional
resize, and the built-in settings that apply (`core.spec.caffe.spec.APPLIES`). The worker
validates it again before it trains (`workers.training.caffe.loop`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from core.spec.config import DatasetConfig, ExecutionConfig, check_image_path

#: ``dataset.path`` of a Caffe net: an .npz file of images or a folder of images by class.
ImagePath = Annotated[str | None, AfterValidator(check_image_path)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CaffeTexts(_Section):
    """``caffe``: the net and the solver, as prototxt texts."""

    net_text: str
    solver_text: str
    net_source: str = "caffe.net_text"
    solver_source: str = "caffe.solver_text"
    resize: tuple[Annotated[int, Field(ge=1)], Annotated[int, Field(ge=1)]] | None = None


class CaffeDataset(DatasetConfig):
    """``dataset`` of a Caffe trial: digits, an .npz file of images, or a folder of PNG/JPEG
    files by class (`core.spec.caffe.image_folder`) in the datasets folder."""

    path: ImagePath = None


class CaffeTraining(_Section):
    """``training`` of a Caffe trial: only its seed (the solver says the rest)."""

    seed: Annotated[int, Field(ge=0)] | None = None


class CaffeExecution(_Section):
    """``execution`` of a Caffe trial: where it runs, how long it may, its float width."""

    device: str = ExecutionConfig.model_fields["device"].default
    time_limit: float = ExecutionConfig.model_fields["time_limit"].default
    dtype: Literal["float32", "float64"] = "float32"


class CaffeTrialConfig(_Section):
    """One Caffe trial's whole config."""

    caffe: CaffeTexts
    dataset: CaffeDataset
    training: CaffeTraining = CaffeTraining()
    execution: CaffeExecution = CaffeExecution()
