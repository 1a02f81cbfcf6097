"""Train a Caffe net as a trial: the solver's iterations, its test schedule as epoch rows.

A trial's config (`core.spec.caffe.trial.CaffeTrialConfig`) holds the net's and the solver's
texts with its values set. The worker builds the TRAIN and TEST graphs from the data set's
sample shape (`core.spec.caffe.net.build_graph`), the module (`CaffeNet`, weights drawn from a
generator seeded by the solver's ``random_seed``, or the trial's seed when it is -1), the
solver (`CaffeSolver`) and the images (`workers.training.caffe.images`), then trains as
Caffe's ``Solver::Step`` does:

- exactly ``max_iter`` iterations; each runs ``iter_size`` forward/backward passes of the
  TRAIN net on the next batches (the data layer's ``batch_size``, read in turn from the
  training split, whose rows are in a seeded random order, wrapping round as Caffe's
  database cursor does) and one solver update;
- an evaluation before iteration k whenever k is a multiple of ``test_interval`` (k > 0:
  the untrained net's evaluation that ``test_initialization`` asks for is not reported),
  and one after the last iteration, so the last row is the trained net (Caffe's own
  schedule, `core.spec.caffe.solver.evaluation_iterations`, tests after the last update only
  when ``max_iter`` is a multiple of ``test_interval``): ``test_iter`` batches of the TEST
  net's data layer from the start of the validation split, wrapping round (each
  evaluation reads the same batches, where Caffe's TEST cursor would go on);
- each evaluation is an epoch row (epochs count evaluations from 1): ``iteration`` (the
  updates made so far), ``train_loss`` (the weighted loss of the TRAIN net, averaged over
  the iterations since the last row), ``val_loss`` (the TEST net's, averaged over its
  batches), ``val_accuracy`` (its first Accuracy top, when it has one), every other loss or
  accuracy top as ``val_<top>``, ``lr`` (the base rate of the last update) and
  ``epoch_seconds``. Without ``test_interval`` or ``test_iter`` there is one row, at the
  end, without validation metrics.

**Checkpoints** (`workers.training.epochs.Checkpointing`) are taken after an evaluation when
due: the net, the solver's history, the iteration and the training data's cursor, as Caffe's
snapshot and ``.solverstate`` hold them; a later attempt resumes at that iteration.

``should_stop`` is asked before every iteration: a stopped trial keeps its rows (pruned or
cancelled, as `workers.runner.settle` decides). A non-finite loss is a `TrainingError`.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from core.errors import SpecError, TrainingError
from core.spec.caffe.net import NetGraph, build_graph, check_shared
from core.spec.caffe.prototxt import PrototxtError, parse
from core.spec.caffe.solver import SolverConfig, parse_solver
from core.spec.caffe.transform import parse_transform
from core.spec.caffe.trial import CaffeTrialConfig
from core.spec.config import ExecutionConfig
from workers.training.caffe.images import ImageSet, Transform, load_images, sequential_batch
from workers.training.caffe.model import CaffeNet
from workers.training.caffe.solver import CaffeSolver
from workers.training.checkpoints import CheckpointError
from workers.training.device import seed_torch, select_device
from workers.training.epochs import (
    Checkpointing,
    failures_as_results,
    fresh_seed,
    reporter,
    resume,
    run_epochs,
)
from workers.training.result import TrainResult

log = logging.getLogger(__name__)
#: The dtypes a Caffe net trains in (``execution.dtype``).
DTYPES = {"float32": torch.float32, "float64": torch.float64}
_NAME = re.compile(r"[^A-Za-z0-9_]")


def _spec_error(exc: SpecError | PrototxtError) -> TrainingError:
    text = "; ".join(str(p) for p in exc.problems) if isinstance(exc, SpecError) else str(exc)
    return TrainingError(f"the Caffe net or solver cannot be built: {text}")


class _Batches:
    """Batches of one split for one phase's data layer, read as a Caffe data layer's cursor
    moves: the next ``batch_size`` rows each time, wrapping round (`sequential_batch`; the
    split's rows are already in a seeded random order), the ``transform_param`` applied."""

    def __init__(
        self, x: torch.Tensor, y: torch.Tensor, graph: NetGraph, source: str, seed: int
    ) -> None:
        self.x, self.y, self.graph, self.phase = x, y, graph, graph.phase
        data = graph.data
        param = parse_transform(data.transform, data.layer, data.type, source)
        self.transform = Transform(param, int(x.shape[1]))
        self.batch = data.batch_size
        self.seed = seed
        self.restart()

    def restart(self) -> None:
        """Back to the first row, and the transform's draws (crop, mirror) as at the start:
        every evaluation reads the same batches."""
        self.step = 0
        self.draws = torch.Generator().manual_seed(self.seed)

    def next(self) -> dict[str, torch.Tensor]:
        """The next batch as the data layer's tops (images, then labels if it has them)."""
        x, y = sequential_batch(self.x, self.y, self.batch, self.step)
        self.step += 1
        data = self.graph.data
        out = {data.data_top: self.transform(x, self.phase, self.draws)}
        if data.label_top is not None:
            out[data.label_top] = y
        return out


def _metric(top: str) -> str:
    return _NAME.sub("_", top)


class CaffeTrainer:
    """One Caffe trial's state: graphs, module, solver, data; `run` trains it."""

    def __init__(self, raw: dict[str, Any], data_dir: Path | None) -> None:
        started = time.perf_counter()
        self.raw = raw
        self.config = config = CaffeTrialConfig.model_validate(raw)
        try:
            net = parse(config.caffe.net_text, config.caffe.net_source)
            self.solver_config: SolverConfig = parse_solver(
                parse(config.caffe.solver_text, config.caffe.solver_source),
                config.caffe.solver_source,
            )
        except (SpecError, PrototxtError) as exc:
            raise _spec_error(exc) from None
        solver = self.solver_config
        trial_seed = config.training.seed if config.training.seed is not None else fresh_seed()
        self.seed = solver.random_seed if solver.random_seed >= 0 else trial_seed
        self.device = select_device(ExecutionConfig(device=config.execution.device))
        self.dtype = DTYPES[config.execution.dtype]
        source = config.caffe.net_source
        self.images: ImageSet = load_images(
            config.dataset, resize=config.caffe.resize, base_dir=data_dir, dtype=self.dtype
        )
        shape, classes = self.images.shape, self.images.n_classes
        self.testing = solver.test_interval > 0 and solver.test_iter > 0
        try:
            self.train_graph = build_graph(net, "TRAIN", shape, classes, source, solver.train_state)
            self.test_graph = (
                build_graph(net, "TEST", shape, classes, source, solver.test_state)
                if self.testing
                else None
            )
            if self.test_graph is not None:
                check_shared(self.train_graph, self.test_graph)
            self.train_batches = _Batches(
                self.images.x_train.to(self.device),
                self.images.y_train.to(self.device),
                self.train_graph,
                source,
                self.seed + 1,
            )
            self.val_batches = (
                _Batches(
                    self.images.x_val.to(self.device),
                    self.images.y_val.to(self.device),
                    self.test_graph,
                    source,
                    self.seed + 2,
                )
                if self.test_graph is not None
                else None
            )
        except SpecError as exc:
            raise _spec_error(exc) from None
        seed_torch(self.seed, self.device)
        generator = torch.Generator().manual_seed(self.seed)
        self.model = CaffeNet(self.train_graph, self.test_graph, generator, self.dtype)
        self.model.to(self.device)
        self.solver = CaffeSolver(self.model.param_infos(), solver)
        self.accuracy = self._accuracy_top()
        self.iteration = 0  # the solver updates made so far
        self.setup_seconds = time.perf_counter() - started

    def _accuracy_top(self) -> str | None:
        if self.test_graph is None:
            return None
        for layer in self.test_graph.layers:
            if layer.type == "Accuracy":
                return layer.tops[0]
        return None

    def schedule(self) -> Iterator[int]:
        """The iterations before which an evaluation runs, the last one at ``max_iter``."""
        solver = self.solver_config
        if self.testing:
            yield from range(solver.test_interval, solver.max_iter, solver.test_interval)
        yield solver.max_iter

    def _iteration(self, iteration: int) -> float:
        self.model.train()
        self.solver.zero_grad()
        total = 0.0
        for _ in range(self.solver_config.iter_size):
            blobs = self.model(self.train_batches.next(), "TRAIN")
            loss = self.model.loss(blobs, "TRAIN")
            loss.backward()
            total += float(loss.detach())
        loss_value = total / self.solver_config.iter_size
        if not math.isfinite(loss_value):
            kind = "nan" if math.isnan(loss_value) else "inf"
            raise TrainingError(f"loss became {kind} at iteration {iteration}")
        self.solver.step(iteration)
        return loss_value

    @torch.no_grad()
    def evaluate(self, epoch: int) -> dict[str, float]:
        """The TEST net's loss and outputs over ``test_iter`` batches, averaged."""
        if self.val_batches is None:
            return {}
        self.model.eval()
        self.val_batches.restart()
        sums: dict[str, float] = {}
        batches = self.solver_config.test_iter
        for _ in range(batches):
            blobs = self.model(self.val_batches.next(), "TEST")
            sums["val_loss"] = sums.get("val_loss", 0.0) + float(self.model.loss(blobs, "TEST"))
            for top, value in self.model.outputs(blobs, "TEST").items():
                name = "val_accuracy" if top == self.accuracy else f"val_{_metric(top)}"
                sums[name] = sums.get(name, 0.0) + float(value)
        row = {name: total / batches for name, total in sums.items()}
        if not math.isfinite(row["val_loss"]):
            raise TrainingError(f"validation loss became {row['val_loss']} at epoch {epoch}")
        return row

    def state(self) -> dict[str, Any]:
        """The net's weights, the solver's state, the iteration, the data cursor and the
        random streams: what the next iterations depend on (a Caffe ``.solverstate``)."""
        return {
            "model": self.model.state_dict(),
            "solver": self.solver.state(),
            "iteration": self.iteration,
            "cursor": self.train_batches.step,
            "rng": {"torch": torch.get_rng_state(), "draws": self.train_batches.draws.get_state()},
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Take up a `state` of the same trial; `CheckpointError` when it does not fit."""
        try:
            self.model.load_state_dict(state["model"])
            self.solver.restore(state["solver"])
            self.iteration = int(state["iteration"])
            self.train_batches.step = int(state["cursor"])
            self.train_batches.draws.set_state(state["rng"]["draws"])
            torch.set_rng_state(state["rng"]["torch"])
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise CheckpointError(f"the checkpoint does not fit this trial: {exc}") from exc

    def run(
        self,
        on_epoch: Callable[[int, dict[str, float]], None] | None,
        should_stop: Callable[[], bool] | None,
        checkpoints: Checkpointing | None = None,
    ) -> TrainResult:
        """Train every evaluation's stretch of iterations as an epoch (`epochs.run_epochs`);
        with `checkpoints`, from the trial's last checkpoint (by iteration) and saving one
        after an evaluation when due."""
        untils = list(self.schedule())
        self.iteration = 0
        progress = resume(checkpoints, lambda state, meta: self.restore(state))
        report = reporter(progress, on_epoch, checkpoints, self.model,
                          lambda: (self.state(), {"seed": self.seed,
                                                  "iteration": self.iteration}))  # fmt: skip
        _, stopped = run_epochs(
            range(progress.first, len(untils) + 1),
            lambda epoch: self._epoch(epoch, untils[epoch - 1], should_stop),
            report,
            should_stop,
        )
        rows = progress.rows
        if checkpoints is not None and not stopped:
            checkpoints.trained(self.model, {
                "kind": "caffe", "config": self.raw, "shape": list(self.images.shape),
                "classes": self.images.n_classes, "task": "classification",
                "dtype": str(self.dtype).removeprefix("torch.")})  # fmt: skip
        return TrainResult.assemble(
            rows,
            rows[-1] if rows else {},
            param_count=self.train_graph.param_count,
            train_seconds=progress.seconds(),
            setup_seconds=self.setup_seconds,
            seed=self.seed,
            device=self.device,
            dtype=self.dtype,
            data=self.images,
            stopped_early=stopped,
        )

    def _epoch(
        self, epoch: int, until: int, should_stop: Callable[[], bool] | None
    ) -> dict[str, float] | None:
        """The iterations up to `until`, then an evaluation: the epoch's row, or None when
        `should_stop` ended it part-way. `should_stop` is asked before every iteration:
        `run_epochs` asks it before the first of each epoch (every epoch has one, as
        ``max_iter`` is at least 1), and this before each of the others."""
        since = time.perf_counter()
        losses = []
        for step, iteration in enumerate(range(self.iteration, until)):
            if step and should_stop is not None and should_stop():
                return None
            losses.append(self._iteration(iteration))
            self.iteration = iteration + 1
        row: dict[str, float] = {"epoch": epoch, "iteration": self.iteration}
        if losses:
            row["train_loss"] = sum(losses) / len(losses)
        row.update(self.evaluate(epoch))
        row["lr"] = self.solver.lr
        row["epoch_seconds"] = time.perf_counter() - since
        return row


def train_caffe(
    raw: dict[str, Any],
    *,
    on_epoch: Callable[[int, dict[str, float]], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    data_dir: Path | None = None,
    extra: dict[str, Any] | None = None,
    checkpoints: Checkpointing | None = None,
) -> TrainResult:
    """Train the Caffe trial `raw` describes (module docstring); `extra` gets its record's
    own fields: the layer table of the TRAIN net (the trial page shows it) and the dtype.
    With `checkpoints`, go on from the trial's last checkpoint (one that does not fit is
    noted, and the trial starts from iteration 0)."""

    def attempt() -> TrainResult:
        trainer = CaffeTrainer(raw, data_dir)
        if extra is not None:
            extra["layer_table"] = trainer.train_graph.layer_table()
            extra["dtype"] = trainer.config.execution.dtype
            extra["solver"] = trainer.solver_config.hyperparameters()
        return trainer.run(on_epoch, should_stop, checkpoints)

    def run() -> TrainResult:
        try:
            return attempt()
        except CheckpointError as err:
            if checkpoints is None:
                raise
            checkpoints.unusable(err)
            return attempt()

    return failures_as_results(run)
