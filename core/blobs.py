"""Where an artifact's bytes lie: a `Blobs` for each kind of artifact root.

The store keeps what it knows of every artifact (its trial, kind, size, checksum) in its
``artifacts`` collection (`core.store.artifacts`); the bytes go to one `Blobs`:

- MongoDB's GridFS by default (`core.store.gridfs_blobs`): the embedded store of
  `sweepstack run` and the compose deployment keep models with no other service;
- a folder (``SWEEPSTACK_ARTIFACT_ROOT=/srv/sweepstack/artifacts`` or ``file:///…``):
  `FolderBlobs`, for large models on a disk every worker mounts;
- an S3-compatible bucket (``s3://bucket/prefix``, with ``SWEEPSTACK_S3_ENDPOINT_URL`` for
  MinIO, Ceph or the like): `S3Blobs`, through boto3 (an optional extra).

A blob is named by a key the store makes (``<sweep>/<trial>/<kind>-<name>-<random>``, only
letters, digits, ``-``, ``_``, ``.`` and ``/``); `FolderBlobs` refuses any key whose path
would leave its root, symlinks included.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from core.errors import ConfigError, InvalidQuery

#: What a blob key may hold: `core.store.artifacts` makes them from checked ids.
KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-/]{0,400}$")
CHUNK_BYTES = 1 << 20


class Blobs(Protocol):
    """Bytes by key: written whole, read as a stream, deleted."""

    #: What `core.store.artifacts` records as the blob's place (``gridfs``, ``folder``, ``s3``).
    where: str

    def put(self, key: str, data: bytes) -> Any:
        """Store `data` under `key`; returns the reference `open` and `delete` take."""

    def open(self, ref: Any) -> Iterator[bytes]:
        """The blob's bytes, in chunks; `FileNotFoundError` when it is gone."""

    def delete(self, ref: Any) -> None:
        """Remove the blob; nothing when it is already gone."""


def check_key(key: str) -> str:
    """`key` when it is a blob key (module docstring); `InvalidQuery` otherwise."""
    if not isinstance(key, str) or not KEY.match(key) or ".." in key.split("/"):
        raise InvalidQuery("key", f"is not an artifact key: {key!r}")
    return key


class FolderBlobs:
    """Blobs as files under one folder (module docstring)."""

    where = "folder"

    def __init__(self, root: Path) -> None:
        self.root = Path(root).expanduser().resolve()
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        path = (self.root / check_key(key)).resolve()
        if not path.is_relative_to(self.root):
            raise InvalidQuery("key", "leaves the artifact root")
        return path

    def put(self, key: str, data: bytes) -> str:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Written beside and renamed: a reader never sees half a file.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".part-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return key

    def open(self, ref: str) -> Iterator[bytes]:
        path = self._path(ref)
        handle = path.open("rb")  # FileNotFoundError before the first chunk is asked for

        def chunks() -> Iterator[bytes]:
            with handle:
                while chunk := handle.read(CHUNK_BYTES):
                    yield chunk

        return chunks()

    def delete(self, ref: str) -> None:
        self._path(ref).unlink(missing_ok=True)


class S3Blobs:
    """Blobs as objects of an S3-compatible bucket, under a prefix (module docstring)."""

    where = "s3"

    def __init__(self, url: str, endpoint_url: str | None = None) -> None:
        parsed = urlparse(url)
        if not parsed.netloc:
            raise ConfigError(f"SWEEPSTACK_ARTIFACT_ROOT: an S3 root names a bucket: {url!r}")
        try:
            import boto3
        except ImportError as exc:
            raise ConfigError(
                "SWEEPSTACK_ARTIFACT_ROOT is an s3:// URL, but boto3 is not installed: "
                "pip install 'sweepstack[s3]'"
            ) from exc
        self.bucket = parsed.netloc
        self.prefix = parsed.path.strip("/")
        self.client = boto3.client("s3", endpoint_url=endpoint_url)

    def _key(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def put(self, key: str, data: bytes) -> str:
        self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)
        return key

    def open(self, ref: str) -> Iterator[bytes]:
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self._key(ref))["Body"]
        except self.client.exceptions.NoSuchKey as exc:
            raise FileNotFoundError(ref) from exc
        return iter(lambda: body.read(CHUNK_BYTES), b"")

    def delete(self, ref: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self._key(ref))


def root_blobs(root: str, endpoint_url: str | None = None) -> Blobs:
    """The `Blobs` of an artifact root setting: a folder path, ``file://`` or ``s3://`` URL."""
    if root.startswith("s3://"):
        return S3Blobs(root, endpoint_url)
    if root.startswith("file://"):
        root = urlparse(root).path
    elif "://" in root:
        raise ConfigError(
            f"SWEEPSTACK_ARTIFACT_ROOT: must be a folder, file:// or s3:// URL, got {root!r}"
        )
    return FolderBlobs(Path(root))
