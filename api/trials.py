"""``/api/v1/trials/{id}``: one trial's full record and its per-epoch metrics, and
``/api/v1/trials/{id}/model``: its kept model, streamed (`web.downloads`).

Needs a bearer token; a trial of someone else's sweep is a 404, as a missing one is. A
trial of the caller's with no kept model is a 404 too, whose message says why (not
complete, or not kept by its sweep's ``artifacts:`` policy: `core.store.kept_models`).
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response

from api.auth import owner, require_token
from api.params import accept
from api.serialize import PREFIX, trial_view
from core.errors import NotFound
from core.store.kept_models import kept_model
from web.context import context
from web.downloads import model_response

blueprint = Blueprint("trials", __name__, url_prefix=f"{PREFIX}/trials")
blueprint.before_request(require_token)


@blueprint.get("/<trial_id>")
def show(trial_id: str) -> dict[str, Any]:
    """The trial with its config, attempts history and metrics by attempt and epoch."""
    accept(())
    store = context().store
    doc = store.reads.get_trial(trial_id)
    try:
        store.reads.get_sweep(doc["sweep_id"], owner=owner())
    except NotFound as exc:
        raise NotFound("trial", trial_id) from exc
    return trial_view(doc, detail=True)


@blueprint.get("/<trial_id>/model")
def model(trial_id: str) -> Response:
    """The trial's kept model: a safetensors file, streamed, its SHA-256 as the ETag."""
    accept(())
    ctx = context()
    doc = kept_model(ctx.store.reads, ctx.store.artifacts, trial_id, owner=owner(),
                     default_keep=ctx.settings.artifacts_keep,
                     default_top_k=ctx.settings.artifacts_top_k)  # fmt: skip
    return model_response(ctx.store.artifacts, doc)
