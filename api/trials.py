"""``/api/v1/trials/{id}``: one trial's full record and its per-epoch metrics.

Needs a bearer token; a trial of someone else's sweep is a 404, as a missing one is.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint

from api.auth import owner, require_token
from api.params import accept
from api.serialize import PREFIX, trial_view
from core.errors import NotFound
from web.context import context

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
