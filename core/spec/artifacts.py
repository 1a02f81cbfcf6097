"""`Artifacts`: what a sweep keeps of what its trials trained (the spec's ``artifacts:``).

```yaml
artifacts:
  keep: top_k          # best | top_k | all | none
  top_k: 10            # with keep: top_k, how many of the best trials keep their weights
  checkpoint_every: 5  # epochs between checkpoints (none: by time only)
  checkpoint_seconds: 300   # and at the end of any epoch this long after the last one
```

- **Weights** (``keep``): a trial that ends ``complete`` saves its model (safetensors) when
  the policy keeps it: ``all`` every complete trial, ``best`` the best one, ``top_k`` the
  ``top_k`` best by the sweep's objective (a trial that leaves the top K has its weights
  deleted), ``none`` nothing. So a sweep of any size keeps at most ``top_k`` models.
- **Checkpoints**: a running trial saves its whole training state (model, optimiser,
  schedule, RNG) every ``checkpoint_every`` epochs, and at the end of any epoch that ends
  ``checkpoint_seconds`` or more after its last checkpoint; only the last one is kept, and it
  is deleted when the trial ends. A retried attempt (a killed worker, a lost host, a broker
  restart) resumes from it. ``keep: none`` turns checkpoints off too only when
  ``checkpoint_every`` is not given.

A spec without the section takes the server's default (``SWEEPSTACK_ARTIFACTS_KEEP``,
``SWEEPSTACK_ARTIFACTS_TOP_K``: top 10). The sizes stored are held to the server's ceilings
per file and per sweep (``SWEEPSTACK_MAX_ARTIFACT_BYTES``, ``SWEEPSTACK_MAX_SWEEP_ARTIFACT_BYTES``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.settings import ARTIFACTS_KEEP

KEEP = ARTIFACTS_KEEP
MAX_TOP_K = 1000
#: The default time between checkpoints of a trial whose spec gives no `checkpoint_every`.
CHECKPOINT_SECONDS = 300.0


class Artifacts(BaseModel):
    """The ``artifacts`` section of a spec (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    keep: Literal[KEEP] = "top_k"  # type: ignore[valid-type]
    top_k: Annotated[int, Field(ge=1, le=MAX_TOP_K)] = 10
    checkpoint_every: Annotated[int, Field(ge=1, le=100_000)] | None = None
    checkpoint_seconds: Annotated[float, Field(ge=1.0, le=86_400.0)] = CHECKPOINT_SECONDS

    @property
    def kept(self) -> int | None:
        """How many of the best complete trials keep their weights (None: every one)."""
        return {"best": 1, "top_k": self.top_k, "all": None, "none": 0}[self.keep]

    @property
    def checkpoints(self) -> bool:
        """Whether running trials save checkpoints."""
        return self.keep != "none" or self.checkpoint_every is not None

    def due(self, epoch: int, seconds_since: float) -> bool:
        """Whether a checkpoint is due after `epoch`, `seconds_since` the last one."""
        if not self.checkpoints:
            return False
        if self.checkpoint_every is not None and epoch % self.checkpoint_every == 0:
            return True
        return seconds_since >= self.checkpoint_seconds


def sweep_artifacts(
    section: Mapping[str, Any] | None, keep: str = "top_k", top_k: int = 10
) -> Artifacts:
    """The policy of a sweep: its spec's section, else the server's default (`keep`,
    `top_k`). A stored section that no longer validates falls back to the default."""
    if section:
        try:
            return Artifacts.model_validate(dict(section))
        except ValidationError:
            pass
    return Artifacts(keep=keep, top_k=top_k)
