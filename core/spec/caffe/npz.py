"""An .npz data set's array shapes, read from the ``.npy`` headers inside its zip.

Nothing is decoded: `sweepstack validate` builds a Caffe net on the images' shape and checks
its evaluations against the rows of the file in a few reads, and a worker checks the sizes
against its limits before it loads the arrays (`workers.training.caffe.image_files`).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np


def npz_shape(path: Path, key: str) -> tuple[int, ...] | None:
    """The shape of array `key` in an .npz, read from its header (nothing decoded), or None
    when the file holds no such array. Raises OSError, ValueError or BadZipFile for a file
    that is no readable .npz."""
    with zipfile.ZipFile(path) as archive:
        name = f"{key}.npy"
        if name not in archive.namelist():
            return None
        with archive.open(name) as handle:
            version = np.lib.format.read_magic(handle)
            read = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, _, _ = read(handle)
    return tuple(shape)
