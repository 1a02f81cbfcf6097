"""A grid's or random sweep's source: the points `scheduler.expand` lists, planned into
messages a block at a time (`PointList`), which a `scheduler.feed.Feeder` asks as an
adaptive search's feeder asks its `SearchSession`.

The whole list is known up front, so it goes out in a fixed order: longest-first by cost
(`scheduler.order.trial_cost`), or `scheduler.units.rung_order` when the sweep prunes (the
cheapest fifth first). It is planned in blocks the size of the feeder's first window, each
as the messages a first window of its points would go in (`scheduler.messages.batches`:
fused groups, chunks), so the trials fed after the first window are grouped and chunked as
the first, however few each later pass has room for. Where resolving the trials' configs
would take longer than `RESOLVE_SECONDS` for the whole sweep (its kind's `config_seconds`:
a grid of deep Caffe nets), the points keep the expansion's order and each block is
resolved when it is planned, that many seconds at most, so a submit and each step of the
scheduler stay short.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Collection
from typing import Any

from core.spec.kinds import kind_of
from core.spec.sweep import SweepSpec
from scheduler.expand import TrialPoint, expand
from scheduler.messages import Batch, batches
from scheduler.order import trial_cost
from scheduler.units import rung_order

#: The seconds of resolving trials' configs (and pricing them) a grid or random sweep spends
#: up front, and then on each block: where its kind says one trial takes long
#: (`core.spec.kind.TrialKind.config_seconds`: a Caffe net's texts rendered and built) and
#: the whole sweep would take longer than this, its points go in the order of the expansion,
#: resolved a block at a time.
RESOLVE_SECONDS = 2.0


class PointList:
    """A grid's or random sweep's points in the order they go out, planned into messages a
    block at a time (module docstring). `window`: the feeder's first window, a block's
    size; `workers`: the workers known, for the messages' grouping."""

    def __init__(self, spec: SweepSpec, window: int, workers: int | None) -> None:
        self.spec, self.window, self.workers = spec, window, workers
        points = expand(spec)
        seconds = kind_of(spec).config_seconds(spec)
        #: Points resolved a block at a time (`RESOLVE_SECONDS`): the block's size, else None.
        self.block: int | None = None
        self._base: dict[str, Any] = {}
        if seconds is not None and seconds * len(points) > RESOLVE_SECONDS:
            self.block = max(1, min(window, int(RESOLVE_SECONDS / seconds)))
            self._base = spec.base_config()
            self.points = points
        else:
            points = expand(spec, with_config=True)
            costs = {p.id: trial_cost(p.config) for p in points}
            self.points = sorted(points, key=lambda p: -costs[p.id])  # stable: ties in order
            if spec.pruning.enabled:
                self.points = rung_order(self.points)
        #: Point id -> point (its config resolved once its block was planned).
        self.by_id: dict[str, TrialPoint] = {p.id: p for p in points}
        #: Trials per message of the blocks planned (a fused group, a chunk takes one
        #: worker): the fair share counts messages, the window trials.
        self.per_message = 1.0
        self._next = 0  # position in `points`
        self._plan: deque[Batch] = deque()  # the planned block's messages not asked yet

    def __len__(self) -> int:
        return len(self.points)

    @property
    def ran_out(self) -> bool:
        """Whether every point was asked."""
        return not self._plan and self._next >= len(self.points)

    def next_batches(self, n: int, created: Collection[str]) -> list[Batch]:
        """The next planned messages, whole, until they hold `n` points or more (at most
        one message past `n`), skipping the points already `created`; where blocks are
        resolved as planned, one block a call at most."""
        out: list[Batch] = []
        count = 0
        planned = False
        while count < n:
            if not self._plan:
                if (planned and self.block is not None) or not self._plan_block(created):
                    break
                planned = True
            batch = self._plan.popleft()
            out.append(batch)
            count += len(batch.keys)
        return out

    def _plan_block(self, created: Collection[str]) -> bool:
        """Plan the next block of points not `created`, as the messages a first window of
        them would go in; whether there was a point left to plan."""
        block: list[TrialPoint] = []
        while len(block) < (self.block or self.window) and self._next < len(self.points):
            point = self.points[self._next]
            self._next += 1
            if point.id not in created:
                block.append(point)
        if self.block is not None:
            block = [self._resolved(point) for point in block]
        planned = batches(block, self.workers)
        if planned:
            self.per_message = len(block) / len(planned)
        self._plan.extend(planned)
        return bool(block)

    def _resolved(self, point: TrialPoint) -> TrialPoint:
        """`point` with its config (`expand`'s, for a sweep resolved a block at a time)."""
        config = self.spec.seeded_config(point.params, point.seed, self._base)
        resolved = dataclasses.replace(point, config=config)
        self.by_id[point.id] = resolved
        return resolved

    def created_count(self, created: Collection[str]) -> int:
        """How many of this list's points are among `created` (a narrowed grid's stored
        trials may hold points it no longer has)."""
        return sum(1 for key in created if key in self.by_id)

    def renumber(self, created: Collection[str], first: int) -> None:
        """Give the points not `created` yet indexes from `first` on, in the expansion's
        order: a changed sweep's new expansion may give them indexes of stored trials (a
        value added to the first dimension moves every later point), and a trial's index is
        unique in its sweep."""
        position = {p.id: i for i, p in enumerate(sorted(self.by_id.values(), key=_index_of))}
        for i, point in enumerate(self.points):
            if point.id not in created:
                moved = dataclasses.replace(point, index=first + position[point.id])
                self.points[i] = self.by_id[point.id] = moved


def _index_of(point: TrialPoint) -> int:
    return point.index
