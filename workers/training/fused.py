"""Fused training: K compatible trials trained as one stacked model on one device.

`train_fused(configs)` gives each trial what `train(config)` would give it alone (the
same per-epoch rows, keys and values, the same failures with the same reasons) while
paying the per-step overhead of one model instead of K. `scheduler.grouping` decides
which trials are compatible; `check_compatible` refuses anything else.

What each model keeps for itself, and how it stays faithful to its unfused twin:

- **Weights**: built by `build_mlp` right after `seed_torch(seed, device)`, exactly as
  the unfused loop does, and copied into the stacks (`workers.training.fused_model`).
- **Data order**: its own ``torch.Generator`` seeded with its seed draws its own
  permutation every epoch; a step gathers each model's batch into [K, B, features].
- **Dropout**: masks from its own copy of its seeded stream (`fused_model` explains,
  with the CUDA caveat).
- **Optimiser**: its own learning rate (schedule included), weight decay, momentum and
  betas, as tensors in `workers.training.fused_optim`'s updates.
- **Loss**: its own batch mean; the sum over models is what backward runs on, so each
  model's gradient is exactly its own loss's.
- **Failure**: a loss that turns NaN or infinite, or a validation loss that does, fails
  that model alone with the unfused reason; it is removed from the stacks (with its
  optimiser state) and the others go on. So does a model whose `should_stop(k)` turns
  true (cancelled, pruned, claim lost): it ends stopped early, as `train` would end it,
  and from the next step on the group computes for the others only (`on_epoch_end` sees
  the stacked parameters shrink).

Shared by the group (`check_compatible`): dataset, batch size, epochs, depth,
activation, batch norm, optimiser kind, device and dtype. float16 is refused: its
`GradScaler` skips a step for all parameters when any overflows, which in a group would
let one model's overflow skip the others' steps. Timing is the group's: `epoch_seconds`
is the fused epoch's wall time and `train_seconds` (in each row, and the trial's) the
group's, for every member.

**Sizing.** A group whose training state does not fit is trained in consecutive chunks
that do (`workers.training.fused_plan`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from core.errors import TrainingError
from core.spec.config import TrialConfig
from workers.training.checkpoints import CheckpointError
from workers.training.device import MIXED_DTYPES, seed_torch
from workers.training.epochs import Checkpointing, fresh_seed, oom_reason, weights_copy
from workers.training.fused_model import FusedMLP, parameter_count
from workers.training.fused_optim import FusedOptimizer, LrClock
from workers.training.fused_plan import GroupData, chunks, fit_count
from workers.training.loop import CHECK_EVERY_STEPS, EVAL_CHUNK_ROWS
from workers.training.models import build_mlp, check_fits, model_meta
from workers.training.result import TrainResult

logger = logging.getLogger(__name__)

Outcome = TrainResult | TrainingError
#: Elements of one evaluation chunk across all models ([K, rows, width]).
EVAL_CHUNK_ELEMENTS = 1 << 25
#: Fields every member of a group shares (besides the whole dataset section).
SHARED_FIELDS = (
    ("model", "kind"),
    ("model", "hidden_layers"),
    ("model", "activation"),
    ("model", "batch_norm"),
    ("training", "optimizer"),
    ("training", "batch_size"),
    ("training", "epochs"),
    ("execution", "device"),
    ("execution", "dtype"),
)


def check_compatible(configs: list[TrialConfig]) -> None:
    """Raise `ValueError` naming the first field that keeps these trials from fusing."""
    if not configs:
        raise ValueError("a fused group needs at least one trial")
    first = configs[0]
    if first.execution.dtype == "float16":
        raise ValueError("execution.dtype float16 cannot be fused (its GradScaler is global)")
    for k, config in enumerate(configs[1:], start=1):
        if config.dataset != first.dataset:
            raise ValueError(f"trial {k}: dataset differs from trial 0's; it cannot be fused")
        for section, key in SHARED_FIELDS:
            mine, theirs = (
                getattr(getattr(config, section), key),
                getattr(getattr(first, section), key),
            )
            if mine != theirs:
                raise ValueError(
                    f"trial {k}: {section}.{key} is {mine!r} but trial 0's is {theirs!r}; "
                    "fused trials must share it"
                )


@dataclass(frozen=True)
class FusedEpoch:
    """What `train_fused`'s `on_epoch_end` is told after each fused epoch: the epoch, the
    trials (positions in `configs`) still training, and the elements of the stacked
    parameters, which every step computes over (it shrinks as members leave)."""

    epoch: int
    members: tuple[int, ...]
    parameters: int


@dataclass
class _Member:
    """One trial of the group: its place in `configs`, seed, data order, lr, results."""

    index: int
    config: TrialConfig
    seed: int
    shuffle: torch.Generator
    clock: LrClock
    param_count: int
    metrics: list[dict[str, float]] = field(default_factory=list)
    before: float = 0.0  # seconds trained before a resume


def train_fused(
    configs: list[TrialConfig],
    *,
    on_epoch: Callable[[int, int, dict[str, float]], None] | None = None,
    should_stop: Callable[[int], bool] | None = None,
    on_done: Callable[[int, Outcome], None] | None = None,
    data_dir: Path | None = None,
    on_epoch_end: Callable[[FusedEpoch], None] | None = None,
    checkpoints: Sequence[Checkpointing | None] | None = None,
) -> list[Outcome]:
    """Train `configs` as one fused model; outcome k is trial k's `TrainResult` or error.

    `on_epoch(k, epoch, row)` gets each model's rows as `train`'s `on_epoch` would;
    `on_epoch_end` is called once after each epoch's rows (a watched group checks for
    prune requests there); `should_stop(k)` ends model k early, before the next epoch or
    within it; `on_done(k, outcome)` is called once per model, as soon as it ends (a
    diverged model before the others finish). Raises `ValueError` for trials that cannot
    be fused (`check_compatible`).

    `checkpoints[k]` (None: none) is model k's (`workers.training.epochs.Checkpointing`): a
    model with a checkpoint takes up its own slice of the state (weights, optimiser state,
    data order, dropout stream, schedule) and trains on from the epoch after it, in a run
    with the models resumed at the same epoch; each saves its slice when due, as a plain
    model's state, and hands over its trained model as a plain `build_mlp` module.
    """
    check_compatible(configs)
    outcomes: list[Outcome | None] = [None] * len(configs)

    def done(k: int, outcome: Outcome) -> None:
        outcomes[k] = outcome
        if on_done is not None:
            on_done(k, outcome)

    try:
        shared = GroupData(configs[0], data_dir)
    except TrainingError as err:
        for k in range(len(configs)):
            done(k, err)
        return outcomes  # type: ignore[return-value]
    saving = list(checkpoints) if checkpoints is not None else [None] * len(configs)
    resumes = _resumes(configs, shared, saving)
    by_start: dict[int, list[int]] = {}
    for k in range(len(configs)):
        by_start.setdefault(int(resumes[k][1]["epoch"]) if k in resumes else 0, []).append(k)
    runs = [
        [ids[i] for i in part]
        for ids in by_start.values()
        for part in chunks(len(ids), fit_count([configs[i] for i in ids], shared))
    ]
    for chunk in runs:
        reason = None
        try:
            group = _Group(configs, chunk, shared, done, resumes, saving)
            group.run(on_epoch, should_stop, on_epoch_end)
        except (torch.OutOfMemoryError, MemoryError, RuntimeError) as err:
            reason = oom_reason(err)  # worded as `train` words it
            if reason is None:
                raise
        except TrainingError as err:  # a rule of the whole group, such as batch norm's
            reason = err.reason
        if reason is not None:
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            for k in chunk:
                if outcomes[k] is None:
                    done(k, TrainingError(reason.strip()))
    return outcomes  # type: ignore[return-value]


def _resumes(
    configs: list[TrialConfig], shared: GroupData, saving: list[Checkpointing | None]
) -> dict[int, tuple[Any, dict[str, Any]]]:
    """The checkpoints the models take up, by position: each one read, and its weights
    tried on a fresh model of its config; one that does not fit is noted and left out."""
    out: dict[int, tuple[Any, dict[str, Any]]] = {}
    for k, saver in enumerate(saving):
        found = saver.resumed() if saver is not None else None
        if saver is None or found is None:
            continue
        state, meta = found
        try:
            with torch.random.fork_rng(devices=[]):
                net = build_mlp(configs[k].model, shared.data.n_features,
                                shared.data.out_features, dtype=shared.param_dtype)  # fmt: skip
            net.load_state_dict(state["model"])
            if not isinstance(state["optimizer"]["steps"], int) or "shuffle" not in state["rng"]:
                raise KeyError("optimizer steps or data order")
        except (KeyError, TypeError, RuntimeError) as exc:
            saver.unusable(CheckpointError(f"the checkpoint does not fit this trial: {exc}"))
            continue
        out[k] = (state, meta)
        saver.resuming(meta)
    return out


class _Group:
    """The members of one fused run and their stacked model, optimiser and results."""

    def __init__(
        self,
        configs: list[TrialConfig],
        chunk: list[int],
        shared: GroupData,
        done: Callable[[int, Outcome], None],
        resumes: dict[int, tuple[Any, dict[str, Any]]] | None = None,
        saving: list[Checkpointing | None] | None = None,
    ) -> None:
        started = time.perf_counter()
        resumes = resumes or {}
        self.shared, self.done = shared, done
        self.saving = saving or [None] * len(configs)
        self.first = configs[chunk[0]]
        self.start = int(resumes[chunk[0]][1]["epoch"]) if chunk[0] in resumes else 0
        self.mixed = shared.dtype in MIXED_DTYPES
        n_in, n_out = shared.data.n_features, shared.data.out_features
        self.members: list[_Member] = []
        models, streams = [], []
        for k in chunk:
            config = configs[k]
            seed = config.training.seed if config.training.seed is not None else fresh_seed()
            state, meta = resumes.get(k, (None, {}))
            try:
                # The unfused loop's order: seed, then its shuffle generator, then the model.
                seed_torch(seed, shared.device)
                shuffle = torch.Generator().manual_seed(seed)
                check_fits(config.model, n_in, n_out, shared.device, shared.param_dtype)
                net = build_mlp(
                    config.model, n_in, n_out, device=shared.device, dtype=shared.param_dtype
                )
                clock = LrClock(config.training)
            except TrainingError as err:
                done(k, err)
                continue
            stream = self._dropout_stream(config, seed)
            if state is not None:
                net.load_state_dict(state["model"])
                shuffle.set_state(state["rng"]["shuffle"])
                if stream is not None and state["rng"].get("dropout") is not None:
                    stream.set_state(state["rng"]["dropout"])
                for _ in range(self.start):
                    clock.end_epoch()
            models.append(net)
            streams.append(stream)
            (count,) = parameter_count([net])
            member = _Member(k, config, seed, shuffle, clock, count)
            member.metrics = list(meta.get("metrics", []))
            member.before = float(meta.get("train_seconds", 0.0))
            self.members.append(member)
        self.model: FusedMLP | None = None
        if self.members:
            self.model = FusedMLP(models, [m.config.model for m in self.members], streams)
            trainings = [m.config.training for m in self.members]
            self.optimizer = FusedOptimizer(self.first.training.optimizer, trainings)
            if self.start:
                self.optimizer.load_members(
                    self.model.parameters(),
                    [resumes[m.index][0]["optimizer"] for m in self.members],
                    [self.model.member_slices(p) for p in range(len(self.members))],
                )
        self._plain_models: dict[int, torch.nn.Module] = {}  # by member index: `_plain`
        self.setup_seconds = time.perf_counter() - started
        self.started = time.perf_counter()

    def _plain(self, position: int, member: _Member) -> torch.nn.Module:
        """The member at `position` as the plain model `train` would have trained: its own
        `build_mlp` module, built once (its best epoch's weights, its checkpoints and its
        trained model are each a copy into it), with the member's weights as they are now."""
        assert self.model is not None
        net = self._plain_models.get(member.index)
        if net is None:
            shared = self.shared
            with torch.random.fork_rng(devices=[]):  # the global stream is left as it was
                net = build_mlp(member.config.model, shared.data.n_features,
                                shared.data.out_features, device=shared.device,
                                dtype=shared.param_dtype)  # fmt: skip
            self._plain_models[member.index] = net
        return self.model.copy_into(position, net)

    def _state(self, position: int, member: _Member, epoch: int) -> tuple[Any, dict[str, Any]]:
        """The member's own slice of the group's state after `epoch`, for its checkpoint."""
        assert self.model is not None
        stream = self.model.streams[position]
        state = {
            "model": self._plain(position, member).state_dict(),
            "optimizer": self.optimizer.member_state(self.model.member_slices(position)),
            "rng": {
                "shuffle": member.shuffle.get_state(),
                "dropout": stream.get_state() if stream is not None else None,
            },
        }
        meta = {
            "epoch": epoch,
            "metrics": list(member.metrics),
            "train_seconds": member.before + time.perf_counter() - self.started,
            "seed": member.seed,
        }
        return state, meta

    def _dropout_stream(self, config: TrialConfig, seed: int) -> torch.Generator | None:
        if config.model.dropout <= 0:
            return None
        if self.shared.device.type == "cpu":
            stream = torch.Generator()
            stream.set_state(torch.get_rng_state())  # the global stream just after init
            return stream
        return torch.Generator(device=self.shared.device).manual_seed(seed)

    # -- ending models -----------------------------------------------------------------

    def _result(
        self, member: _Member, stopped: bool, final: dict[str, float] | None = None
    ) -> TrainResult:
        shared = self.shared
        return TrainResult.assemble(
            member.metrics,
            final if final is not None else (member.metrics[-1] if member.metrics else {}),
            param_count=member.param_count,
            train_seconds=member.before + time.perf_counter() - self.started,
            setup_seconds=self.setup_seconds,
            seed=member.seed,
            device=shared.device,
            dtype=shared.dtype,
            data=shared.data,
            stopped_early=stopped,
        )

    def _remove(self, ended: dict[int, Outcome | None]) -> list[int]:
        """End the members at these positions (None: stopped early); the positions kept."""
        for position, outcome in ended.items():
            member = self.members[position]
            self.done(member.index, outcome or self._result(member, stopped=True))
        kept = [p for p in range(len(self.members)) if p not in ended]
        self.members = [self.members[p] for p in kept]
        if self.members and self.model is not None:
            self.model.keep(kept)
            self.optimizer.keep(kept)
        return kept

    def _stops(self, should_stop: Callable[[int], bool] | None) -> dict[int, Outcome | None]:
        if should_stop is None:
            return {}
        return {p: None for p, m in enumerate(self.members) if should_stop(m.index)}

    # -- training ----------------------------------------------------------------------

    def run(
        self,
        on_epoch: Callable[[int, int, dict[str, float]], None] | None,
        should_stop: Callable[[int], bool] | None,
        on_epoch_end: Callable[[FusedEpoch], None] | None = None,
    ) -> None:
        epochs = self.first.training.epochs
        if epochs == 0 and self.members:
            self._untrained()
            return
        for epoch in range(self.start + 1, epochs + 1):
            self._remove(self._stops(should_stop))
            if not self.members:
                return
            rows = self._epoch(epoch, should_stop)
            for member, row in zip(self.members, rows, strict=True):
                row["train_seconds"] = member.before + time.perf_counter() - self.started
                member.metrics.append(row)
                logger.debug("trial %d epoch %d: %s", member.index, epoch, row)
                if on_epoch is not None:
                    on_epoch(member.index, epoch, row)
            if on_epoch_end is not None and self.members and self.model is not None:
                size = sum(p.numel() for p in self.model.parameters())
                on_epoch_end(FusedEpoch(epoch, tuple(m.index for m in self.members), size))
            for position, member in enumerate(self.members):
                saver = self.saving[member.index]
                if saver is not None:
                    saver.epoch_model(epoch, member.metrics[-1],
                                      lambda p=position, m=member: weights_copy(self._plain(p, m)))
                    saver.after_epoch(
                        epoch, lambda p=position, m=member, e=epoch: self._state(p, m, e)
                    )
        for position, member in enumerate(self.members):
            saver = self.saving[member.index]
            if saver is not None:
                saver.trained(self._plain(position, member), model_meta(
                    member.config, self.shared.data, self.shared.param_dtype))  # fmt: skip
            self.done(member.index, self._result(member, stopped=False))
        logger.info(
            "trained %d fused model(s) for %d epoch(s) in %.3fs (setup %.3fs)",
            len(self.members),
            epochs,
            time.perf_counter() - self.started,
            self.setup_seconds,
        )

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.mixed:
            return torch.autocast(self.shared.device.type, dtype=self.shared.dtype)
        return contextlib.nullcontext()

    def _forward(self, x: torch.Tensor, train: bool) -> torch.Tensor:
        assert self.model is not None
        with self._autocast():
            out = self.model(x, train)
        out = out.to(self.shared.metric_dtype)
        return out if self.shared.classification else out.squeeze(-1)

    def _losses(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Each model's summed loss over its rows: [K] from out [K, rows, ...], y [K, rows]."""
        if self.shared.classification:
            # The classes on dim 1 ([K, classes, rows]): torch's log-softmax then runs
            # vectorised across the rows, 4x faster (forward and backward) than over the
            # few innermost classes of [K * rows, classes], and to the same bits.
            return F.cross_entropy(out.transpose(1, 2), y, reduction="none").sum(1)
        return F.mse_loss(out, y.to(out.dtype), reduction="none").sum(1)

    def _epoch(self, epoch: int, should_stop: Callable[[int], bool] | None) -> list[dict]:
        """Train one epoch and validate; the rows of the members still in the group."""
        assert self.model is not None
        started = time.perf_counter()
        shared = self.shared
        n = shared.x_train.shape[0]
        batch = min(self.first.training.batch_size, n)
        steps, used = math.ceil(n / batch), n
        if self.first.model.batch_norm:
            if batch < 2:
                raise TrainingError(
                    "model.batch_norm needs batches of 2 or more rows, but "
                    f"training.batch_size is {self.first.training.batch_size} and the training "
                    f"split has {n} row(s)"
                )
            if n % batch == 1:  # as the unfused loop: leave a lone last row out
                steps, used = steps - 1, n - 1
        lrs = [m.clock.lr for m in self.members]
        orders = torch.stack([torch.randperm(n, generator=m.shuffle) for m in self.members])
        orders = orders.to(shared.device)
        losses = torch.empty(
            steps, len(self.members), dtype=shared.metric_dtype, device=orders.device
        )
        checked = 0
        for step in range(steps):
            index = orders[:, step * batch : (step + 1) * batch]
            out = self._forward(shared.x_train[index], train=True)
            loss = self._losses(out, shared.y_train[index]) / index.shape[1]
            self.model.zero_grad()
            loss.sum().backward()
            self.optimizer.step(self.model.parameters(), lrs)
            losses[step] = loss.detach()
            if (step + 1) % CHECK_EVERY_STEPS == 0 or step + 1 == steps:
                ended = self._diverged(losses[checked : step + 1], epoch, checked)
                checked = step + 1
                if step + 1 < steps:
                    ended.update({p: None for p in self._stops(should_stop) if p not in ended})
                if ended:
                    kept = self._remove(ended)
                    if not self.members:
                        return []
                    rows = torch.tensor(kept, device=orders.device)
                    orders, losses = orders.index_select(0, rows), losses.index_select(1, rows)
                    lrs = [lrs[p] for p in kept]
        sizes = torch.full((steps, 1), batch, dtype=shared.metric_dtype, device=losses.device)
        sizes[-1] = used - batch * (steps - 1)
        train_losses = ((losses * sizes).sum(0) / used).tolist()
        evaluated = self._evaluate(shared.x_val, shared.y_val, "val", epoch)
        failed = {p: e for p, e in enumerate(evaluated) if isinstance(e, TrainingError)}
        rows = []
        for position, member in enumerate(self.members):
            if position in failed:
                continue
            row: dict[str, float] = {"epoch": epoch, "train_loss": train_losses[position]}
            row.update(evaluated[position])  # type: ignore[arg-type]
            row["lr"] = lrs[position]
            member.clock.end_epoch()
            rows.append(row)
        if failed:
            self._remove(failed)  # type: ignore[arg-type]
        seconds = time.perf_counter() - started
        for row in rows:
            row["epoch_seconds"] = seconds
        return rows

    def _diverged(self, losses: torch.Tensor, epoch: int, offset: int) -> dict[int, Outcome | None]:
        """The members whose loss in this window went NaN or infinite, with the unfused reason."""
        finite = torch.isfinite(losses)
        if bool(finite.all()):
            return {}
        out: dict[int, Outcome | None] = {}
        for position in (~finite).any(0).nonzero().flatten().tolist():
            first = int((~finite[:, position]).nonzero()[0])
            kind = "nan" if math.isnan(float(losses[first, position])) else "inf"
            out[position] = TrainingError(
                f"loss became {kind} at epoch {epoch}, step {offset + first + 1}"
            )
        return out

    def _untrained(self) -> None:
        started = time.perf_counter()
        shared = self.shared
        train = self._evaluate(shared.x_train, shared.y_train, "train", 0)
        val = self._evaluate(shared.x_val, shared.y_val, "val", 0)
        for member, on_train, on_val in zip(self.members, train, val, strict=True):
            if isinstance(on_train, TrainingError) or isinstance(on_val, TrainingError):
                error = on_train if isinstance(on_train, TrainingError) else on_val
                self.done(member.index, error)  # type: ignore[arg-type]
                continue
            row: dict[str, float] = {"epoch": 0, "train_loss": on_train["train_loss"]}
            row.update(on_val)
            row["lr"] = member.clock.lr
            row["epoch_seconds"] = time.perf_counter() - started
            row["train_seconds"] = 0.0
            self.done(member.index, self._result(member, stopped=False, final=row))
        self.members = []

    @torch.no_grad()
    def _evaluate(
        self, x: torch.Tensor, y: torch.Tensor, prefix: str, epoch: int
    ) -> list[dict[str, float] | TrainingError]:
        """Each member's loss and accuracy (or RMSE) on the shared `x`, `y`, as `train` has it."""
        shared = self.shared
        count = len(self.members)
        widest = max([x.shape[1], *(max(m.config.model.widths, default=0) for m in self.members)])
        rows = max(1, min(EVAL_CHUNK_ROWS, EVAL_CHUNK_ELEMENTS // (count * widest)))
        total = torch.zeros(count, dtype=torch.float64, device=shared.device)
        correct = torch.zeros(count, dtype=torch.int64, device=shared.device)
        for start in range(0, x.shape[0], rows):
            out = self._forward(x[start : start + rows], train=False)
            target = y[start : start + rows].expand(count, -1)
            total += self._losses(out, target).double()
            if shared.classification:
                correct += (out.argmax(dim=2) == target).sum(1)
        n = x.shape[0]
        results: list[dict[str, float] | TrainingError] = []
        for loss_sum, hits in zip(total.tolist(), correct.tolist(), strict=True):
            loss = loss_sum / n
            if not math.isfinite(loss):
                kind = "nan" if math.isnan(loss) else "inf"
                where = "validation" if prefix == "val" else "training"
                results.append(TrainingError(f"{where} loss became {kind} at epoch {epoch}"))
            elif shared.classification:
                results.append({f"{prefix}_loss": loss, f"{prefix}_accuracy": hits / n})
            else:
                rmse = math.sqrt(loss) * shared.data.target_std
                results.append({f"{prefix}_loss": loss, f"{prefix}_rmse": rmse})
        return results
