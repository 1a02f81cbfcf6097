"""A trial's kept model through the API (#30 item 4): ``GET /api/v1/trials/{id}/model``
streams the stored file to its owner, whole, with its SHA-256 as ETag; anyone else gets the
404 of a trial that does not exist; a trial of the owner's with no model is a 404 that says
why; ``GET /api/v1/sweeps/{id}/models`` lists the kept ones, best first."""

from __future__ import annotations

import hashlib
from typing import Any

from flask.testing import FlaskClient

from core.states import TrialState
from core.store.store import Store
from tests.api import ALICE, BOB, small_spec, submit
from tests.core import finish, run
from tests.kept_models import keep_model

#: The six iris trials of `small_spec`, the best one's model kept.
SPEC = small_spec(artifacts={"keep": "top_k", "top_k": 1})


def _trials(client: FlaskClient, store: Store) -> tuple[str, list[dict[str, Any]]]:
    """A sweep of alice's: trial 0 complete with a kept model, 1 complete without, the rest
    queued."""
    sweep_id = submit(client, SPEC)
    docs = [store.reads.get_trial(t["_id"]) for t in store.reads.trials(sweep_id, limit=6)[0]]
    for doc, objective in zip(docs[:2], (0.9, 0.8), strict=True):
        attempt = run(store, doc["_id"])["attempt"]
        finish(store, doc["_id"], attempt, TrialState.COMPLETE, result={"objective": objective})
    return sweep_id, docs


def test_the_owner_downloads_the_stored_bytes(client: FlaskClient, store: Store) -> None:
    _, docs = _trials(client, store)
    data = keep_model(store, docs[0], 0.9)
    path = f"/api/v1/trials/{docs[0]['_id']}/model"
    response = client.get(path, headers=ALICE)
    assert response.status_code == 200
    assert response.get_data() == data
    assert response.mimetype == "application/octet-stream"
    assert response.headers["Content-Length"] == str(len(data))
    assert response.headers["Content-Disposition"] == (
        f'attachment; filename="{docs[0]["_id"]}.safetensors"'
    )
    etag = f'"{hashlib.sha256(data).hexdigest()}"'
    assert response.headers["ETag"] == etag
    assert response.headers["Cache-Control"] == "no-store"
    again = client.get(path, headers={**ALICE, "If-None-Match": etag})
    assert again.status_code == 304 and again.get_data() == b""


def test_another_owner_gets_the_404_of_a_missing_trial(client: FlaskClient, store: Store) -> None:
    _, docs = _trials(client, store)
    keep_model(store, docs[0], 0.9)
    trial_id = docs[0]["_id"]
    theirs = client.get(f"/api/v1/trials/{trial_id}/model", headers=BOB)
    missing = client.get(f"/api/v1/trials/{trial_id}x/model", headers=BOB)
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json == {"code": "not_found", "message": f"no trial {trial_id}",
                           "details": {"kind": "trial"}}  # fmt: skip
    assert missing.json["message"] == f"no trial {trial_id}x"
    anonymous = client.get(f"/api/v1/trials/{trial_id}/model")
    assert anonymous.status_code == 401 and anonymous.json["code"] == "unauthorized"


def test_a_trial_without_a_model_is_a_404_saying_why(client: FlaskClient, store: Store) -> None:
    _, docs = _trials(client, store)
    keep_model(store, docs[0], 0.9)
    not_kept = client.get(f"/api/v1/trials/{docs[1]['_id']}/model", headers=ALICE)
    assert not_kept.status_code == 404
    assert not_kept.json["details"] == {"kind": "model", "reason": "not_kept"}
    assert not_kept.json["message"] == (
        f"trial {docs[1]['_id']} has no kept model: its sweep keeps the best model by "
        "val_accuracy (its spec's artifacts.keep: top_k, top_k: 1), and this trial is not "
        "among them"
    )
    queued = client.get(f"/api/v1/trials/{docs[2]['_id']}/model", headers=ALICE)
    assert queued.status_code == 404 and queued.json["details"]["reason"] == "not_complete"
    assert queued.json["message"] == (
        f"trial {docs[2]['_id']} is queued: only a complete trial's model is kept"
    )
    # Its document kept, its bytes lost (an artifact root emptied by hand).
    doc = store.artifacts.find(docs[0]["_id"], "model", "model")
    assert doc is not None
    store.artifacts.blobs.delete(doc["blob"]["ref"])
    gone = client.get(f"/api/v1/trials/{docs[0]['_id']}/model", headers=ALICE)
    assert gone.status_code == 404 and gone.json["details"]["reason"] == "gone"


def test_the_sweep_lists_its_kept_models(client: FlaskClient, store: Store) -> None:
    sweep_id, docs = _trials(client, store)
    data = keep_model(store, docs[0], 0.9)
    listed = client.get(f"/api/v1/sweeps/{sweep_id}/models", headers=ALICE)
    assert listed.status_code == 200
    (item,) = listed.json["items"]
    assert listed.json["total"] == 1
    assert item["trial_id"] == docs[0]["_id"] and item["objective"] == 0.9
    assert item["metric"] == "val_accuracy" and item["size"] == len(data)
    assert item["sha256"] == hashlib.sha256(data).hexdigest() and item["created_at"]
    assert item["links"]["download"] == f"/api/v1/trials/{docs[0]['_id']}/model"
    assert client.get(item["links"]["download"], headers=ALICE).get_data() == data
    assert client.get(f"/api/v1/sweeps/{sweep_id}/models", headers=BOB).status_code == 404
