"""The feeding loop: one path from a sweep's search to the queue, for every algorithm.

A `Feeder` keeps a sweep's window of trials in flight (queued or running): it asks its
source for new points, stores them (`Feeding.add_trials`, idempotent by trial id; the
window's ids noted first in the sweep's ``sending`` list), sends them (`send_window`:
`scheduler.messages`, fused groups and chunks, longest first), empties the list,
tells the search each finished trial and, when the sweep prunes, decides which running
trials stop (`scheduler.prune_decision`). `scheduler.submit.submit_sweep` asks a new
sweep's first window of a `Feeder` and sends it; the `sweepstack scheduler` loop (and
`sweepstack run`, in-process) steps `Feeder.open`'s feeder through the rest.

Sources, and why two:

- grid and random without pruning take the points `scheduler.expand` lists (the same ids,
  order and seeds as `sweepstack generate`), ordered longest-first up front (costs are
  known), in windows of `big_window` (no Optuna is imported: fast start-up), planned into
  the messages of a first window a block at a time (`scheduler.point_list.PointList`, which
  also resolves the configs a block at a time where resolving the whole sweep would take
  longer than `RESOLVE_SECONDS`); a pass sends whole messages of its block (at most one
  message past its room), so the trials fed after the first window are grouped and chunked
  as the first (an adaptive search's units are the same idea, `scheduler.units`);
- every other sweep has a `SearchSession` (Optuna): adaptive algorithms ask it; grid and
  random with pruning add their expanded points to it, so the pruner sees every trial,
  and go in `scheduler.units.rung_order` (the cheapest fifth first).

An adaptive search asks in units of points that train together (`scheduler.units`), and
its window counts units: a place frees when every trial of a unit ended, and
`judge_until` sees it and lets the caller step at once.

Window: at most `parallelism` trials in flight for a session (``search.parallelism``, else
`PARALLELISM_PER_WORKER` x the workers known, else `DEFAULT_PARALLELISM`), units for an
adaptive one, `big_window` for grid/random without pruning; and, where the scheduler knows
the workers online, no more than twice the sweep's fair share of them (`share_window`,
`core.shares`; a grid's counts its messages, `per_message`), so the queue never holds
much more than the workers can start soon, and a sweep submitted behind a large one starts
within about one trial's time. The sweep's size is known up
front (``search.trials``, or the expansion's length) and stored as planned trials: exactly
that many are ever created, fewer only when a search's space runs out
(`Feeding.shrink_plan`).

Restarts (kill -9 at any point): the session is rebuilt from the stored trials (Optuna
number, params, state, objective (every objective's for several, and the constraints'
violations), pruned-metric epochs, system attrs; the sweep's study
attrs), so no point is asked twice and a seeded sweep asks the same points; a trial stored
but maybe never sent (the sweep's ``sending`` list) is sent again; ``planned`` is repaired
from the count of trials.
One feeder per sweep: the store's lease (`core.store.feeding`), renewed every step.

Pause and change (`core.store.changes`): a paused sweep's feeder tells the search the
trials that end and sends nothing new; once resumed, it first sends again the trials a
worker left queued meanwhile (the sweep's ``held`` list: `core.store.lifecycle`'s claim
starts no trial of a paused sweep). A changed spec (its ``spec_rev`` moved) stops the feeder
(`respecified`); the one opened next rebuilds from the stored trials on the new spec, as
after a restart, and sets the planned trials to exactly those of the new spec not created
yet (`Feeding.replan`; a grid's new points get indexes after the stored ones:
`PointList.renumber`), so no point is asked twice and an adaptive search keeps all it learned.

Decisions at the rung: a watched trial's message says at which epochs its worker waits for
the pruner (``decide_at``, `core.spec.search.decision_epochs`: successive halving's rungs,
or every epoch). Between two steps the scheduler calls `judge` every `JUDGE_SECONDS` while
such a wait may be on (`judge_until`): it reads which trials wait and the epoch's metrics
each waits at (its progress: at a successive-halving rung, or as the only new epoch, all the
pruner needs; other rows are read), asks Optuna's pruner, and requests the prunes and marks
the other epochs judged, in one write (`Feeding.mark_judged`); the worker reads its
decision at once and stops or trains on. A pruned trial so trains no epoch that Optuna's
pruner, deciding in one process on the same reports, would not have let it (DESIGN.md).
A pruner that judges a trial on its own reports and the complete trials' alone (median,
percentile, threshold, patient: `core.spec.search.IN_WORKER`) is run by the worker itself
(`workers.pruning`): the scheduler then decides nothing and reads a pruned trial's rows only
to tell the search of it (`_report_pruned`).

Counts that stopped moving: a process killed between a trial's write and its sweep's
counter write leaves the counts one off (`core.store.store`), e.g. a trial counted running
forever, so the sweep would never end. A step that finds trials in flight but the counts
unchanged (``counts_rev``) for `STALL_SECONDS` recounts them from the trials
(`SweepAdmin.recount`); while they still do not move the wait doubles, up to
`MAX_STALL_SECONDS` (a long epoch is no drift, and a recount reads the whole sweep).
Drifts that cancel out are recounted at once: a claim's counter write lost leaves one trial
"queued" too many, and its end then one "running" too few, so nothing looks in flight while
the sweep still looks unfinished.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from celery import Celery

from core.errors import NotFound, StoreUnavailable, SweepstackError
from core.settings import Settings
from core.shares import MESSAGE_PRIORITY
from core.spec.kinds import kind_of
from core.spec.search import IN_WORKER, decides, decision_epochs
from core.spec.sweep import SweepSpec, load_spec
from core.states import TERMINAL_STATES, TrialState
from core.store.records import flatten_params
from core.store.roles import Awaiting
from core.store.store import Store
from scheduler.enqueue import Outgoing, enqueue
from scheduler.expand import TrialPoint
from scheduler.grouping import shared_dimensions
from scheduler.messages import Batch, messages, unit_messages
from scheduler.point_list import PointList
from scheduler.prune_decision import decide, pruned_value
from scheduler.rank_judge import RankJudge
from scheduler.units import ADAPTIVE_GROUP_CAP, ask_unit, by_unit, unit_keys

log = logging.getLogger(__name__)

DEFAULT_PARALLELISM = 8
PARALLELISM_PER_WORKER = 2
#: Trials in flight for grid and random without pruning: their order is fixed, so a large
#: window costs nothing but keeps every worker busy between the feeder's steps. Entry
#: points pass ``SWEEPSTACK_FEED_WINDOW`` (`Settings.feed_window`, this by default).
BIG_WINDOW: int = Settings.__dataclass_fields__["feed_window"].default
LEASE_SECONDS = 30.0
STALL_SECONDS = 20.0
MAX_STALL_SECONDS = 600.0
#: Seconds between two pruning decisions while a trial may be waiting for one (`judge_until`).
JUDGE_SECONDS = 0.005
#: The longest wait between two looks while no trial was found waiting (`judge_until`).
JUDGE_MAX_SECONDS = 0.025
#: A step renews the feeding lease once this share of it has passed since the last renewal
#: (so it never lapses while the feeder steps, and a feeder that stalled renews, or learns
#: that it lost the lease, before it acts).
RENEW_SHARE = 0.25
#: The longest a step goes without reading its trials in flight (`Feeder._tell_and_prune`)
#: while the sweep's counts say none ended: counts that drifted are caught this soon.
TELL_SECONDS = 1.0
#: How often a step reads the rows of every running trial for the pruner (`judge` decides
#: at once where workers wait for it): for a trial that waited in vain once and no longer
#: waits.
STEP_PRUNE_SECONDS = 1.0

_LIVE = (TrialState.QUEUED.value, TrialState.RUNNING.value)
_RUNNING = TrialState.RUNNING.value
_ENDED = tuple(state.value for state in TERMINAL_STATES)


def owner_name() -> str:
    """A lease owner unique to this process: host, pid and a random tag."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def needs_session(spec: SweepSpec) -> bool:
    """Whether a sweep's feeder needs Optuna: adaptive search, or pruning."""
    return spec.search.adaptive or spec.pruning.enabled


def parallelism(spec: SweepSpec, workers: int | None) -> int:
    """Trials in flight at once for a session-fed sweep (module docstring)."""
    if spec.search.parallelism:
        return spec.search.parallelism
    return PARALLELISM_PER_WORKER * workers if workers else DEFAULT_PARALLELISM


class Feeder:
    """Feeds one sweep; build it with `Feeder.open`, then call `step` until it says done,
    and `close` it to give its lease back.

    Built directly, it is the source of a sweep not stored yet (`sweep_id` ""):
    `scheduler.submit.submit_sweep` asks it the first window (`ask`). `total` is the
    sweep's size, `window` how many of its trials may be in flight, `session` its Optuna
    search (None for grid or random without pruning).

    Not thread-safe; the store's lease keeps other schedulers off the sweep.
    """

    def __init__(
        self,
        store: Store,
        app: Celery,
        sweep_id: str,
        spec: SweepSpec,
        *,
        owner: str,
        workers: int | None = None,
        big_window: int = BIG_WINDOW,
        lease_seconds: float = LEASE_SECONDS,
        warm: Sequence[Any] = (),
    ) -> None:
        self.store, self.app, self.sweep_id, self.spec = store, app, sweep_id, spec
        self._warm = warm  # earlier sweeps' trials for the session (`scheduler.warm`)
        self.owner, self.workers, self.lease_seconds = owner, workers, lease_seconds
        self.watch = spec.pruning.enabled
        # Where a watched trial's worker waits for the pruner's decision (module docstring),
        # or decides itself (`in_worker`).
        self.decide_at = decision_epochs(spec.pruning, spec.planned_epochs(), len(spec.objectives))
        self.in_worker = self.decide_at == IN_WORKER
        # Several objectives are pruned by Pareto rank, here (`scheduler.rank_judge`).
        self._rank: RankJudge | None = None
        if spec.multi_objective and spec.pruning.enabled:
            goals = [(o.metric, o.direction) for o in spec.objectives]
            self._rank = RankJudge(spec.pruning, goals, spec.planned_epochs())
        self.window = parallelism(spec, workers) if needs_session(spec) else big_window
        #: The sweep's window under the fair share of workers (`core.shares`), set by the
        #: scheduler each pass (`scheduler.feeders`); None: `window` alone.
        self.share_window: int | None = None
        self.session: Any = None
        #: A grid's or random sweep's points (`scheduler.point_list`); None: adaptive.
        self.listed: PointList | None = None
        self._batch_of: dict[str, Batch] = {}  # point id -> its batch, until it is sent
        self._created: set[str] = set()  # point ids stored
        # Points asked but not stored when the store failed: the next `ask` gives them first.
        self._pending: tuple[list[TrialPoint], dict[str, dict[str, Any]]] | None = None
        self._index = 0  # the next adaptive trial's index
        self._numbers: dict[str, int] = {}  # in-flight trial id -> Optuna number
        self._units: dict[str, int] = {}  # adaptive: in-flight trial id -> its unit's key
        self._epochs: dict[str, tuple[int, int]] = {}  # trial id -> (attempt, last epoch read)
        self._study_attrs: dict[str, Any] = {}
        self._requested: set[str] = set()  # prunes asked for
        self.total = 0
        self.rev = 0  # the revision of the sweep's spec this feeder feeds (`core.spec.changes`)
        self.paused = False  # the sweep was paused: nothing new is sent
        self.respecified = False  # stopped as its spec changed: a new feeder goes on (`open`)
        self.done = False
        self.used_up = False  # an adaptive search's space gave no new point
        self.freed = False  # `judge` saw a trial in flight end (`judge_until` resets it)
        #: The sweep document as the last step read it (`step`): its counts, for a caller
        #: that shows them (`sweepstack run`) without reading them again.
        self.sweep: dict[str, Any] | None = None
        self._renewed = -math.inf  # when the lease was last taken or renewed (monotonic)
        self._ended = -1  # the sweep's ended trials when the in-flight ones were last read
        self._told_at = -math.inf
        self._saw_end = False  # `judge` saw a trial end since the in-flight ones were read
        self._step_prune_at = -math.inf
        self.stall_seconds = STALL_SECONDS
        self._rev: int | None = None  # counts_rev last seen, and when it last moved
        self._rev_at = time.monotonic()
        self._stall_wait = self.stall_seconds
        self._source()

    # --- building ---------------------------------------------------------------------

    def _source(self) -> None:
        if self.spec.search.algorithm in ("grid", "random"):
            self.listed = PointList(self.spec, self.window, self.workers)
            self.total = len(self.listed)
        else:
            self.total = int(self.spec.search.trials or 0)
        if needs_session(self.spec):
            from scheduler.search_session import SearchSession  # imports Optuna (~1 s)

            self.session = SearchSession(self.spec, warm=self._warm)
            self._shared = shared_dimensions(self.spec.space)

    @classmethod
    def open(
        cls, store: Store, app: Celery, sweep_id: str, *, owner: str, **kwargs: Any
    ) -> Feeder | None:
        """The feeder of a stored sweep, rebuilt from its trials; None if another holds
        its lease. Sends the trials stored but never sent."""
        seconds = kwargs.get("lease_seconds", LEASE_SECONDS)
        asked = time.monotonic()
        if not store.feeding.take_lease(sweep_id, owner, seconds):
            return None
        doc = store.reads.get_sweep(sweep_id)
        spec = load_spec(doc["spec"])
        if doc.get("warm_trials"):
            from scheduler.warm import warm_records

            kwargs["warm"] = warm_records(store, spec, doc["warm_trials"])
        feeder = cls(store, app, sweep_id, spec, owner=owner, **kwargs)
        feeder._renewed = asked
        feeder.rev = int(doc.get("spec_rev") or 0)
        feeder.paused = doc.get("paused_at") is not None
        stored = store.feeding.feed_trials(sweep_id)
        changed = feeder.rev != int(doc.get("applied_rev") or 0)
        feeder._rebuild(stored, doc.get("study_attrs") or {}, doc.get("sending") or [], changed)
        return feeder

    def _rebuild(
        self,
        docs: list[dict[str, Any]],
        study_attrs: dict[str, Any],
        sending: list[str],
        changed: bool = False,
    ) -> None:
        from scheduler.search_session import Record

        self._created = {d["key"] for d in docs}
        self._index = max((d["index"] for d in docs), default=-1) + 1
        if self.rev and self.listed is not None:
            self.listed.renumber(self._created, self._index)
        created = len(docs)
        if self.spec.search.algorithm == "grid" and self.listed is not None:
            created = self.listed.created_count(self._created)  # a narrowed grid's own points
        if changed:
            # The spec changed (`core.spec.changes`): exactly its trials not created yet.
            self.store.feeding.replan(self.sweep_id, self.rev, max(self.total - created, 0))
        else:
            self.store.feeding.repair_plan(self.sweep_id, self.total, created)
        if self._rank is not None:
            for d in docs:
                self._note_costs(d["_id"], d.get("config") or {})
                if d["state"] == TrialState.COMPLETE.value:
                    self._rank.complete(d["_id"])
        if self.session is not None:
            epochs = self._stored_epochs(docs)
            records = []
            for d in docs:
                number = (d.get("optuna") or {}).get("number")
                if number is None:
                    continue
                records.append(
                    Record(
                        number=number,
                        params=flatten_params(d.get("params")),
                        state=d["state"],
                        value=d.get("objective"),
                        epochs=epochs.get(d["_id"], {}),
                        system_attrs=(d.get("optuna") or {}).get("system_attrs") or {},
                        values=d.get("objectives") if self.spec.multi_objective else None,
                        constraints=d.get("constraints"),
                    )
                )
                if d["state"] in _LIVE:
                    self._numbers[d["_id"]] = number
                    self._units[d["_id"]] = (d.get("optuna") or {}).get("unit", number)
            self.session.rebuild(records, study_attrs)
            self._study_attrs = dict(study_attrs)
        maybe = set(sending)
        unsent = [d for d in docs if d["_id"] in maybe and d.get("attempt") == 0
                  and d.get("state") == TrialState.QUEUED.value]  # fmt: skip
        if unsent:
            log.info("sweep %s: sending %d trials stored but never sent", self.sweep_id,
                     len(unsent))  # fmt: skip
            units = {d["key"]: (d.get("optuna") or {}).get("unit") for d in unsent}
            self._send([self._point_of(d) for d in unsent], units)

    def _stored_epochs(self, docs: list[dict[str, Any]]) -> dict[str, dict[int, float]]:
        if not self.spec.pruning.enabled:
            return {}
        metric = self.spec.pruning.metric or self.spec.objective.metric
        attempts = {d["_id"]: d.get("attempt", 0) for d in docs}
        out: dict[str, dict[int, float]] = {}
        ids = list(attempts)
        for start in range(0, len(ids), 1000):
            part = {tid: attempts[tid] for tid in ids[start : start + 1000]}
            for tid, rows in self.store.feeding.epoch_rows(part, {}).items():
                if self._rank is not None:
                    for epoch in sorted(rows):
                        self._rank.observe(tid, epoch, rows[epoch])
                values = {e: m[metric] for e, m in rows.items() if pruned_value(m, metric)}
                out[tid] = values
                if rows:
                    self._epochs[tid] = (part[tid], max(rows))
        return out

    @staticmethod
    def _point_of(doc: dict[str, Any]) -> TrialPoint:
        config = doc.get("config") or {}
        return TrialPoint(
            index=doc["index"],
            id=doc["key"],
            params=flatten_params(doc.get("params")),
            seed=int((config.get("training") or {}).get("seed") or 0),
            config=config,
        )

    # --- one step ---------------------------------------------------------------------

    def step(self) -> bool:
        """Renew the lease, tell results, decide pruning, fill the window. Whether the
        sweep still needs feeding (False: finished, cancelled, deleted or lease lost)."""
        if self.done:
            return False
        try:
            if not self._renew():
                log.warning("sweep %s: lost the feeding lease; stopping", self.sweep_id)
                return self._stop()
            sweep = self.sweep = self.store.reads.get_sweep(self.sweep_id)
        except NotFound:
            return self._stop()
        if sweep.get("cancelled_at") is not None:
            return self._stop()
        if int(sweep.get("spec_rev") or 0) != self.rev:
            # Its spec changed: a feeder rebuilt on the new one takes over (`Feeders.step`,
            # `sweepstack run`), from the stored trials, as after a restart.
            log.info("sweep %s: its spec changed; feeding it anew", self.sweep_id)
            self.respecified = True
            return self._stop()
        self.paused = sweep.get("paused_at") is not None
        if self.session is not None:
            self._tell_and_prune(sweep["counts"])
        if sweep.get("held") and not self.paused:
            self._send_held(sweep["held"])
        counts, planned = sweep["counts"], int(sweep.get("planned") or 0)
        in_flight = counts["queued"] - planned + counts["running"]
        if in_flight > 0 and self._stalled(sweep.get("counts_rev", 0)):
            counts = self.store.admin.recount(self.sweep_id)
            in_flight = counts["queued"] - planned + counts["running"]
        elif in_flight <= 0 and (counts["queued"] - planned or counts["running"]):
            # Drifts that cancel out (a claim's counter write lost: one "queued" too many and
            # one "running" too few once the trial ends) look like nothing in flight, while
            # the sweep still looks unfinished to `Feeding.unfinished_sweeps`: recount now.
            counts = self.store.admin.recount(self.sweep_id)
            in_flight = counts["queued"] - planned + counts["running"]
        if planned > 0:
            # Paused: running trials finish and are told (above); nothing new goes out.
            wanted, units = self.wanted(in_flight) if not self.paused else (0, None)
            if wanted > 0:
                self.feed(min(wanted, planned), units)
        elif in_flight <= 0:
            return self._stop()
        return True

    def _send_held(self, held: list[str]) -> None:
        """Send again the trials a worker left queued while the sweep was paused
        (`core.store.lifecycle`'s claim notes them in the sweep's ``held`` list)."""
        docs = self.store.feeding.feed_trials(self.sweep_id, held, with_config=True)
        docs = [d for d in docs if d["state"] == TrialState.QUEUED.value]
        if docs:
            log.info("sweep %s: sending %d trials held while it was paused", self.sweep_id,
                     len(docs))  # fmt: skip
            units = {d["key"]: (d.get("optuna") or {}).get("unit") for d in docs}
            self._send([self._point_of(d) for d in docs], units)
        self.store.feeding.release_held(self.sweep_id, held)

    def _renew(self) -> bool:
        """Renew the feeding lease when `RENEW_SHARE` of it has passed; whether it is held."""
        asked = time.monotonic()
        if asked - self._renewed < RENEW_SHARE * self.lease_seconds:
            return True
        if not self.store.feeding.take_lease(self.sweep_id, self.owner, self.lease_seconds):
            return False
        self._renewed = asked
        return True

    def wanted(self, in_flight: int) -> tuple[int, int | None]:
        """How many new trials the window has room for, given the trials in flight, and
        for an adaptive search in how many units at most (module docstring): a unit of
        up to `scheduler.units.ADAPTIVE_GROUP_CAP` points per free place."""
        window = self.window
        listed = self.listed
        if self.share_window is not None and (listed is not None or self.session is None):
            # A message (a fused group, a chunk) takes one worker: the share counts them.
            per_message = listed.per_message if listed is not None else 1.0
            window = min(window, math.ceil(self.share_window * per_message))
        elif self.share_window is not None:
            window = min(window, self.share_window)  # an adaptive search's window counts units
        if listed is not None or self.session is None:
            return window - in_flight, None
        free = window - len({self._units.get(t, t) for t in self._numbers})
        return max(0, free) * ADAPTIVE_GROUP_CAP, max(0, free)

    def _stalled(self, rev: int) -> bool:
        """Whether the counts have not moved for the current wait (module docstring)."""
        now = time.monotonic()
        if rev != self._rev:
            self._rev, self._rev_at, self._stall_wait = rev, now, self.stall_seconds
            return False
        if now - self._rev_at < self._stall_wait:
            return False
        # The recount moves counts_rev by one itself: that is no progress.
        self._rev, self._rev_at = rev + 1, now
        self._stall_wait = min(2 * self._stall_wait, MAX_STALL_SECONDS)
        return True

    def _stop(self) -> bool:
        self.close()
        return False

    def close(self) -> None:
        """Stop feeding and give the lease back, so another scheduler can take over at once."""
        self.done = True
        self.store.feeding.release_lease(self.sweep_id, self.owner)

    def feed(self, n: int, units: int | None = None) -> int:
        """Ask up to `n` new points (in at most `units` units: `ask`), store them, send
        them; how many were created."""
        points, extras = self.ask(n, units)
        try:
            if len(points) < n and self.ran_out:
                dropped = self.store.feeding.shrink_plan(self.sweep_id, n - len(points))
                if dropped:
                    log.warning("sweep %s: the space is used up; %d trials fewer",
                                self.sweep_id, dropped)  # fmt: skip
            if not points:
                return 0
            ids = [f"{self.sweep_id}-{p.id}" for p in points]
            self.store.feeding.begin_sending(self.sweep_id, ids)
            self.store.feeding.add_trials(self.sweep_id, self.spec, points, extras)
        except StoreUnavailable:
            # Asked, not (all) stored: the next pass stores them again (`add_trials` skips
            # those already in), so the sweep ends with exactly its planned trials.
            self._pending = (points, extras)
            raise
        self._created.update(p.id for p in points)
        self._send(points, unit_keys(extras))
        if self.session is not None:
            attrs = self.session.study_attrs()
            if attrs != self._study_attrs:
                self.store.feeding.set_study_attrs(self.sweep_id, attrs)
                self._study_attrs = attrs
        return len(points)

    @property
    def ran_out(self) -> bool:
        """Whether the source has no point left to ask: a grid's or random sweep's list is
        all asked, or an adaptive search's space gave no new point (`used_up`)."""
        if self.listed is not None:
            return self.listed.ran_out
        return self.used_up

    def ask(
        self, n: int, units: int | None = None
    ) -> tuple[list[TrialPoint], dict[str, dict[str, Any]]]:
        """The next up to `n` points of the sweep's source, and the Optuna fields to store
        with each (by point id); neither stored nor sent here (`feed` does both).

        An adaptive search asks in units of points to train together, at most `units` of
        them (`scheduler.units.ask_unit`); each point's Optuna fields name its unit
        (``unit``: the Optuna number of the unit's first point)."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            return pending
        extras: dict[str, dict[str, Any]] = {}
        points: list[TrialPoint] = []
        if self.listed is not None:
            for batch in self.listed.next_batches(n, self._created):
                for key in batch.keys:
                    self._batch_of[key] = batch
                    points.append(self.listed.by_id[key])
            if self.session is not None:
                for point in points:
                    asked = self.session.add_point(point.params)
                    extras[point.id] = _optuna(asked.number, asked.system_attrs)
                    self._numbers[f"{self.sweep_id}-{point.id}"] = asked.number
                    self._note_costs(f"{self.sweep_id}-{point.id}", point.config)
            return points, extras
        made = 0
        while len(points) < n and (units is None or made < units):
            unit = ask_unit(self.session, self._shared, n - len(points), self._asked_point)
            if not unit:
                self.used_up = True
                break
            made += 1
            key = unit[0][0].number
            for asked, point in unit:
                points.append(point)
                extras[point.id] = _optuna(asked.number, asked.system_attrs, unit=key)
                tid = f"{self.sweep_id}-{point.id}"
                self._numbers[tid], self._units[tid] = asked.number, key
                self._note_costs(tid, point.config)
        return points, extras

    def _note_costs(self, trial_id: str, config: Mapping[str, Any]) -> None:
        """Keep a trial's costs known before training, for the Pareto-rank pruner."""
        if self._rank is not None and config:
            self._rank.set_costs(trial_id, kind_of(config).costs_before_training(config))

    def outgoing(
        self, sweep_id: str, points: Sequence[TrialPoint], units: Mapping[str, Any] | None
    ) -> list[Outgoing]:
        """The messages these asked points go in: an adaptive search's units each as its
        own (`units`, `scheduler.units.unit_keys`), a grid's or random sweep's batches as
        planned (`PointList.next_batches`); points asked without a batch (a rebuilt feeder's unsent
        trials) are grouped among themselves."""
        watch, decide_at = self.watch, self.decide_at
        if units is not None:
            return unit_messages(sweep_id, by_unit(points, units), watch=watch, decide_at=decide_at)
        configs = {p.id: p.config for p in points}
        planned: dict[Batch, None] = {}
        loose: list[TrialPoint] = []
        for point in points:
            batch = self._batch_of.get(point.id)
            if batch is not None and all(key in configs for key in batch.keys):
                planned[batch] = None
            else:
                loose.append(point)
        out = [b.outgoing(sweep_id, configs, watch=watch, decide_at=decide_at) for b in planned]
        if loose:
            out += messages(sweep_id, loose, self.workers, watch=watch, decide_at=decide_at)
        return out

    def sent(self, points: Sequence[TrialPoint]) -> None:
        """Forget the batches of points that went out (`outgoing`)."""
        for point in points:
            self._batch_of.pop(point.id, None)

    def _asked_point(self, asked: Any) -> TrialPoint:
        point = self.session.point(asked, self._index, with_config=True)
        self._index += 1
        return point

    def _send(self, points: list[TrialPoint], units: dict[str, Any] | None = None) -> None:
        out = self.outgoing(self.sweep_id, points, units)
        send_window(self.store, self.app, self.sweep_id, out, self.spec.priority)
        self.sent(points)

    def _tell_and_prune(self, counts: dict[str, int]) -> None:
        """Tell the search the trials in flight that ended, and every `STEP_PRUNE_SECONDS`
        decide on the running ones' new rows (workers wait at the pruner's epochs, where
        `judge` decides at once). The trials are read only when the sweep's `counts` say one ended,
        `judge` saw one end, a decision is due, or `TELL_SECONDS` passed."""
        if not self._numbers:
            return
        now = time.monotonic()
        ended = sum(counts.get(state, 0) for state in _ENDED)
        prune = self.spec.pruning.enabled and not self.in_worker and now >= self._step_prune_at
        if not (prune or self._saw_end or ended != self._ended
                or now - self._told_at >= TELL_SECONDS):  # fmt: skip
            return
        self._ended, self._told_at, self._saw_end = ended, now, False
        docs = self.store.feeding.feed_trials(self.sweep_id, list(self._numbers))
        if self.in_worker:
            self._report_pruned(docs)
        running: dict[str, tuple[int, int]] = {}
        for doc in docs:
            tid, number = doc["_id"], self._numbers[doc["_id"]]
            if doc["state"] in _LIVE:
                if doc["state"] == _RUNNING:
                    running[tid] = (number, doc.get("attempt", 0))
                continue
            value = doc.get("objectives") if self.spec.multi_objective else doc.get("objective")
            self.session.tell(number, value, doc["state"], doc.get("constraints"))
            if self._rank is not None and doc["state"] == TrialState.COMPLETE.value:
                self._rank.complete(tid)
            elif self._rank is not None and doc["state"] != TrialState.PRUNED.value:
                self._rank.forget(tid)
            del self._numbers[tid]
            self._epochs.pop(tid, None)
            self._requested.discard(tid)
        if running and prune:
            self._step_prune_at = now + STEP_PRUNE_SECONDS
            self._prune(running)

    def _report_pruned(self, docs: list[dict[str, Any]]) -> None:
        """Report to the search the rows of the trials the workers' own pruner stopped
        (`IN_WORKER`: the scheduler judged none of them, so it has none of their reports),
        before they are told pruned: Optuna takes a pruned trial's last report as its
        value, and TPE learns from it."""
        pruned = {
            d["_id"]: d.get("attempt", 0) for d in docs
            if d["state"] == TrialState.PRUNED.value and d["_id"] in self._numbers
        }  # fmt: skip
        if not pruned:
            return
        metric = self.spec.pruning.metric or self.spec.objective.metric
        for tid, rows in self.store.feeding.epoch_rows(pruned, {}).items():
            for epoch in sorted(rows):
                if pruned_value(rows[epoch], metric):
                    self.session.report(self._numbers[tid], epoch, float(rows[epoch][metric]))

    @property
    def judging(self) -> bool:
        """Whether `judge` has something to look at now: a search's trials in flight, which
        may wait for the scheduler's decision, and whose end frees a place."""
        return self.session is not None and bool(self._numbers) and not self.done

    def judge(self) -> bool:
        """Decide pruning for the trials in flight that reported a decision epoch not judged
        yet: what a scheduler calls between two steps, often, so that a trial waiting at a
        pruner's epoch gets its decision at once (module docstring). One small read when
        none waits (`Feeding.awaiting`); rows are read only for those that do, and only
        where their progress is not enough (`_progress_suffices`). Whether a trial was
        waiting. Where the scheduler decides nothing (no pruner, or the workers run it:
        `in_worker`), one read of the sweep's counts says whether a trial ended
        (`freed`)."""
        if not self.judging:
            return False
        if self.decide_at is None or self.in_worker:
            counts = self.store.reads.counts(self.sweep_id)
            if sum(counts.get(state, 0) for state in _ENDED) != self._ended:
                self.freed = self._saw_end = True
            return False
        awaiting = self.store.feeding.awaiting(list(self._numbers))
        if any(found is None for found in awaiting.values()):
            self.freed = True  # a trial ended: `judge_until` lets the caller step at once
            self._saw_end = True  # and that step reads the trials in flight
        found = {
            tid: seen for tid, seen in awaiting.items()
            if seen is not None and tid in self._numbers and decides(self.decide_at, seen.epoch)
        }  # fmt: skip
        if found:
            waiting = {tid: (self._numbers[tid], seen.attempt) for tid, seen in found.items()}
            shown = {
                tid: {seen.epoch: seen.metrics} for tid, seen in found.items()
                if self._progress_suffices(tid, seen)
            }  # fmt: skip
            self._prune(waiting, shown)
        return bool(found)

    def _progress_suffices(self, tid: str, seen: Awaiting) -> bool:
        """Whether the epoch a trial awaits a decision at, as its progress shows it, is all
        the pruner needs of its new rows: where it judges a trial on its value at a rung
        alone (successive halving and Hyperband: `decide_at` lists their rungs), or where
        that epoch is the only one not read yet. The decision then needs no read of the
        rows, and need not wait for the worker to write them."""
        if isinstance(self.decide_at, list):
            return True
        attempt, last = self._epochs.get(tid, (seen.attempt, 0))
        return attempt == seen.attempt and last == seen.epoch - 1

    def _prune(
        self,
        running: dict[str, tuple[int, int]],
        shown: dict[str, dict[int, dict[str, Any]]] | None = None,
    ) -> None:
        """Decide on the new rows of the `running` trials (id -> (number, attempt)): those
        `shown` (id -> {epoch: metrics}, from their progress), the others read."""
        attempts = {tid: attempt for tid, (_, attempt) in running.items()}
        rows = dict(shown or {})
        unread = {tid: attempt for tid, attempt in attempts.items() if tid not in rows}
        if unread:
            after = {
                tid: last for tid, (attempt, last) in self._epochs.items()
                if unread.get(tid) == attempt
            }  # fmt: skip
            rows.update(self.store.feeding.epoch_rows(unread, after))
        for tid, epochs in rows.items():
            if epochs:
                self._epochs[tid] = (attempts[tid], max(epochs))
        if self._rank is not None:
            stop = self._rank.decide(running, rows)
        else:
            metric = self.spec.pruning.metric or self.spec.objective.metric
            stop = decide(self.session, running, rows, metric)
        go_on: dict[str, tuple[int, int]] = {}
        if self.decide_at is not None:
            # Those the pruner let go on after a decision epoch, told so at once: their
            # workers wait there.
            go_on = {
                tid: (attempts[tid], max(epochs)) for tid, epochs in rows.items()
                if epochs and tid not in stop and decides(self.decide_at, max(epochs))
            }  # fmt: skip
        stop = {tid: at for tid, at in stop.items() if tid not in self._requested}
        if not go_on and not stop:
            return
        # One write for both: a waiting worker reads its decision once (`mark_judged`).
        marked = self.store.feeding.mark_judged(go_on, stop)
        self._requested.update(stop)
        if stop:
            log.info("sweep %s: pruning %d trials", self.sweep_id, len(marked))


def judge_until(feeders: Sequence[Feeder], deadline: float) -> None:
    """Sleep until `deadline`; meanwhile, while a trial of one of the `feeders`' sweeps may be
    waiting at a pruner's epoch, decide on the new reports (`Feeder.judge`), every
    `JUDGE_SECONDS` after a look that found one waiting, less often (up to
    `JUDGE_MAX_SECONDS`) while none is: trials of long epochs then cost the machine a few
    reads a second, and those of short ones get their decision within milliseconds.
    Returns early when a look saw a trial in flight end (`Feeder.freed`), so that the
    caller steps at once and the freed place is filled when it frees."""
    every = JUDGE_SECONDS
    for feeder in feeders:
        feeder.freed = False
    while (left := deadline - time.monotonic()) > 0:
        judging = [feeder for feeder in feeders if feeder.judging]
        if not judging:
            time.sleep(left)
            return
        found = False
        for feeder in judging:
            try:
                found = feeder.judge() or found
            except SweepstackError as exc:
                log.warning("pruning sweep %s failed this pass: %s", feeder.sweep_id, exc)
        if any(feeder.freed for feeder in judging):
            return
        every = JUDGE_SECONDS if found else min(every * 1.5, JUDGE_MAX_SECONDS)
        time.sleep(min(every, max(0.0, deadline - time.monotonic())))


def _optuna(number: int, system_attrs: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"optuna": {"number": number, "system_attrs": system_attrs, **more}}


def send_window(
    store: Store, app: Celery, sweep_id: str, out: list[Outgoing], priority: str = "normal"
) -> None:
    """Enqueue a stored window's messages (`Feeder.outgoing`) at the sweep's `priority`
    (`core.shares.MESSAGE_PRIORITY`), then empty the sweep's ``sending`` list: they are
    sent, and a rebuilt feeder need not send them again."""
    enqueue(app, out, MESSAGE_PRIORITY[priority])
    store.feeding.end_sending(sweep_id)
