"""A trial's kept model, as the CLI, the API, the dashboard and `sweepstack.load_model`
find it: the one place that says who may have it and, when there is none, why.

`kept_model` answers the model's artifact document (`core.store.artifacts`) of a trial the
caller may see, or raises:

- `NotFound` ("trial") for a trial that does not exist *or* belongs to another owner's
  sweep: the same error for both, so a download route never tells that a trial exists;
- `NoModel` for a visible trial with no model, naming why: the trial is not complete, the
  sweep's ``artifacts:`` policy did not keep it (or dropped it when better trials came),
  its worker stored none though the policy would keep it (a trial kind that keeps no
  model, or a store that refused it), or the bytes are gone.

`best_kept_model` is the sweep's best one (what ``sweepstack model SWEEP`` downloads), and
`model_entry` what a listing shows of one (``GET /api/v1/sweeps/{id}/models``).

The model file itself is safetensors with its trial's config in its metadata
(`workers.training.checkpoints.model_file`); the weights are the last epoch's, so the model
scores the trial's ``result.final`` on its validation split, not necessarily its objective
(the best epoch's).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from core.errors import NoModel, NotFound
from core.spec.artifacts import Artifacts as Policy
from core.spec.artifacts import sweep_artifacts
from core.store.roles import Artifacts, Reads

#: The kind and name under which a worker keeps a trial's model (`workers.checkpointing`).
KIND = "model"
NAME = "model"


def visible_trial(
    reads: Reads, trial_id: str, owner: str | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The trial (without its curve) and its sweep, if `owner` may see them (None: anyone);
    `NotFound` ("trial") otherwise, whether missing or another owner's."""
    doc = reads.get_trial(trial_id, with_metrics=False)
    try:
        sweep = reads.get_sweep(doc["sweep_id"], owner=owner)
    except NotFound as exc:
        raise NotFound("trial", trial_id) from exc
    return doc, sweep


def kept_model(
    reads: Reads,
    artifacts: Artifacts,
    trial_id: str,
    *,
    owner: str | None = None,
    default_keep: str = "top_k",
    default_top_k: int = 10,
) -> dict[str, Any]:
    """The artifact document of trial `trial_id`'s kept model (module docstring).
    `default_keep` and `default_top_k` are the server's policy for a sweep whose spec has
    no ``artifacts:`` section (``SWEEPSTACK_ARTIFACTS_KEEP``, ``…_TOP_K``): the message
    of a `NoModel` quotes it."""
    trial, sweep = visible_trial(reads, trial_id, owner)
    found = artifacts.find(trial_id, KIND, NAME)
    if found is not None:
        return found
    state = trial.get("state")
    if state != "complete":
        raise NoModel(
            trial_id, "not_complete",
            f"trial {trial_id} is {state}: only a complete trial's model is kept",
        )  # fmt: skip
    section = (sweep.get("spec") or {}).get("artifacts")
    policy = sweep_artifacts(section if isinstance(section, Mapping) else None,
                             default_keep, default_top_k)  # fmt: skip
    objective = sweep.get("objective") or {}
    ranks = policy.kept is None or artifacts.ranks_within(
        sweep["_id"], trial.get("objective"), objective.get("direction", "minimize"), policy.kept
    )
    why = _why(policy, objective.get("metric", "the objective"),
               given=isinstance(section, Mapping), ranks=ranks)  # fmt: skip
    raise NoModel(trial_id, "not_kept", f"trial {trial_id} has no kept model: {why}")


def _why(policy: Policy, metric: str, *, given: bool, ranks: bool) -> str:
    """The policy that left a complete trial without a model, as its spec or the server
    set it; `ranks`: whether the trial would be among the models it keeps."""
    if given:
        setting = f"its spec's artifacts.keep: {policy.keep}"
        if policy.keep == "top_k":
            setting += f", top_k: {policy.top_k}"
    else:
        setting = f"the server's default, SWEEPSTACK_ARTIFACTS_KEEP={policy.keep}"
        if policy.keep == "top_k":
            setting += f", SWEEPSTACK_ARTIFACTS_TOP_K={policy.top_k}"
    if policy.keep == "none":
        return f"its sweep keeps no models ({setting})"
    if ranks:  # kept by the policy, yet not stored: a trial kind that keeps no model, or
        # a store that refused it (a ceiling), which the worker logged
        return (
            f"its worker stored none, though its sweep would keep it ({setting}): its "
            "kind of trial may keep no model (a training function's model is its own), "
            "or the store refused it, which the worker logged"
        )
    best = "the best model" if policy.kept == 1 else f"the {policy.kept} best models"
    return f"its sweep keeps {best} by {metric} ({setting}), and this trial is not among them"


def open_model(artifacts: Artifacts, doc: Mapping[str, Any]) -> Iterator[bytes]:
    """The model's bytes in chunks, to stream; `NoModel` (``gone``) when the store has its
    document but not its bytes (an artifact root emptied by hand)."""
    try:
        return iter(artifacts.open(doc))
    except NotFound as exc:
        raise NoModel(
            doc["trial_id"], "gone",
            f"trial {doc['trial_id']}'s kept model is missing its bytes in the store",
        ) from exc  # fmt: skip


def best_kept_model(
    reads: Reads, artifacts: Artifacts, sweep_id: str, *, owner: str | None = None
) -> dict[str, Any]:
    """The best kept model of sweep `sweep_id` by its objective; `NotFound` ("sweep") for
    a sweep `owner` may not see, `NoModel` when it keeps none (yet)."""
    sweep = reads.get_sweep(sweep_id, owner=owner)
    direction = (sweep.get("objective") or {}).get("direction", "minimize")
    for listed in artifacts.models(sweep_id, direction):
        doc = artifacts.find(listed["trial_id"], KIND, NAME)  # the listing has no `blob`
        if doc is not None:
            return doc
    raise NoModel(sweep_id, "not_kept", f"sweep {sweep_id} has no kept model (yet)")


def model_entry(doc: Mapping[str, Any]) -> dict[str, Any]:
    """What a list of kept models shows of one: its trial, objective, size, checksum, time."""
    return {
        "trial_id": doc["trial_id"],
        "objective": doc.get("objective"),
        "metric": (doc.get("meta") or {}).get("metric"),
        "size": doc.get("size"),
        "sha256": doc.get("sha256"),
        "created_at": doc.get("created_at"),
    }
