"""A trial's checkpoints and kept weights, between its trainer and the store.

`TrialCheckpoints` is what the runner gives a trainer (`workers.training.epochs.Checkpointing`):

- **Resume.** A trial's later attempt (its first worker was killed, lost its host, or the
  broker redelivered its message) reads the trial's last checkpoint, checked against its
  SHA-256 and unpacked without pickle (`workers.training.checkpoints`). The trainer restores
  it and trains on from the epoch after it; the store makes the checkpoint's epoch rows the
  new attempt's (`TrialLifecycle.resume`), so the curve is whole and no epoch is written
  twice. A checkpoint that cannot be read, or does not fit the trial, is noted in the trial
  (``notes``) and the trial starts from epoch 1: it never fails a trial or a worker.
- **Save.** After an epoch, when the sweep's policy says one is due (`core.spec.artifacts`),
  the epoch rows written so far are flushed, the trainer's state is packed on the training
  thread (a copy of its tensors) and written to the store by one background thread per
  process, so training goes on while it uploads; a checkpoint not yet written when the next
  is due is waited for first (at most one is in flight). Only a trial's last checkpoint is
  kept (`Artifacts.put` replaces it whole), and it goes when the trial ends. A worker that
  shuts down saves one at the trial's next epoch end, whatever the policy's interval, for
  the attempt that takes the trial over (`workers.shutdown`).
- **Weights.** After each epoch the trainer offers its weights (`epoch_model`); a copy is
  held when the epoch is the best yet by the sweep's objective (and carried in the
  checkpoints, so a resumed trial still knows it). A trial that trained every epoch hands
  over its model (`trained`), which takes up the best epoch's weights: the kept model is the
  one whose score the trial's objective is. Once its state is settled the runner calls
  `keep_model`, which stores the weights as safetensors when the policy keeps them (the
  sweep's best ``top_k`` by the objective, every complete trial, or none) and deletes the
  models that left the top K. (A data-parallel trial keeps its last epoch's weights: its
  ranks' processes hold them.)
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from core.errors import InvalidQuery, NotFound, StoreUnavailable
from core.spec.artifacts import Artifacts, sweep_artifacts
from core.store.roles import Artifacts as ArtifactStore
from core.store.roles import TrialLifecycle
from workers import shutdown
from workers.claims import with_retry

if TYPE_CHECKING:
    from workers.training.epochs import Capture

log = logging.getLogger(__name__)

CHECKPOINT = "last"
MODEL = "model"

_UPLOADS: ThreadPoolExecutor | None = None
_UPLOADS_PID: int | None = None
_LOCK = threading.Lock()


def _uploads() -> ThreadPoolExecutor:
    """One background writer per process (made again in a forked child)."""
    global _UPLOADS, _UPLOADS_PID
    with _LOCK:
        if _UPLOADS is None or os.getpid() != _UPLOADS_PID:
            _UPLOADS = ThreadPoolExecutor(1, thread_name_prefix="checkpoints")
            _UPLOADS_PID = os.getpid()
        return _UPLOADS


_POLICIES: dict[str, Artifacts] = {}


def sweep_policy(
    artifacts: ArtifactStore, sweep_id: str, keep: str, top_k: int, budget: float
) -> Artifacts:
    """The sweep's artifacts policy (its spec's section, else the server's default `keep`
    and `top_k`); read once per sweep per process."""
    if sweep_id not in _POLICIES:
        if len(_POLICIES) > 1000:
            _POLICIES.clear()
        section = with_retry(artifacts.policy, sweep_id, budget=budget)
        _POLICIES[sweep_id] = sweep_artifacts(section, keep, top_k)
    return _POLICIES[sweep_id]


class TrialCheckpoints:
    """One attempt's checkpoints and kept model (module docstring).

    `flush` writes the epoch rows the runner still holds (before a checkpoint is saved, so
    that the rows a resume takes over are all in the store)."""

    def __init__(
        self,
        artifacts: ArtifactStore,
        lifecycle: TrialLifecycle,
        doc: dict[str, Any],
        policy: Artifacts,
        flush: Callable[[], None],
        budget: float,
        objective: dict[str, str] | None = None,
    ) -> None:
        self.artifacts = artifacts
        self.lifecycle = lifecycle
        self.trial_id: str = doc["_id"]
        self.sweep_id: str = doc["sweep_id"]
        self.attempt: int = doc["attempt"]
        self.policy = policy
        self.flush = flush
        self.budget = budget
        self.last_saved = time.monotonic()
        self.pending: Future[Any] | None = None
        self.model: tuple[Any, dict[str, Any]] | None = None
        self.saved_any = False
        self.saved_for_hand_back = False
        self._found: dict[str, Any] | None = None
        self._usable = self.attempt > 1
        self.objective = objective
        #: The best epoch's weights so far, its epoch and its value of the objective.
        self.best: dict[str, Any] | None = None
        self.best_epoch = 0
        self.best_value: float | None = None

    # -- resume ----------------------------------------------------------------------------

    def resumed(self) -> tuple[Any, dict[str, Any]] | None:
        from workers.training.checkpoints import CheckpointError, unpack  # torch: on use

        if not self._usable:
            return None
        try:
            doc = with_retry(self.artifacts.find, self.trial_id, "checkpoint", CHECKPOINT,
                             budget=self.budget)  # fmt: skip
            if doc is None:
                return None
            state, meta = unpack(with_retry(self.artifacts.read, doc, budget=self.budget))
            if meta.get("trial_id") != self.trial_id or not isinstance(meta.get("metrics"), list):
                raise CheckpointError("the checkpoint is another trial's")
        except (CheckpointError, InvalidQuery, NotFound) as exc:
            self.unusable(exc)
            return None
        self._found = meta
        if isinstance(state, dict) and isinstance(state.get("best"), dict):
            self.best = state.pop("best")
            self.best_epoch = int(meta.get("best_epoch", 0))
            self.best_value = meta.get("best_value")
        return state, meta

    def resuming(self, meta: dict[str, Any]) -> None:
        epoch, writer = int(meta["epoch"]), int(meta["attempt"])
        with_retry(self.lifecycle.resume, self.trial_id, self.attempt, writer, epoch,
                   budget=self.budget)  # fmt: skip
        log.info("trial %s: attempt %d resumes after epoch %d (checkpoint of attempt %d)",
                 self.trial_id, self.attempt, epoch, writer)  # fmt: skip
        self.last_saved = time.monotonic()

    def unusable(self, err: Exception) -> None:
        self._usable = False
        text = f"its last checkpoint could not be used ({err}); it trained again from epoch 1"
        log.warning("trial %s: %s", self.trial_id, text)
        with contextlib.suppress(InvalidQuery, NotFound):
            with_retry(self.lifecycle.note, self.trial_id, self.attempt, text, budget=self.budget)

    # -- save ------------------------------------------------------------------------------

    def after_epoch(self, epoch: int, capture: Capture) -> None:
        handing_back = shutdown.requested() and self.policy.checkpoints
        if handing_back or self.policy.due(epoch, time.monotonic() - self.last_saved):
            state, meta = capture()
            self.save(epoch, state, meta)
            # The worker shuts down: this checkpoint is the one the next attempt resumes
            # from, and the trial stops now (`workers.shutdown.stop_training`).
            self.saved_for_hand_back = handing_back

    def save(self, epoch: int, state: Any, meta: dict[str, Any]) -> None:
        """Save a checkpoint of `state` after `epoch` now (`meta` says what it holds: at
        least the rows trained so far, ``metrics``): the rows first, then the bytes, in
        the background."""
        from workers.training.checkpoints import pack

        self.flush()
        meta = {**meta, "epoch": epoch, "trial_id": self.trial_id, "attempt": self.attempt}
        if self.best is not None and isinstance(state, dict):
            state = {**state, "best": self.best}
            meta.update(best_epoch=self.best_epoch, best_value=self.best_value)
        data = pack(state, meta)
        self.wait()
        self.pending = _uploads().submit(self._put, data, epoch)
        self.last_saved = time.monotonic()

    def save_file(self, name: str, data: bytes) -> dict[str, Any]:
        """Keep a file of the trial's own (a training function's ``ctx.save_artifact``)."""
        return with_retry(self.artifacts.put, self.trial_id, "file", name, data,
                          sweep_id=self.sweep_id, attempt=self.attempt,
                          budget=self.budget)  # fmt: skip

    def _put(self, data: bytes, epoch: int) -> None:
        try:
            with_retry(self.artifacts.put, self.trial_id, "checkpoint", CHECKPOINT, data,
                       sweep_id=self.sweep_id, attempt=self.attempt, epoch=epoch,
                       budget=self.budget)  # fmt: skip
            self.saved_any = True
        except (InvalidQuery, StoreUnavailable) as exc:
            # A checkpoint is insurance, not the result: the trial trains on without it.
            log.warning("trial %s: checkpoint after epoch %d not saved: %s", self.trial_id,
                        epoch, exc)  # fmt: skip

    def wait(self) -> None:
        """Until the checkpoint in flight is written (or given up)."""
        if self.pending is not None:
            self.pending.result()
            self.pending = None

    # -- the end ---------------------------------------------------------------------------

    def epoch_model(
        self, epoch: int, row: dict[str, float], snapshot: Callable[[], dict[str, Any]]
    ) -> None:
        if self.policy.kept == 0 or self.objective is None:
            return
        value = row.get(self.objective["metric"])
        if isinstance(value, bool) or not isinstance(value, int | float):
            return
        if not math.isfinite(value):
            return
        better = self.best_value is None or (
            value > self.best_value if self.objective["direction"] == "maximize"
            else value < self.best_value
        )  # fmt: skip
        if better:
            self.best, self.best_epoch, self.best_value = snapshot(), epoch, float(value)

    def trained(self, model: Any, meta: dict[str, Any]) -> None:
        if self.policy.kept == 0:
            return
        if self.best is not None:
            model.load_state_dict(self.best)
            meta = {**meta, "epoch": self.best_epoch}
        self.model = (model, meta)

    def keep_model(self, state: str, objective: dict[str, str], value: float | None) -> bool:
        """Store the trained model if the trial ended `state` complete and the policy keeps
        it (module docstring); whether it did. Never raises for the store's refusal."""
        from workers.training.checkpoints import model_file

        if self.model is None or state != "complete":
            return False
        keep, direction = self.policy.kept, objective["direction"]
        try:
            if not with_retry(self.artifacts.ranks_within, self.sweep_id, value, direction, keep,
                              budget=self.budget):  # fmt: skip
                return False
            model, meta = self.model
            meta = {**meta, "trial_id": self.trial_id, "objective": value,
                    "metric": objective["metric"]}  # fmt: skip
            with_retry(self.artifacts.put, self.trial_id, "model", MODEL, model_file(model, meta),
                       sweep_id=self.sweep_id, attempt=self.attempt, objective=value,
                       meta={"metric": objective["metric"], "kind": meta.get("kind")},
                       budget=self.budget)  # fmt: skip
            with_retry(self.artifacts.trim_models, self.sweep_id, direction, keep,
                       budget=self.budget)  # fmt: skip
        except (InvalidQuery, StoreUnavailable) as exc:
            log.warning("trial %s: model not kept: %s", self.trial_id, exc)
            return False
        finally:
            self.model = None
        return True

    def ended(self, recorded: bool) -> None:
        """The attempt is over: wait for its checkpoint in flight; when its end was
        `recorded`, the trial's checkpoint is no longer needed (when it was not, another
        attempt holds the trial and may resume from it)."""
        self.wait()
        if recorded and (self.saved_any or self.attempt > 1):
            try:
                with_retry(self.artifacts.delete, self.trial_id, "checkpoint", budget=self.budget)
            except StoreUnavailable as exc:
                log.warning("trial %s: checkpoint left behind: %s", self.trial_id, exc)
