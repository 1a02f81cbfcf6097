"""Where the spec's data set plugs into a Caffe net: the data layers and their shapes.

A net has one data layer per phase (Data, ImageData, MemoryData, HDF5Data or Input). Its
first top carries the images, its second (if any) the labels; LMDB, LevelDB, image-list and
HDF5 sources are not read: the spec's ``dataset`` replaces them. The batch size comes from
the layer (``data_param.batch_size`` ..., Input's ``shape.dim[0]``). ``transform_param``'s
``crop_size`` shrinks the sample shape here; ``scale``, ``mean_value`` and ``mirror`` are
applied by the data pipeline (`workers.training.caffe.images`) from `DataInput.transform`.
What a layer declares about its samples (MemoryData's channels/height/width, ImageData's
new_height/new_width, Input's shape) must agree with the data set's samples, or the error
says which resize to set.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.spec.caffe.fields import MAX_BATCH_SIZE
from core.spec.caffe.prototxt import Message
from core.spec.caffe.shapes import Ctx, LayerError, Shape, Shaped, dims

_BATCH_FIELD = {
    "Data": "data_param",
    "ImageData": "image_data_param",
    "MemoryData": "memory_data_param",
    "HDF5Data": "hdf5_data_param",
}


@dataclass(frozen=True)
class DataInput:
    """The data layer of one phase: its tops (images, then labels if any), batch, transform."""

    layer: str
    type: str
    tops: tuple[str, ...]
    batch_size: int
    transform: Message | None
    #: one sample's shape as the net sees it (after crop_size), channels first.
    sample_shape: Shape = ()

    @property
    def data_top(self) -> str:
        return self.tops[0]

    @property
    def label_top(self) -> str | None:
        return self.tops[1] if len(self.tops) > 1 else None


def _cropped(ctx: Ctx, sample: Shape) -> Shape:
    transform = ctx.params.get("transform_param")
    if transform is None:
        return sample
    crop = transform["crop_size"]
    means = transform["mean_value"]
    if (transform["mirror"] or crop) and len(sample) != 3:
        raise LayerError(
            f"transform_param crop_size/mirror need image samples (C, H, W); the data set's "
            f"samples are {dims(sample)}"
        )
    if means and len(means) != 1 and (not sample or len(means) != sample[0]):
        channels = sample[0] if sample else 1
        raise LayerError(
            f"transform_param.mean_value has {len(means)} values; give one, or one per "
            f"channel ({channels})"
        )
    if not crop:
        return sample
    if crop > sample[1] or crop > sample[2]:
        raise LayerError(
            f"transform_param.crop_size {crop} is larger than the data set's {sample[1]}x"
            f"{sample[2]} images; lower crop_size or resize the data set (caffe.resize)"
        )
    return (sample[0], crop, crop)


def _declared(ctx: Ctx, declared: Shape, sample: Shape, what: str) -> None:
    if tuple(declared) != tuple(sample):
        hint = (
            f"set caffe.resize: [{declared[-2]}, {declared[-1]}]"
            if len(declared) == 3 and len(sample) == 3 and declared[0] == sample[0]
            else f"change {what}"
        )
        raise LayerError(
            f"{what} declares samples of {dims(declared)} but the data set gives "
            f"{dims(sample)}; {hint}"
        )


def data_shapes(ctx: Ctx) -> Shaped:
    """The data layer's top shapes: (batch, *sample) for the images, (batch,) for labels."""
    sample = tuple(ctx.input_shape)
    if ctx.type == "Input":
        shapes = ctx.p("input_param")["shape"]
        if len(shapes) not in (1, ctx.tops):
            raise LayerError("input_param.shape must be given once, or once per top")
        if not shapes:
            raise LayerError("input_param.shape is required: give shape { dim: N dim: C ... }")
        dims = tuple(int(d) for d in shapes[0].getall("dim"))
        if not dims or dims[0] < 1:
            raise LayerError("input_param.shape's first dim (the batch size) must be at least 1")
        if dims[0] > MAX_BATCH_SIZE:
            raise LayerError(
                f"input_param.shape's first dim (the batch size) must be <= {MAX_BATCH_SIZE:,}, "
                f"got {dims[0]:,}"
            )
        _declared(ctx, dims[1:], sample, "input_param.shape")
        batch = dims[0]
        tops: list[Shape] = [dims]
        if ctx.tops == 2:
            label = tuple(int(d) for d in shapes[-1].getall("dim")) if len(shapes) == 2 else ()
            tops.append(label if len(shapes) == 2 else (batch,))
        return Shaped(tops)
    p = ctx.p(_BATCH_FIELD[ctx.type])
    batch = p["batch_size"] or 0
    if batch < 1:
        raise LayerError(f"{_BATCH_FIELD[ctx.type]}.batch_size is required (at least 1)")
    seen = _cropped(ctx, sample)
    if ctx.type == "MemoryData":
        declared = (p["channels"] or 0, p["height"] or 0, p["width"] or 0)
        if min(declared) < 1:
            raise LayerError("memory_data_param needs channels, height and width (at least 1)")
        _declared(ctx, declared, seen, "memory_data_param")
    if ctx.type == "ImageData" and (p["new_height"] or p["new_width"]):
        if not (p["new_height"] and p["new_width"]):
            raise LayerError("image_data_param needs new_height and new_width together")
        if len(sample) != 3:
            raise LayerError(f"ImageData needs image samples (C, H, W), not {dims(sample)}")
        _declared(
            ctx,
            (sample[0], p["new_height"], p["new_width"]),
            sample,
            "image_data_param new_height/new_width",
        )
    return Shaped([(batch, *seen), (batch,)][: ctx.tops])


def batch_size(ctx: Ctx) -> int:
    """The batch size a data layer declares (validated by `data_shapes` first)."""
    if ctx.type == "Input":
        return int(ctx.p("input_param")["shape"][0].getall("dim")[0])
    return int(ctx.p(_BATCH_FIELD[ctx.type])["batch_size"])
