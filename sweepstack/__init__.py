"""Sweepstack as a library: what a user's own Python takes from a sweep.

`load_model` gives a trial's kept model as a ready ``torch.nn.Module``, from a file that
``sweepstack model`` (or the API, or the dashboard) downloaded, or straight from the store.

This package stands on `core` and `workers` (it is imported by nothing of ours) and stays
light: importing it imports neither torch nor pymongo; `load_model` does, when called.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from core.store.store import Store
    from workers.models_io import Module

__all__ = ["load_model"]


def load_model(path_or_trial_id: str | os.PathLike[str], *, store: Store | None = None) -> Module:
    """A trial's kept model, rebuilt from the config in its file, its weights loaded, on
    the CPU and in eval mode (``model.to(device)`` moves it).

    `path_or_trial_id` is a model file (safetensors, as ``sweepstack model TRIAL -o FILE``
    writes it) or a trial id, read from `store` when given, else from the store of
    ``SWEEPSTACK_MONGO_URL`` (``SWEEPSTACK_MONGO_DB``). A trial of a local run's data folder
    is reached with ``sweepstack model TRIAL -o FILE --data DIR`` first.

    Raises `FileNotFoundError` for a path that is no file, `core.errors.NotFound` for an
    unknown trial, `core.errors.NoModel` (saying why) for a trial with no kept model,
    `core.errors.ConfigError` when a trial id is given with no store to read it from, and
    `workers.training.checkpoints.CheckpointError` for a file that is not a kept model.
    """
    from workers.models_io import load_model_bytes

    if isinstance(path_or_trial_id, os.PathLike) or _names_a_file(path_or_trial_id):
        path = Path(path_or_trial_id).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"no model file {path}")
        return load_model_bytes(path.read_bytes())[0]
    return load_model_bytes(_stored_bytes(path_or_trial_id, store))[0]


def _names_a_file(value: str) -> bool:
    """Whether a string is a path rather than a trial id (which holds no separator or dot:
    ``<sweep id>-<key>``)."""
    return Path(value).expanduser().exists() or any(c in value for c in "./\\~")


def _stored_bytes(trial_id: str, store: Store | None) -> bytes:
    from core.store.kept_models import kept_model

    if store is not None:
        return store.artifacts.read(kept_model(store.reads, store.artifacts, trial_id))
    from core.errors import ConfigError
    from core.settings import Settings
    from core.store.store import Store

    settings = Settings.from_env()
    if not settings.mongo_url:
        raise ConfigError(
            f"{trial_id!r} is no file, and no store to read a trial from: pass store=, set "
            "SWEEPSTACK_MONGO_URL, or download it first with `sweepstack model TRIAL -o FILE`"
        )
    opened = Store.connect(settings.mongo_url, settings.mongo_db, **settings.store_options())
    try:
        doc = kept_model(opened.reads, opened.artifacts, trial_id,
                         default_keep=settings.artifacts_keep,
                         default_top_k=settings.artifacts_top_k)  # fmt: skip
        return opened.artifacts.read(doc)
    finally:
        opened.close()
