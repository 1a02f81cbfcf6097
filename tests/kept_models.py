"""A kept model put in the store as a worker puts it, for the tests of the routes and pages
that serve it (the API's, the dashboard's): a real model file (`model_file` of a
`build_mlp` module) under the trial's ``model`` artifact, with no training."""

from __future__ import annotations

from typing import Any

import torch

from core.spec.config import TrialConfig
from core.store.store import Store
from workers.training.checkpoints import model_file
from workers.training.models import build_mlp

#: iris: 4 features, 3 classes.
N_IN, N_OUT = 4, 3


def keep_model(store: Store, trial: dict[str, Any], objective: float) -> bytes:
    """Store a model for `trial` (its document: id, sweep, config) as a worker keeps one;
    its bytes."""
    config = TrialConfig.model_validate(trial["config"])
    torch.manual_seed(0)
    module = build_mlp(config.model, N_IN, N_OUT)
    meta = {
        "kind": "mlp", "config": config.model_dump(mode="json"), "n_in": N_IN, "n_out": N_OUT,
        "task": "classification", "dtype": "float32", "trial_id": trial["_id"],
        "objective": objective, "metric": "val_accuracy",
    }  # fmt: skip
    data = model_file(module, meta)
    store.artifacts.put(trial["_id"], "model", "model", data, sweep_id=trial["sweep_id"],
                        attempt=1, objective=objective,
                        meta={"metric": "val_accuracy", "kind": "mlp"})  # fmt: skip
    return data
