"""A data layer's ``transform_param { mean_file }``: refused, with the ``mean_value`` to give.

A worker reads no ``.binaryproto`` file (its datasets folder may be another host's), so a
mean file is refused; where the file lies in this host's datasets folder
(``SWEEPSTACK_DATASETS_DIR``, the same rules as ``dataset.path``: relative to it or inside
it, symlinks followed), its per-channel means are read here and the refusal gives them as
the ``mean_value`` lines to write instead (Caffe subtracts a per-pixel mean image; the
channel means are what ``mean_value`` takes, as Caffe's own examples moved to).

`blob_means` reads a BlobProto (caffe.proto: ``num`` 1, ``channels`` 2, ``height`` 3,
``width`` 4, ``data`` 5 packed floats, ``shape`` 7 with packed ``dim`` 1, ``double_data`` 8)
with a small protobuf wire-format reader, no protobuf dependency.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from core.errors import Problem
from core.spec.caffe.prototxt import Message

#: The largest mean file read (a 3 x 256 x 256 ImageNet mean is 786 kB).
MAX_MEAN_FILE_BYTES = 64 * 1024 * 1024


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _fields(buf: bytes) -> list[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of each field of one message."""
    out: list[tuple[int, int, int | bytes]] = []
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            out.append((number, wire, value))
        elif wire == 2:
            size, pos = _varint(buf, pos)
            if pos + size > len(buf):
                raise ValueError("truncated field")
            out.append((number, wire, buf[pos : pos + size]))
            pos += size
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            out.append((number, wire, buf[pos : pos + size]))
            pos += size
        else:
            raise ValueError(f"wire type {wire} is not a BlobProto's")
    return out


def blob_means(data: bytes) -> list[float]:
    """The per-channel means of a BlobProto's values (its channel axis: the second of four
    dims, the first of three). Raises ValueError for bytes that are no such blob."""
    dims: list[int] = []
    legacy: dict[int, int] = {}
    values: list[float] = []
    for number, wire, value in _fields(data):
        if number in (1, 2, 3, 4) and wire == 0:
            legacy[number] = int(value)  # type: ignore[arg-type]
        elif number == 7 and isinstance(value, bytes):
            for sub, sub_wire, dim in _fields(value):
                if sub == 1 and sub_wire == 2 and isinstance(dim, bytes):
                    pos = 0
                    while pos < len(dim):
                        item, pos = _varint(dim, pos)
                        dims.append(item)
                elif sub == 1 and sub_wire == 0:
                    dims.append(int(dim))  # type: ignore[arg-type]
        elif number in (5, 8) and isinstance(value, bytes):
            fmt = "f" if number == 5 else "d"
            if wire == 2:
                values += struct.unpack(f"<{len(value) // struct.calcsize(fmt)}{fmt}", value)
            else:
                values += struct.unpack(f"<{fmt}", value)
    if not dims:
        dims = [legacy.get(n, 1) for n in (1, 2, 3, 4)]
    channels = dims[1] if len(dims) == 4 else dims[0] if len(dims) == 3 else 1
    total = 1
    for dim in dims:
        total *= dim
    if not values or total != len(values) or channels < 1:
        raise ValueError(f"a blob of shape {dims} with {len(values)} values")
    per = len(values) // channels
    return [sum(values[c * per : (c + 1) * per]) / per for c in range(channels)]


def _inside(value: str, root: Path) -> Path | None:
    """`value` as a file in `root` (relative to it or absolute inside it), or None."""
    if value.startswith("~") or ".." in Path(value).parts:
        return None
    real_root = Path(os.path.realpath(root))
    real = Path(os.path.realpath(Path(value) if Path(value).is_absolute() else root / value))
    return real if real.is_relative_to(real_root) and real.is_file() else None


def mean_file_problems(net: Message, datasets: Path | None) -> list[Problem]:
    """One problem per data layer with ``transform_param.mean_file``, giving the file's
    per-channel means as ``mean_value`` where it is readable in `datasets`."""
    problems = []
    for layer in net.getall("layer"):
        transform = layer.get("transform_param") if isinstance(layer, Message) else None
        if not isinstance(transform, Message) or not transform.has("mean_file"):
            continue
        value = str(transform.get("mean_file"))
        rule = (
            "is not read (a worker reads no .binaryproto file); give the mean per channel as "
            "transform_param { mean_value: ... }"
        )
        real = _inside(value, datasets) if datasets is not None else None
        means = None
        if real is not None and real.stat().st_size <= MAX_MEAN_FILE_BYTES:
            try:
                means = blob_means(real.read_bytes())
            except (OSError, ValueError):
                means = None
        if means is not None:
            given = " ".join(f"mean_value: {round(m, 3):g}" for m in means)
            rule += f": {given} (the channel means of {value})"
        else:
            rule += (
                f"; with {value!r} in the datasets folder (SWEEPSTACK_DATASETS_DIR), "
                "validate prints them"
            )
        path = f"caffe.net.layer[{layer.get('name')}].transform_param.mean_file"
        problems.append(Problem(path, f"{rule}, got {value!r}"))
    return problems
