"""`GridFSBlobs`: artifact bytes in the store's own database (MongoDB's GridFS), the default
`core.blobs.Blobs`: nothing to set up, and a sweep's models go wherever its store goes."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import gridfs
from bson import ObjectId
from pymongo.database import Database

from core.blobs import CHUNK_BYTES

BUCKET = "blobs"


class GridFSBlobs:
    """Blobs as GridFS files of the bucket ``blobs`` (``blobs.files``, ``blobs.chunks``)."""

    where = "gridfs"

    def __init__(self, db: Database) -> None:
        self.bucket = gridfs.GridFSBucket(db, bucket_name=BUCKET, chunk_size_bytes=CHUNK_BYTES)

    def put(self, key: str, data: bytes) -> ObjectId:
        return self.bucket.upload_from_stream(key, data)

    def open(self, ref: Any) -> Iterator[bytes]:
        try:
            stream = self.bucket.open_download_stream(ObjectId(ref))
        except gridfs.errors.NoFile as exc:
            raise FileNotFoundError(str(ref)) from exc

        def chunks() -> Iterator[bytes]:
            with stream:
                while chunk := stream.readchunk():
                    yield chunk

        return chunks()

    def delete(self, ref: Any) -> None:
        with contextlib.suppress(gridfs.errors.NoFile):
            self.bucket.delete(ObjectId(ref))
