"""`MongoArtifacts`: what trials leave behind besides metrics: model weights, checkpoints and
a training function's own files (`core.store.roles.Artifacts`, the contract).

Each artifact is one document of the ``artifacts`` collection, ``_id``
``<trial_id>|<kind>|<name>``, with its trial, sweep, kind (``model``, ``checkpoint``,
``file``), name, the attempt and epoch that wrote it, its size and SHA-256, the objective
(models), a small ``meta`` mapping, and where its bytes lie (``blob``: the `core.blobs.Blobs`
kind and reference). The bytes go to one `Blobs`: GridFS in this database by default
(`core.store.gridfs_blobs`), else the configured artifact root.

Replacing an artifact (the next checkpoint) writes the new bytes first, then points the
document at them, then deletes the old bytes: a reader, or a worker that dies between
the steps, finds the old or the new artifact whole, never half of one. A crash can leave
unreferenced bytes behind, never a document without its bytes.

Ceilings: a file over ``max_bytes`` is refused, and so is one that would take the sweep's
artifacts over ``max_sweep_bytes`` (`ArtifactTooLarge`, which names the ceiling).
Its indexes are the store's (`core.store.store.INDEXES`), made by `Store.ensure_indexes`.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from core.blobs import Blobs
from core.errors import InvalidQuery, NotFound
from core.store.query import check_attempt, check_id
from core.store.roles import Artifacts
from core.store.state import StoreState, available

log = logging.getLogger(__name__)

KINDS = ("model", "checkpoint", "file")
#: The default ceilings: one file, and all of one sweep's artifacts together.
MAX_BYTES = 2 << 30
MAX_SWEEP_BYTES = 50 << 30
NAME_CHARS = 200


class ArtifactTooLarge(InvalidQuery):
    """An artifact over the size of one file, or over what its sweep may store."""


def artifact_id(trial_id: str, kind: str, name: str) -> str:
    """The document id of a trial's artifact."""
    return f"{trial_id}|{kind}|{name}"


def check_kind(kind: Any) -> str:
    if kind not in KINDS:
        raise InvalidQuery("kind", f"must be one of {', '.join(KINDS)}, got {kind!r}")
    return kind


def check_name(name: Any) -> str:
    """An artifact's name: 1 to 200 characters, none of them a path separator or control."""
    if (
        not isinstance(name, str)
        or not name
        or len(name) > NAME_CHARS
        or name.startswith((".", "$"))
        or any(c in name for c in "/\\|")
        or any(ord(c) < 32 for c in name)
    ):
        raise InvalidQuery(
            "name",
            f"must be 1 to {NAME_CHARS} characters without /, \\, |, control characters or "
            f"a leading . or $, got {name!r}"[:300],
        )
    return name


def _hashed(value: str, n: int) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:n]


class MongoArtifacts(Artifacts):
    """The ``artifacts`` collection and a `Blobs` for the bytes (module docstring)."""

    def __init__(
        self,
        state: StoreState,
        blobs: Blobs,
        *,
        max_bytes: int = MAX_BYTES,
        max_sweep_bytes: int = MAX_SWEEP_BYTES,
    ) -> None:
        self._s = state
        self.blobs = blobs
        self.docs = state.db["artifacts"]
        self.max_bytes = max_bytes
        self.max_sweep_bytes = max_sweep_bytes

    # -- writing -------------------------------------------------------------------------

    @available
    def put(
        self,
        trial_id: str,
        kind: str,
        name: str,
        data: bytes,
        *,
        sweep_id: str,
        attempt: int,
        epoch: int | None = None,
        objective: float | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        check_id("trial_id", trial_id)
        check_id("sweep_id", sweep_id)
        check_kind(kind)
        check_name(name)
        check_attempt(attempt)
        size = len(data)
        if size > self.max_bytes:
            raise ArtifactTooLarge(
                "size",
                f"{size:,} bytes is over the ceiling of {self.max_bytes:,} bytes a file "
                "(SWEEPSTACK_MAX_ARTIFACT_BYTES)",
            )
        _id = artifact_id(trial_id, kind, name)
        old = self.docs.find_one({"_id": _id}, {"blob": 1, "size": 1})
        used = self.usage(sweep_id) - (old or {}).get("size", 0)
        if used + size > self.max_sweep_bytes:
            raise ArtifactTooLarge(
                "size",
                f"the sweep's artifacts would take {used + size:,} bytes, over the "
                f"ceiling of {self.max_sweep_bytes:,} (SWEEPSTACK_MAX_SWEEP_ARTIFACT_BYTES)",
            )
        key = f"{_hashed(sweep_id, 16)}/{_hashed(trial_id, 24)}/{kind}-{uuid.uuid4().hex}"
        ref = self.blobs.put(key, data)
        doc = {
            "_id": _id,
            "trial_id": trial_id,
            "sweep_id": sweep_id,
            "kind": kind,
            "name": name,
            "attempt": attempt,
            "epoch": epoch,
            "objective": objective,
            "size": size,
            "sha256": hashlib.sha256(data).hexdigest(),
            "meta": dict(meta or {}),
            "blob": {"where": self.blobs.where, "ref": ref},
            "created_at": self._s.clock(),
        }
        self.docs.replace_one({"_id": _id}, doc, upsert=True)
        if old is not None:
            self._drop_blob(old)
        return doc

    def _drop_blob(self, doc: Mapping[str, Any]) -> None:
        blob = doc.get("blob") or {}
        if blob.get("where") != self.blobs.where:
            log.warning("artifact %s lies in %s, not here: its bytes are left", doc.get("_id"),
                        blob.get("where"))  # fmt: skip
            return
        self.blobs.delete(blob.get("ref"))

    # -- reading -------------------------------------------------------------------------

    @available
    def find(self, trial_id: str, kind: str, name: str) -> dict[str, Any] | None:
        check_id("trial_id", trial_id)
        return self.docs.find_one({"_id": artifact_id(trial_id, check_kind(kind), name)})

    @available
    def of_trials(self, trial_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        ids = [check_id("trial_id", t) for t in trial_ids]
        out: dict[str, list[dict[str, Any]]] = {t: [] for t in ids}
        if ids:
            for doc in self.docs.find({"trial_id": {"$in": ids}}, {"blob": 0}):
                out[doc["trial_id"]].append(doc)
        return out

    def open(self, doc: Mapping[str, Any]) -> Iterator[bytes]:
        """The artifact's bytes in chunks; `NotFound` when they are gone."""
        try:
            return self.blobs.open(doc["blob"]["ref"])
        except FileNotFoundError as exc:
            raise NotFound("artifact", str(doc.get("_id"))) from exc

    def read(self, doc: Mapping[str, Any]) -> bytes:
        """The artifact's bytes whole, checked against its SHA-256 (`InvalidQuery` when they
        differ: a truncated or corrupt file)."""
        data = b"".join(self.open(doc))
        if hashlib.sha256(data).hexdigest() != doc.get("sha256"):
            raise InvalidQuery("artifact", f"{doc.get('_id')}: its bytes do not match its checksum")
        return data

    @available
    def models(self, sweep_id: str, direction: str = "minimize") -> list[dict[str, Any]]:
        check_id("sweep_id", sweep_id)
        docs = list(self.docs.find({"sweep_id": sweep_id, "kind": "model"}, {"blob": 0}))
        sign = 1 if direction == "minimize" else -1
        return sorted(
            docs,
            key=lambda d: (d.get("objective") is None, sign * (d.get("objective") or 0), d["_id"]),
        )

    @available
    def usage(self, sweep_id: str) -> int:
        check_id("sweep_id", sweep_id)
        return sum(d.get("size", 0) for d in self.docs.find({"sweep_id": sweep_id}, {"size": 1}))

    # -- retention and deletion ------------------------------------------------------------

    def ranks_within(
        self, sweep_id: str, objective: float | None, direction: str, keep: int | None
    ) -> bool:
        """Whether a model of this objective would be among the `keep` best kept (None: all)."""
        if keep is None:
            return True
        if keep <= 0 or objective is None:
            return False
        kept = [d.get("objective") for d in self.models(sweep_id, direction)]
        better = [
            v
            for v in kept
            if v is not None and (v < objective if direction == "minimize" else v > objective)
        ]
        return len(better) < keep

    @available
    def trim_models(self, sweep_id: str, direction: str, keep: int | None) -> int:
        """Delete the models beyond the `keep` best of the sweep (None: keep all); how many."""
        if keep is None:
            return 0
        gone = self.models(sweep_id, direction)[keep:]
        for doc in gone:
            self._delete_doc(doc["_id"])
        return len(gone)

    def _delete_doc(self, _id: str) -> bool:
        doc = self.docs.find_one({"_id": _id}, {"blob": 1})
        if doc is None:
            return False
        self.docs.delete_one({"_id": _id})
        self._drop_blob(doc)
        return True

    @available
    def delete(self, trial_id: str, kind: str | None = None) -> int:
        check_id("trial_id", trial_id)
        query: dict[str, Any] = {"trial_id": trial_id}
        if kind is not None:
            query["kind"] = check_kind(kind)
        ids = [d["_id"] for d in self.docs.find(query, {"_id": 1})]
        return sum(self._delete_doc(_id) for _id in ids)

    @available
    def delete_sweep(self, sweep_id: str) -> int:
        check_id("sweep_id", sweep_id)
        ids = [d["_id"] for d in self.docs.find({"sweep_id": sweep_id}, {"_id": 1})]
        return sum(self._delete_doc(_id) for _id in ids)

    @available
    def policy(self, sweep_id: str) -> dict[str, Any] | None:
        check_id("sweep_id", sweep_id)
        doc = self._s.sweeps.find_one({"_id": sweep_id}, {"spec.artifacts": 1})
        if doc is None:
            raise NotFound("sweep", sweep_id)
        section = (doc.get("spec") or {}).get("artifacts")
        return section if isinstance(section, dict) else None
