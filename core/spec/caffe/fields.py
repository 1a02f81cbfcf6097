"""The fields of Caffe's messages that Sweepstack reads, with caffe.proto's types and defaults.

Each schema maps a field name to a `FieldSpec`: its kind (``int``, ``uint``, ``float``,
``bool``, ``enum``, ``str``, ``msg``), Caffe's default, whether it repeats, and, for a field
Caffe has but Sweepstack does not honour, either `refused` (the reason, said in the error)
or `ignored` (the reason it has no effect here, e.g. ``engine`` or an LMDB ``source``).

`check(message, schema, where)` lists what breaks the schema (unknown field, wrong kind,
a singular field written twice, a refused field); `resolve(message, schema)` gives the
values with Caffe's defaults filled in. Nothing here knows about layers' meaning:
`core.spec.caffe.layers` does.

A few integers carry a ceiling of their own (`FieldSpec.most`), whatever the server's
settings, because one value alone asks for memory no trial can have: a data layer's
``batch_size`` (`MAX_BATCH_SIZE`, an Input's first ``shape.dim`` too:
`core.spec.caffe.data`), a window's ``pad``
(`MAX_PAD`) and a convolution's ``dilation`` (`MAX_DILATION`). Blob sizes as a whole are the
server's ceilings (`core.spec.caffe.ceilings`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.spec.caffe.prototxt import Ident, Message

#: The largest batch a data layer (``batch_size``, an Input's ``shape.dim``) may ask for.
MAX_BATCH_SIZE = 65_536
#: The largest padding of a convolution or pooling window, per side (FCN pads by 100).
MAX_PAD = 1024
#: The largest dilation of a convolution (DeepLab's largest is 24).
MAX_DILATION = 1024


@dataclass(frozen=True)
class FieldSpec:
    """One field of a Caffe message: kind, default, repetition, and whether it is honoured."""

    kind: str
    default: Any = None
    repeated: bool = False
    choices: tuple[str, ...] = ()
    schema: str | None = None  # the nested message's schema name, for kind "msg"
    refused: str | None = None
    ignored: str | None = None
    most: int | None = None  # the largest integer accepted (module docstring)


def _f(kind: str, default: Any = None, **kw: Any) -> FieldSpec:
    return FieldSpec(kind, default, **kw)


def _rep(kind: str, **kw: Any) -> FieldSpec:
    return FieldSpec(kind, None, repeated=True, **kw)


def _enum(default: str | None, *choices: str, **kw: Any) -> FieldSpec:
    return FieldSpec("enum", default, choices=choices, **kw)


def _msg(schema: str, **kw: Any) -> FieldSpec:
    return FieldSpec("msg", None, schema=schema, **kw)


#: Caffe's filler types, all supported (`workers.training.caffe.fillers`).
FILLER_TYPES = (
    "constant",
    "gaussian",
    "positive_unitball",
    "uniform",
    "xavier",
    "msra",
    "bilinear",
)
_ENGINE = _enum("DEFAULT", "DEFAULT", "CAFFE", "CUDNN", ignored="the engine is PyTorch's")
_DEPRECATED_TRANSFORM = "is deprecated in Caffe; write it in transform_param"

#: Every schema by name; a LayerParameter's own fields are in `core.spec.caffe.layers`.
SCHEMAS: dict[str, dict[str, FieldSpec]] = {
    "FillerParameter": {
        "type": FieldSpec("str", "constant", choices=FILLER_TYPES),
        "value": _f("float", 0.0),
        "min": _f("float", 0.0),
        "max": _f("float", 1.0),
        "mean": _f("float", 0.0),
        "std": _f("float", 1.0),
        "sparse": _f("int", -1),
        "variance_norm": _enum("FAN_IN", "FAN_IN", "FAN_OUT", "AVERAGE"),
    },
    "ParamSpec": {
        "name": _f("str", refused="sharing parameters between layers by name is not supported"),
        "share_mode": _enum(None, "STRICT", "PERMISSIVE", refused="parameter sharing"),
        "lr_mult": _f("float", 1.0),
        "decay_mult": _f("float", 1.0),
    },
    "NetStateRule": {
        "phase": _enum(None, "TRAIN", "TEST"),
        "min_level": _f("int"),
        "max_level": _f("int"),
        "stage": _rep("str"),
        "not_stage": _rep("str"),
    },
    "NetState": {
        "phase": _enum("TEST", "TRAIN", "TEST", ignored="the phase is the net's role"),
        "level": _f("int", 0),
        "stage": _rep("str"),
    },
    "BlobShape": {"dim": _rep("int")},
    "TransformationParameter": {
        "scale": _f("float", 1.0),
        "mirror": _f("bool", False),
        "crop_size": _f("uint", 0),
        "mean_value": _rep("float"),
        # refused with the file's channel means (`core.spec.caffe.mean_file`), at the limits
        "mean_file": _f("str"),
        "force_color": _f("bool", False, refused="images keep their own channels"),
        "force_gray": _f("bool", False, refused="images keep their own channels"),
    },
    "LossParameter": {
        "ignore_label": _f("int"),
        "normalization": _enum("VALID", "FULL", "VALID", "BATCH_SIZE", "NONE"),
        "normalize": _f("bool"),
    },
    "DataParameter": {
        "source": _f("str", ignored="the spec's dataset replaces the LMDB/LevelDB source"),
        "batch_size": _f("uint", most=MAX_BATCH_SIZE),
        "rand_skip": _f("uint", 0, ignored="the spec's dataset is read from its start"),
        "backend": _enum("LEVELDB", "LEVELDB", "LMDB", ignored="the spec's dataset is used"),
        "prefetch": _f("uint", 4, ignored="batches come from memory"),
        "force_encoded_color": _f("bool", False, ignored="images keep their own channels"),
        "scale": _f("float", refused=f"scale {_DEPRECATED_TRANSFORM}"),
        "mean_file": _f("str", refused=f"mean_file {_DEPRECATED_TRANSFORM}"),
        "crop_size": _f("uint", refused=f"crop_size {_DEPRECATED_TRANSFORM}"),
        "mirror": _f("bool", refused=f"mirror {_DEPRECATED_TRANSFORM}"),
    },
    "ImageDataParameter": {
        "source": _f("str", ignored="the spec's dataset replaces the image list"),
        "batch_size": _f("uint", 1, most=MAX_BATCH_SIZE),
        "rand_skip": _f("uint", 0, ignored="the spec's dataset is read from its start"),
        "shuffle": _f("bool", False, ignored="the spec's dataset decides the order"),
        "new_height": _f("uint", 0),
        "new_width": _f("uint", 0),
        "is_color": _f("bool", True, ignored="images keep their own channels"),
        "root_folder": _f("str", "", ignored="the spec's dataset replaces the image list"),
        "scale": _f("float", refused=f"scale {_DEPRECATED_TRANSFORM}"),
        "mean_file": _f("str", refused=f"mean_file {_DEPRECATED_TRANSFORM}"),
        "crop_size": _f("uint", refused=f"crop_size {_DEPRECATED_TRANSFORM}"),
        "mirror": _f("bool", refused=f"mirror {_DEPRECATED_TRANSFORM}"),
    },
    "MemoryDataParameter": {
        "batch_size": _f("uint", most=MAX_BATCH_SIZE),
        "channels": _f("uint"),
        "height": _f("uint"),
        "width": _f("uint"),
    },
    "HDF5DataParameter": {
        "source": _f("str", ignored="the spec's dataset replaces the HDF5 files"),
        "batch_size": _f("uint", most=MAX_BATCH_SIZE),
        "shuffle": _f("bool", False, ignored="the spec's dataset decides the order"),
    },
    "InputParameter": {"shape": _rep("msg", schema="BlobShape")},
    "ConvolutionParameter": {
        "num_output": _f("uint"),
        "bias_term": _f("bool", True),
        "pad": _rep("uint", most=MAX_PAD),
        "kernel_size": _rep("uint"),
        "stride": _rep("uint"),
        "dilation": _rep("uint", most=MAX_DILATION),
        "pad_h": _f("uint", most=MAX_PAD),
        "pad_w": _f("uint", most=MAX_PAD),
        "kernel_h": _f("uint"),
        "kernel_w": _f("uint"),
        "stride_h": _f("uint"),
        "stride_w": _f("uint"),
        "group": _f("uint", 1),
        "weight_filler": _msg("FillerParameter"),
        "bias_filler": _msg("FillerParameter"),
        "engine": _ENGINE,
        "axis": _f("int", 1),
        "force_nd_im2col": _f("bool", False, ignored="PyTorch chooses its own algorithm"),
    },
    "PoolingParameter": {
        "pool": _enum("MAX", "MAX", "AVE", "STOCHASTIC"),
        "pad": _f("uint", 0, most=MAX_PAD),
        "pad_h": _f("uint", most=MAX_PAD),
        "pad_w": _f("uint", most=MAX_PAD),
        "kernel_size": _f("uint"),
        "kernel_h": _f("uint"),
        "kernel_w": _f("uint"),
        "stride": _f("uint", 1),
        "stride_h": _f("uint"),
        "stride_w": _f("uint"),
        "engine": _ENGINE,
        "global_pooling": _f("bool", False),
        "round_mode": _enum("CEIL", "CEIL", "FLOOR"),
    },
    "InnerProductParameter": {
        "num_output": _f("uint"),
        "bias_term": _f("bool", True),
        "weight_filler": _msg("FillerParameter"),
        "bias_filler": _msg("FillerParameter"),
        "axis": _f("int", 1),
        "transpose": _f("bool", False),
    },
    "ReLUParameter": {"negative_slope": _f("float", 0.0), "engine": _ENGINE},
    "PReLUParameter": {"filler": _msg("FillerParameter"), "channel_shared": _f("bool", False)},
    "ELUParameter": {"alpha": _f("float", 1.0)},
    "SigmoidParameter": {"engine": _ENGINE},
    "TanHParameter": {"engine": _ENGINE},
    "PowerParameter": {
        "power": _f("float", 1.0),
        "scale": _f("float", 1.0),
        "shift": _f("float", 0.0),
    },
    "ExpParameter": {
        "base": _f("float", -1.0),
        "scale": _f("float", 1.0),
        "shift": _f("float", 0.0),
    },
    "LogParameter": {
        "base": _f("float", -1.0),
        "scale": _f("float", 1.0),
        "shift": _f("float", 0.0),
    },
    "DropoutParameter": {"dropout_ratio": _f("float", 0.5)},
    "BatchNormParameter": {
        "use_global_stats": _f("bool"),
        "moving_average_fraction": _f("float", 0.999),
        "eps": _f("float", 1e-5),
    },
    "ScaleParameter": {
        "axis": _f("int", 1),
        "num_axes": _f("int", 1),
        "filler": _msg("FillerParameter"),
        "bias_term": _f("bool", False),
        "bias_filler": _msg("FillerParameter"),
    },
    "LRNParameter": {
        "local_size": _f("uint", 5),
        "alpha": _f("float", 1.0),
        "beta": _f("float", 0.75),
        "norm_region": _enum("ACROSS_CHANNELS", "ACROSS_CHANNELS", "WITHIN_CHANNEL"),
        "k": _f("float", 1.0),
        "engine": _ENGINE,
    },
    "FlattenParameter": {"axis": _f("int", 1), "end_axis": _f("int", -1)},
    "ReshapeParameter": {
        "shape": _msg("BlobShape"),
        "axis": _f("int", 0),
        "num_axes": _f("int", -1),
    },
    "ConcatParameter": {"axis": _f("int", 1), "concat_dim": _f("uint")},
    "SliceParameter": {
        "axis": _f("int", 1),
        "slice_point": _rep("uint"),
        "slice_dim": _f("uint"),
    },
    "EltwiseParameter": {
        "operation": _enum("SUM", "PROD", "SUM", "MAX"),
        "coeff": _rep("float"),
        "stable_prod_grad": _f("bool", True, ignored="autograd differentiates the product"),
    },
    "SoftmaxParameter": {"engine": _ENGINE, "axis": _f("int", 1)},
    "AccuracyParameter": {
        "top_k": _f("uint", 1),
        "axis": _f("int", 1),
        "ignore_label": _f("int"),
    },
}

_KIND_WORDS = {
    "int": "an integer",
    "uint": "a non-negative integer",
    "float": "a number",
    "bool": "true or false",
    "str": "a string",
    "msg": "a message { ... }",
}


def _kind_ok(spec: FieldSpec, value: object) -> bool:
    if spec.kind == "msg":
        return isinstance(value, Message)
    if spec.kind == "bool":
        return isinstance(value, bool)
    if spec.kind in ("int", "uint"):
        ok = isinstance(value, int) and not isinstance(value, bool)
        return ok and (spec.kind == "int" or value >= 0)  # type: ignore[operator]
    if spec.kind == "float":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if spec.kind == "enum":
        return (isinstance(value, Ident) and value in spec.choices) or (
            isinstance(value, int)
            and not isinstance(value, bool)
            and 0 <= value < len(spec.choices)
        )
    # str: quoted (as protobuf wants) or bare
    return isinstance(value, str) and (not spec.choices or value in spec.choices)


def _expected(spec: FieldSpec) -> str:
    if spec.choices:
        return "one of " + ", ".join(spec.choices)
    return _KIND_WORDS[spec.kind]


def check(message: Message, schema: str, where: str) -> list[str]:
    """What in `message` breaks `schema`, each naming the field as `where.field`."""
    fields = SCHEMAS[schema]
    problems: list[str] = []
    for name in message.names():
        path = f"{where}.{name}" if where else name
        spec = fields.get(name)
        if spec is None:
            problems.append(
                f"{path} is not a field of Caffe's {schema}; its fields: {', '.join(fields)}"
            )
            continue
        if spec.refused:
            problems.append(f"{path} is not supported: {spec.refused}")
            continue
        values = message.getall(name)
        if not spec.repeated and len(values) > 1:
            problems.append(f"{path} is written {len(values)} times; it takes one value")
        for value in values:
            if not _kind_ok(spec, value):
                quoted = (
                    spec.kind == "enum" and not isinstance(value, Ident) and value in spec.choices
                )
                hint = " (write it unquoted)" if quoted else ""
                problems.append(f"{path} must be {_expected(spec)}, not {value!r}{hint}")
            elif spec.most is not None and value > spec.most:  # type: ignore[operator]
                problems.append(f"{path} must be <= {spec.most:,}, got {value:,}")
            elif spec.kind == "msg" and spec.schema:
                problems.extend(check(value, spec.schema, path))  # type: ignore[arg-type]
    return problems


def _plain(spec: FieldSpec, value: Any) -> Any:
    if spec.kind == "enum" and not isinstance(value, str):
        return spec.choices[value]
    if spec.kind == "enum":
        return str(value)
    if spec.kind == "float":
        return float(value)
    return value


def resolve(message: Message | None, schema: str) -> dict[str, Any]:
    """The message's values with Caffe's defaults: a repeated field is a list, an absent
    optional field without a default is None, a nested message stays a `Message`."""
    out: dict[str, Any] = {}
    for name, spec in SCHEMAS[schema].items():
        values = message.getall(name) if message is not None else []
        if spec.repeated:
            out[name] = [_plain(spec, v) for v in values]
        elif values:
            out[name] = _plain(spec, values[-1])
        else:
            out[name] = spec.default
    return out


def given(message: Message | None, name: str) -> bool:
    """Whether a field was written (Caffe's ``has_*``), as opposed to left at its default."""
    return message is not None and message.has(name)
