"""The kept models the pages link to: which of the top trials have one (the sweep page's
table), and the trial page's download.

A sweep keeps the models of its best trials (`core.spec.artifacts`); the worker stores a
trial's model before it records the trial complete, and drops the models that leave the
top K when a better trial completes, so which of the top trials have a model changes only
when the top trials do: `kept_ids` is asked again then, not on every poll. The link goes
to the dashboard's own route (``/trials/<id>/model``, `dashboard.blueprint`), under the
page's login, and answers what the API's route answers (`web.downloads`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from core.store.kept_models import KIND, NAME
from core.store.roles import Artifacts


def kept_ids(artifacts: Artifacts, rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """The ids of the trials among `rows` (a page's top trials) that have a kept model."""
    ids = [str(row["id"]) for row in rows]
    found = artifacts.of_trials(ids) if ids else {}
    return [t for t in ids if any(d.get("kind") == KIND and d.get("name") == NAME
                                  for d in found.get(t, ()))]  # fmt: skip


def model_info(artifacts: Artifacts, trial_id: str, url: str) -> dict[str, Any] | None:
    """What the trial page shows of the trial's kept model (its download `url`, size and
    SHA-256), or None when it has none."""
    doc = artifacts.find(trial_id, KIND, NAME)
    if doc is None:
        return None
    return {"url": url, "size": doc.get("size"), "sha256": doc.get("sha256")}
