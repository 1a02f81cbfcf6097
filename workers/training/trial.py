"""`train`: one MLP trial, on this process or, when its config asks, on several.

It stands above both ways of training a trial, the one-process loop (`loop.Trainer`) and
the data-parallel ranks (`parallel`, which build on the loop), so that neither imports the
other's caller.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from core.spec.config import TrialConfig
from workers.training.checkpoints import CheckpointError
from workers.training.epochs import Checkpointing, failures_as_results
from workers.training.loop import Trainer
from workers.training.parallel import Hosts, train_parallel
from workers.training.result import TrainResult


def train(
    config: TrialConfig,
    *,
    on_epoch: Callable[[int, dict[str, float]], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    data_dir: Path | None = None,
    checkpoints: Checkpointing | None = None,
    hosts: Hosts | None = None,
) -> TrainResult:
    """Train the trial `config` describes and return its metrics.

    Raises `TrainingError` for failures that are the trial's result: non-finite loss, out of
    memory, a model that cannot be built, an unavailable device, bad data. A trial with
    `execution.parallel.world_size` above 1 trains on that many processes of this host (or
    of several hosts, `execution.parallel.hosts`, which `hosts` gathers).
    With `checkpoints`, the trial goes on from its last checkpoint (for a one-process trial,
    one that does not fit is noted, `Checkpointing.unusable`, and it starts from epoch 1; a
    data-parallel trial's ranks all take up rank 0's state).
    """
    if config.execution.parallel.enabled:
        return train_parallel(config, on_epoch=on_epoch, should_stop=should_stop,
                              data_dir=data_dir, checkpoints=checkpoints,
                              hosts=hosts)  # fmt: skip

    def run() -> TrainResult:
        try:
            return Trainer(config, data_dir).run(on_epoch, should_stop, checkpoints)
        except CheckpointError as err:
            if checkpoints is None:
                raise
            checkpoints.unusable(err)  # noted; `resumed` is None from now on
            return Trainer(config, data_dir).run(on_epoch, should_stop, checkpoints)

    return failures_as_results(run)
