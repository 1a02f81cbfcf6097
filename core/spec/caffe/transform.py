"""A data layer's ``transform_param`` (Caffe's DataTransformer settings), read and checked.

`parse_transform` turns a layer's ``transform_param`` message into a `TransformParam`, or
raises `SpecError` with ``Problem("caffe.net", "layer 'NAME' (TYPE): transform_param...")``
as the layer graph reports its problems. Supported, with Caffe's defaults: ``scale`` (1),
``mirror`` (false), ``crop_size`` (0: none), ``mean_value`` (none: one value for every
channel, or one per channel). Refused: ``mean_file`` (a worker reads no binaryproto
files; give ``mean_value``), ``force_color``/``force_gray`` true (a data set's channels are
its own). The worker applies it (`workers.training.caffe.images.Transform`).

`missing_dataset_message` is the error for a data layer whose LMDB/LevelDB (or HDF5, image
list) source is all a trial has: Sweepstack reads none of those; the spec's ``dataset``
takes their place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from core.errors import Problem, SpecError
from core.spec.caffe.field_reader import FieldReader
from core.spec.caffe.prototxt import Message

#: The largest crop a transform may ask for (pixels per side).
MAX_CROP_SIZE = 4096

_FIELDS: dict[str, tuple[str, bool]] = {
    "scale": ("float", False),
    "mirror": ("bool", False),
    "crop_size": ("int", False),
    "mean_file": ("str", False),
    "mean_value": ("float", True),
    "force_color": ("bool", False),
    "force_gray": ("bool", False),
}
_REFUSED = {
    "mean_file": "is not supported (a worker reads no binaryproto files); give the mean "
    "per channel as mean_value",
}
# Where a data layer keeps its source, by the layer's parameter message.
_SOURCES = (
    "data_param",
    "image_data_param",
    "hdf5_data_param",
    "window_data_param",
)


@dataclass(frozen=True)
class TransformParam:
    """What a data layer does to each image: crop, mirror, subtract the mean, scale.

    Caffe's order per pixel: ``(pixel - mean_value[c]) * scale``, taken at the crop's
    offset (random in TRAIN, centred in TEST), mirrored at random when `mirror` is set.
    """

    scale: float = 1.0
    mirror: bool = False
    crop_size: int = 0
    mean_value: tuple[float, ...] = ()

    @property
    def is_identity(self) -> bool:
        return self == TransformParam()

    def output_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """One sample's (C, H, W) after the crop; raises ValueError when it cannot apply."""
        if self.mean_value and len(self.mean_value) not in (1, shape[0]):
            raise ValueError(
                f"transform_param.mean_value gives {len(self.mean_value)} values for "
                f"{shape[0]} channels; give one, or one per channel"
            )
        if not self.crop_size:
            return tuple(shape)
        if len(shape) != 3 or self.crop_size > min(shape[1], shape[2]):
            raise ValueError(
                f"transform_param.crop_size {self.crop_size} does not fit images of shape "
                f"{tuple(shape)} (C, H, W); lower it or resize the data set"
            )
        return (shape[0], self.crop_size, self.crop_size)


def parse_transform(
    msg: Message | None, layer: str, layer_type: str, source: str = "net"
) -> TransformParam:
    """The `TransformParam` of a data layer's ``transform_param`` (None: the identity);
    `source` names the net's file in errors."""
    if msg is None:
        return TransformParam()
    reader = FieldReader(msg, source, "transform_param")
    reader.check_names(_FIELDS, _REFUSED, "Caffe's TransformationParameter")
    values: dict[str, object] = {}
    scale = reader.number("scale")
    if scale is not None:
        values["scale"] = scale
    mirror = reader.flag("mirror")
    if mirror is not None:
        values["mirror"] = mirror
    crop = reader.integer("crop_size")
    if crop is not None:
        values["crop_size"] = crop
        if not 0 <= crop <= MAX_CROP_SIZE:
            reader.fail("crop_size", f"must be in [0, {MAX_CROP_SIZE}], got {crop}")
    means = []
    for index, item in enumerate(f for f in msg.fields if f.name == "mean_value"):
        value = item.value
        if isinstance(value, bool) or not isinstance(value, int | float):
            reader.fail("mean_value", f"must be numbers, got {value!r} at position {index + 1}")
        else:
            means.append(float(value))
    values["mean_value"] = tuple(means)
    for name in ("force_color", "force_gray"):
        if reader.flag(name):
            reader.fail(name, "is not supported: a data set's images keep their own channels")
    if scale is not None and not math.isfinite(scale):
        reader.fail("scale", f"must be finite, got {scale}")
    if reader.problems:
        raise SpecError(
            [
                Problem("caffe.net", f"layer '{layer}' ({layer_type}): {p.path}: {p.message}")
                for p in reader.problems
            ]
        )
    return TransformParam(**values)  # type: ignore[arg-type]


def missing_dataset_message(layer: Message) -> str:
    """Why a data layer cannot run without the spec's ``dataset``, naming its source."""
    name, kind = layer.get("name", "?"), layer.get("type", "?")
    source = ""
    for param in _SOURCES:
        block = layer.get(param)
        if isinstance(block, Message) and block.has("source"):
            # data_param's backend is LEVELDB unless it says LMDB (caffe.proto's default).
            backend = block.get("backend", "LEVELDB") if param == "data_param" else ""
            what = f"{backend} source" if backend else "source"
            source = f" reads {what} {str(block.get('source'))!r}, which Sweepstack does not read;"
            break
    return (
        f"layer '{name}' ({kind}):{source} no dataset is given for it; give the spec a "
        "dataset (dataset: {name: digits}, or dataset.path: an .npz file or a folder of "
        "images by class), which takes the place of the layer's source"
    )
