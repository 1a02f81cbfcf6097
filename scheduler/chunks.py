"""Pack cheap trials into chunks: one message that trains a few trials one after another.

A trial that trains in a fraction of a second spends as much time in the platform as in
training: the broker's delivery of its message, Celery's handling of it, the claim. Under
``execution.fuse: auto`` (the default), the trials that `scheduler.grouping` leaves alone
and that are estimated to train in at most `CHEAP_SECONDS` go, a few at a time, into one
`workers.run_group` message marked ``sequential`` (Celery's chunks, for trials): the
worker claims them in one write and trains them one by one, unfused, each with the same
training function as a trial of its own, and writes each finish as soon as that trial
ends (`workers.group_runner`). So each trial's result is what it would be alone; only
the per-message costs are shared. A trial is chunked only when it is:

- under ``fuse: auto`` (``off`` and an integer keep one message per trial, as documented);
- of a kind whose trials may share a message (`core.spec.kind.TrialKind.chunks`: the
  built-in network, not a user's training function, not a Caffe net) on one process;
- estimated to train in at most `CHEAP_SECONDS` (`scheduler.cost.estimate_seconds`);

and a chunk holds at most `CHUNK_TRIALS` trials and `CHUNK_SECONDS` of estimated training.
Chunks never starve workers: the work is cut into at least `UNITS_PER_WORKER` units per
worker when it has that many trials, so a small window (an adaptive search asks a few
trials at a time) stays one message per trial. Pure logic: no torch, no broker, no store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from core.spec.fields import config_value
from core.spec.kinds import kind_of
from scheduler.cost import TRIAL_SECONDS, estimate_seconds

#: A trial estimated to train in at most this many seconds may share a message.
CHEAP_SECONDS = 0.25
#: The most estimated training seconds one chunk holds (its last trial waits this long).
CHUNK_SECONDS = 1.0
#: The most trials one chunk holds.
CHUNK_TRIALS = 32
#: Chunks leave at least this many units of work per worker (when there are the trials).
UNITS_PER_WORKER = 4


def chunkable(config: Mapping[str, Any]) -> bool:
    """Whether this trial may share a message with others (module docstring), its cost aside."""
    if not kind_of(config).chunks:
        return False
    if config_value(config, "execution.fuse") != "auto":
        return False
    return int(config_value(config, "execution.parallel.world_size")) <= 1


def training_seconds(config: Mapping[str, Any]) -> float:
    """The cost model's estimate of the trial's training alone, without the platform's part."""
    return max(0.0, estimate_seconds([config]) - TRIAL_SECONDS)


def chunk_units(
    units: Sequence[list[str]], configs: Mapping[str, Mapping[str, Any]], workers: int
) -> list[tuple[list[str], bool]]:
    """The units (groups of trial ids) with cheap lone trials packed into chunks.

    Returns (ids, sequential) per message, in the order of each message's first trial:
    ``sequential`` is True for a chunk of several trials trained one after another, False
    for a fused group or a lone trial (as `units` had them).
    """
    cheap: list[tuple[int, str, float]] = []
    kept: list[tuple[int, list[str], bool]] = []
    for position, ids in enumerate(units):
        if len(ids) == 1 and chunkable(configs[ids[0]]):
            seconds = training_seconds(configs[ids[0]])
            if seconds <= CHEAP_SECONDS:
                cheap.append((position, ids[0], seconds))
                continue
        kept.append((position, list(ids), False))
    others = len(kept)
    wanted = max(1, workers) * UNITS_PER_WORKER
    # The most trials a chunk may take and still leave `wanted` units in all.
    room = len(cheap) // (wanted - others) if wanted > others else CHUNK_TRIALS
    size = max(1, min(CHUNK_TRIALS, room))
    chunks: list[list[tuple[int, str, float]]] = []
    total = 0.0  # estimated seconds of the chunk being filled
    for item in cheap:
        if not chunks or len(chunks[-1]) >= size or total + item[2] > CHUNK_SECONDS:
            chunks.append([])
            total = 0.0
        chunks[-1].append(item)
        total += item[2]
    for chunk in chunks:
        kept.append((chunk[0][0], [trial_id for _, trial_id, _ in chunk], len(chunk) > 1))
    kept.sort(key=lambda item: item[0])
    return [(ids, sequential) for _, ids, sequential in kept]
