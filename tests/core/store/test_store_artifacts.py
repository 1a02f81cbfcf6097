"""Contract of `store.artifacts` (`core.store.artifacts`) against the real server of the
`mongo_url` fixture, for each artifact root: GridFS in the store (the default), a folder,
and an S3-compatible server in its own process (moto's server, reached over HTTP by boto3,
as a MinIO or AWS would be).

A put replaces an artifact whole and leaves no old bytes behind; reads stream and check
the checksum; the ceilings per file and per sweep refuse with the field and the rule; a
sweep's models keep the best K; everything goes with its trial or sweep; a folder root
keeps every key inside it.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from core.blobs import FolderBlobs
from core.errors import InvalidQuery, NotFound
from core.store.artifacts import ArtifactTooLarge
from core.store.store import Store
from tests.services import free_port, wait_listening

BUCKET = "sweepstack-artifacts"
S3_ENV = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
          "AWS_DEFAULT_REGION": "us-east-1"}  # fmt: skip


@pytest.fixture(scope="module")
def s3_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An S3-compatible server in a process of its own, with one bucket."""
    port = free_port()
    log = tmp_path_factory.mktemp("s3") / "moto.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            wait_listening("127.0.0.1", port, 30, proc)
            url = f"http://127.0.0.1:{port}"
            boto3.client("s3", endpoint_url=url, **_credentials()).create_bucket(Bucket=BUCKET)
            yield url
        finally:
            proc.terminate()
            proc.wait(10)


def _credentials() -> dict[str, str]:
    return {"aws_access_key_id": "test", "aws_secret_access_key": "test",
            "region_name": "us-east-1"}  # fmt: skip


@pytest.fixture(params=["gridfs", "folder", "s3"])
def store(
    request: pytest.FixtureRequest,
    mongo_url: str,
    db_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Store]:
    options: dict[str, object] = {
        "max_artifact_bytes": 1 << 20, "max_sweep_artifact_bytes": 3 << 20
    }
    if request.param == "folder":
        options["artifact_root"] = str(tmp_path / "artifacts")
    elif request.param == "s3":
        for key, value in S3_ENV.items():
            monkeypatch.setenv(key, value)
        options["artifact_root"] = f"s3://{BUCKET}/tests/{db_name}"
        options["s3_endpoint_url"] = request.getfixturevalue("s3_url")
    made = Store.connect(mongo_url, db_name, **options)  # type: ignore[arg-type]
    try:
        yield made
    finally:
        made.client.drop_database(db_name)
        made.close()


def _put(store: Store, trial: str, kind: str, data: bytes, **kw: object) -> dict:
    return store.artifacts.put(f"s1-{trial}", kind, kw.pop("name", kind), data,  # type: ignore[arg-type]
                               sweep_id="s1", attempt=1, **kw)  # fmt: skip


def test_a_put_replaces_the_artifact_whole_and_reads_back(store: Store) -> None:
    first = _put(store, "a", "checkpoint", b"x" * 1000, epoch=5)
    second = _put(store, "a", "checkpoint", b"y" * 3000, epoch=10)
    assert first["_id"] == second["_id"] and first["blob"] != second["blob"]
    found = store.artifacts.find("s1-a", "checkpoint", "checkpoint")
    assert found is not None and found["epoch"] == 10 and found["size"] == 3000
    assert store.artifacts.read(found) == b"y" * 3000
    assert b"".join(store.artifacts.open(found)) == b"y" * 3000
    with pytest.raises(NotFound):  # the first one's bytes are gone
        b"".join(store.artifacts.open(first))
    assert store.artifacts.usage("s1") == 3000


def test_the_ceilings_refuse_naming_the_rule_and_change_nothing(store: Store) -> None:
    with pytest.raises(ArtifactTooLarge, match="SWEEPSTACK_MAX_ARTIFACT_BYTES"):
        _put(store, "a", "model", b"z" * ((1 << 20) + 1))
    for trial in "abc":
        _put(store, trial, "model", b"z" * 1_000_000)
    with pytest.raises(ArtifactTooLarge, match="SWEEPSTACK_MAX_SWEEP_ARTIFACT_BYTES"):
        _put(store, "d", "model", b"z" * 200_000)
    assert store.artifacts.find("s1-d", "model", "model") is None
    with pytest.raises(InvalidQuery, match="name"):
        _put(store, "a", "file", b"1", name="../../etc/passwd")
    with pytest.raises(InvalidQuery, match="kind"):
        _put(store, "a", "weights", b"1")


def test_a_corrupt_artifact_is_refused_by_its_checksum(store: Store) -> None:
    doc = _put(store, "a", "checkpoint", b"good bytes")
    store.db["artifacts"].update_one({"_id": doc["_id"]}, {"$set": {"sha256": "0" * 64}})
    found = store.artifacts.find("s1-a", "checkpoint", "checkpoint")
    with pytest.raises(InvalidQuery, match="checksum"):
        store.artifacts.read(found)  # type: ignore[arg-type]


def test_models_keep_the_best_k_and_everything_goes_with_its_sweep(store: Store) -> None:
    for trial, value in zip("abcde", (0.5, 0.9, 0.7, 0.95, 0.6), strict=True):
        if store.artifacts.ranks_within("s1", value, "maximize", 3):
            _put(store, trial, "model", trial.encode() * 10, objective=value)
            store.artifacts.trim_models("s1", "maximize", 3)
    kept = store.artifacts.models("s1", "maximize")
    assert [m["trial_id"] for m in kept] == ["s1-d", "s1-b", "s1-c"]
    assert not store.artifacts.ranks_within("s1", 0.65, "maximize", 3)
    assert store.artifacts.ranks_within("s1", 0.65, "maximize", None)
    assert not store.artifacts.ranks_within("s1", 0.99, "maximize", 0)
    whole = [store.artifacts.find(m["trial_id"], "model", "model") for m in kept]
    _put(store, "d", "file", b"notes", name="notes.txt")
    assert store.artifacts.delete("s1-d", "file") == 1
    assert store.artifacts.delete_sweep("s1") == 3
    assert store.db["artifacts"].count_documents({}) == 0
    for doc in whole:
        with pytest.raises(NotFound):
            b"".join(store.artifacts.open(doc))


def test_a_folder_root_keeps_every_key_inside_it(tmp_path: Path) -> None:
    root = tmp_path / "root"
    blobs = FolderBlobs(root)
    (tmp_path / "outside").write_bytes(b"secret")
    (root / "link").symlink_to(tmp_path)
    for key in ("../outside", "a/../../outside", "/etc/passwd", "link/outside", ""):
        with pytest.raises(InvalidQuery):
            b"".join(blobs.open(key))
        with pytest.raises(InvalidQuery):
            blobs.put(key, b"x")
    ref = blobs.put("s/t/model-1", b"bytes")
    assert b"".join(blobs.open(ref)) == b"bytes"
    blobs.delete(ref)
    assert not (root / "s/t/model-1").exists()
