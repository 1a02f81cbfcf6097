"""A trial's kept model as an HTTP download: the one response the API
(``GET /api/v1/trials/{id}/model``) and the dashboard (its trial page's link) both give.

The bytes are streamed from the store as they are read (`core.store.kept_models.open_model`),
never held whole, as ``application/octet-stream`` with ``Content-Length``, an attachment
named ``<trial id>.safetensors``, and the file's SHA-256 as its ``ETag`` (a client checks
what it got against it; ``If-None-Match`` with it answers 304). Like every response of a
user's data it is not cached (``no-store``). Who may download is the caller's route's
question, asked before this (`core.store.kept_models.kept_model`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from flask import Response, request

from core.store.kept_models import open_model
from core.store.roles import Artifacts

MEDIA_TYPE = "application/octet-stream"


def filename(trial_id: str) -> str:
    """The download's file name: the trial id, any character unsafe in a header replaced."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", trial_id)[:200] + ".safetensors"


def model_response(artifacts: Artifacts, doc: Mapping[str, Any]) -> Response:
    """The kept model of artifact document `doc`, streamed (module docstring); `NoModel`
    (``gone``) when the store has lost its bytes."""
    sha = str(doc.get("sha256") or "")
    headers = {"ETag": f'"{sha}"', "Cache-Control": "no-store"}
    if sha and sha in request.if_none_match:
        return Response(status=304, headers=headers)
    chunks = open_model(artifacts, doc)
    headers["Content-Disposition"] = f'attachment; filename="{filename(doc["trial_id"])}"'
    response = Response(chunks, mimetype=MEDIA_TYPE, headers=headers)
    response.content_length = int(doc.get("size") or 0)
    return response
