"""What a worker process writes while it holds trials: claims, heartbeats, epoch rows.

- **Claims.** A message carries the trial's config (its large texts as references, read
  once per process: `core.store.texts`) and the attempt it was queued at
  (`scheduler.enqueue`), so a claim is one conditional write with no read
  (`TrialLifecycle.claim_queued`), for one trial or a whole fused group. A message without them (an
  older one), or a trial that is not where the message says (requeued, taken over,
  finished), goes the careful way: `TrialLifecycle.claim`, which reads the trial, takes over an
  attempt whose process is known dead, and cancels a trial of a cancelled sweep.
- **Heartbeats.** One thread per process (`HeartbeatSender`) beats for every trial the
  process holds in one write, and notes per trial a lost claim, a stop request or a prune
  request. A watched trial (a pruning sweep's message says ``watch``) also asks at every
  epoch end at which its pruner may decide (`asks_at`: every epoch, or successive
  halving's rungs; `HeartbeatSender.check`, one more write), so it stops within one epoch
  of the request, whatever the heartbeat interval. Between two rungs nothing can ask it to
  stop early, so it writes and asks as an unwatched trial does. A trial whose pruner the
  worker runs itself (``decide_at: "in-worker"``, `workers.pruning`) asks nobody: it
  writes as an unwatched trial, and its own pruner's verdict is noted with `prune_now`.
- **Epoch rows** (`EpochRows`) are written in batches: the first at once (so a live page
  shows the trial moving), then at most every `ROWS_EVERY` seconds, and whenever the
  runner asks (`take`) — at the end of a trial, whatever ends it, and at every epoch at
  which a watched trial's pruner may decide, whose rows the decision needs in the store
  at once.
  A kill -9 loses at most the rows of those seconds, of the running attempt only; the
  next attempt writes its own rows (attempt + 1), and the store's unique index keeps a
  repeated row out.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

from core.errors import InvalidQuery, NotFound, StoreUnavailable
from core.settings import DEFAULT_MAX_ATTEMPTS
from core.spec.search import EVERY_EPOCH, IN_WORKER, decides
from core.states import Heartbeat, TrialState
from core.store.records import sweep_of
from core.store.roles import EpochRow, TrialLifecycle

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Seconds between two writes of a trial's epoch rows (the first is written at once).
ROWS_EVERY = 2.0
#: The longest a watched trial waits at a pruner's epoch for the scheduler's decision; past
#: it the trial trains on (a scheduler that is down never stalls training) and waits no more.
DECISION_WAIT_SECONDS = 3.0
#: Seconds between two looks at the store while waiting for a decision.
DECISION_POLL_SECONDS = 0.005


def decide_at_of(value: Any) -> frozenset[int] | str | None:
    """The epochs at which a message's trials wait for the pruner's decision, read from its
    ``decide_at`` (`core.spec.search.decision_epochs`: a list of epochs, `EVERY_EPOCH`, or
    `IN_WORKER`: the worker decides itself, `workers.pruning`); None for anything else.
    `core.spec.search.decides` asks it."""
    if value in (EVERY_EPOCH, IN_WORKER):
        return str(value)
    if isinstance(value, list) and all(
        isinstance(e, int) and not isinstance(e, bool) and e >= 0 for e in value
    ):
        return frozenset(value)
    return None


def asks_at(watch: bool, decide_at: frozenset[int] | str | None, epoch: int) -> bool:
    """Whether a trial's end of `epoch` writes its rows at once and asks the store for a
    prune request (module docstring): watched, and the scheduler's pruner may decide there
    (any epoch for a message without ``decide_at``). Never for `IN_WORKER`: the worker's
    own pruner decides (`workers.pruning`), and the rows go in batches."""
    if decide_at == IN_WORKER:
        return False
    return watch and (decide_at is None or decides(decide_at, epoch))


def gone_attempt(exc: InvalidQuery) -> bool:
    """Whether the store refused a write as one of an attempt the trial never had
    (`TrialLifecycle.report_many`): the claim that started it is gone, rolled back with a
    store that lost its last writes, or the trial requeued and claimed afresh."""
    return exc.field == "attempt"


def with_retry(fn: Callable[..., T], *args: Any, budget: float, **kwargs: Any) -> T:
    """Call `fn`, retrying on `StoreUnavailable` with exponential backoff for `budget` seconds."""
    deadline = time.monotonic() + budget
    delay = 0.5
    while True:
        try:
            return fn(*args, **kwargs)
        except StoreUnavailable as exc:
            if time.monotonic() + delay > deadline:
                raise
            log.warning("store unavailable (%s); retrying in %.1f s", exc, delay)
            time.sleep(delay)
            delay = min(delay * 2, 30.0)


def _pid_alive(pid: int) -> bool:
    """Whether process `pid` runs. A zombie (killed, not yet reaped by its parent: the
    Celery pool's parent reaps its children in its own time) answers signal 0 like a live
    process, so Linux's ``/proc/PID/stat`` is read for its state too."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc (not Linux), or it ended meanwhile: signal 0 said it ran
    return state not in (b"Z", b"X")


def holder_is_dead(holder: dict[str, Any] | None) -> bool:
    """Whether a claim's holder ran on this host and its process is gone (killed, crashed)."""
    if not holder or holder.get("host") != socket.gethostname():
        return False
    pid = holder.get("pid")
    return isinstance(pid, int) and pid != os.getpid() and not _pid_alive(pid)


def claim_trial(
    lifecycle: TrialLifecycle,
    trial_id: str,
    worker: dict[str, Any],
    stale_after: float,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> dict[str, Any] | None:
    """Claim the trial the careful way (module docstring): its document, or None when it is
    finished or held by a live attempt. A claim whose holder was a process on this host
    that has died is taken over at once rather than after the stale-heartbeat wait; its
    `max_attempts`-th loss ends the trial failed (None), so a redelivered message for it is
    acked and does nothing."""
    doc = lifecycle.claim(trial_id, worker, stale_after=stale_after, max_attempts=max_attempts)
    if doc is not None:
        return doc
    current = lifecycle.trial(trial_id)
    if current["state"] == TrialState.RUNNING.value and holder_is_dead(current.get("worker")):
        log.info(
            "trial %s: attempt %s died with its process; taking over", trial_id, current["attempt"]
        )
        return lifecycle.claim(
            trial_id,
            worker,
            stale_after=stale_after,
            takeover_attempt=current["attempt"],
            max_attempts=max_attempts,
        )
    return None


def claim_trials(
    lifecycle: TrialLifecycle,
    trial_ids: list[str],
    worker: dict[str, Any],
    stale_after: float,
    carried: Mapping[str, tuple[int, dict[str, Any]]],
    budget: float,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> dict[str, dict[str, Any] | None]:
    """Claim trials for `worker`: each id's document (id, sweep_id, attempt, config), or None
    when it is finished or held by a live attempt; an id the store does not have is left out.

    `carried` maps ids to the (queued attempt, config) their message carries: those are
    claimed in one write; the rest, and those that write did not claim, one by one the
    careful way. Either way a config comes with its texts in place of its references
    (`core.store.texts`; a read only for texts this process has not read yet).
    """
    out: dict[str, dict[str, Any] | None] = {}
    expected = {t: carried[t][0] for t in trial_ids if t in carried}
    if expected:
        for trial_id in with_retry(lifecycle.claim_queued, expected, worker, budget=budget):
            attempt, config = carried[trial_id]
            sweep_id = sweep_of(trial_id)
            out[trial_id] = {
                "_id": trial_id,
                "sweep_id": sweep_id,
                "attempt": attempt + 1,
                # A message carries the config's large texts as references (`core.store.texts`).
                "config": with_retry(lifecycle.resolve_texts, sweep_id, config, budget=budget),
            }
    for trial_id in trial_ids:
        if trial_id not in out:
            try:
                out[trial_id] = with_retry(
                    claim_trial,
                    lifecycle,
                    trial_id,
                    worker,
                    stale_after,
                    max_attempts,
                    budget=budget,
                )
            except NotFound:
                log.error("trial %s does not exist", trial_id)
    return out


class HeartbeatSender(threading.Thread):
    """The one thread of a worker process that beats for every trial the process holds.

    A runner `hold`s a trial's attempt after its claim and `release`s it once its finish is
    written; every `interval` seconds the thread sends one `TrialLifecycle.heartbeat_many` for all
    of them and notes, per trial, a lost claim (`lost`), a stop request (`stopping`) or a
    prune request (`pruning`); `check` does the same at once for some trials (a watched
    trial's epoch end). (The store's answer to a heartbeat is `core.states.Heartbeat`.)
    """

    _senders: ClassVar[dict[tuple[int, int, float], HeartbeatSender]] = {}
    _made = threading.Lock()

    def __init__(self, lifecycle: TrialLifecycle, interval: float) -> None:
        super().__init__(name="heartbeats", daemon=True)
        self.lifecycle, self.interval = lifecycle, interval
        self._held: dict[str, int] = {}
        self._lost: set[str] = set()
        self._stopping: set[str] = set()
        self._pruning: set[str] = set()
        self._undecided: set[str] = set()  # waited in vain for a decision once
        self._lock = threading.Lock()

    @classmethod
    def of_process(cls, lifecycle: TrialLifecycle, interval: float) -> HeartbeatSender:
        """This process's sender for `lifecycle` (started on first use; a fork gets its own)."""
        key = (os.getpid(), id(lifecycle), interval)
        with cls._made:
            sender = cls._senders.get(key)
            if sender is None or not sender.is_alive():
                sender = cls._senders[key] = cls(lifecycle, interval)
                sender.start()
            return sender

    def hold(self, trial_id: str, attempt: int) -> None:
        """Beat for this attempt of the trial from now on."""
        with self._lock:
            self._held[trial_id] = attempt
            self._lost.discard(trial_id)
            self._stopping.discard(trial_id)
            self._pruning.discard(trial_id)
            self._undecided.discard(trial_id)

    def release(self, trial_id: str) -> None:
        """Stop beating for the trial (its attempt ended)."""
        with self._lock:
            self._held.pop(trial_id, None)

    def lost(self, trial_id: str) -> bool:
        """Whether the trial's attempt no longer holds its claim (requeued or taken over)."""
        return trial_id in self._lost

    def mark_lost(self, trial_id: str) -> None:
        """Note that the store refused a write of this held attempt as one it never had
        (`gone_attempt`): its claim vanished, and it stops as a lost one does."""
        with self._lock:
            if trial_id in self._held:
                self._lost.add(trial_id)

    def stopping(self, trial_id: str) -> bool:
        """Whether the trial's sweep asked it to stop (it still holds its claim)."""
        return trial_id in self._stopping

    def pruning(self, trial_id: str) -> bool:
        """Whether the scheduler asked the trial's attempt to stop early (it holds its claim)."""
        return trial_id in self._pruning

    def prune_now(self, trial_id: str) -> None:
        """Note that this process's own pruner stopped the trial (`workers.pruning`): it
        ends ``pruned``, as after a prune request."""
        with self._lock:
            if trial_id in self._held:
                self._pruning.add(trial_id)

    def should_stop(self, trial_id: str) -> bool:
        """Whether the trial's training should end now: lost, stopping or pruning."""
        return trial_id in self._lost or trial_id in self._stopping or trial_id in self._pruning

    def check(self, attempts: Mapping[str, int]) -> None:
        """Beat now for these held attempts and note the answers, as the thread would.

        A watched trial calls it right after its epoch rows are written. An unreachable
        store is only logged: the thread's next beat asks again.
        """
        if not attempts:
            return
        try:
            answers = self.lifecycle.heartbeat_many(attempts)
        except (StoreUnavailable, NotFound) as exc:
            log.warning("epoch check for %d trial(s) failed: %s", len(attempts), exc)
            return
        self._note(dict(attempts), answers)

    def await_decision(
        self, attempts: Mapping[str, int], epoch: int, timeout: float = DECISION_WAIT_SECONDS
    ) -> None:
        """Wait until the scheduler has judged these held attempts at `epoch` (or later):
        told them to go on, or asked them to stop (`TrialLifecycle.judged`, which says how
        each is to end, so a prune request is noted before the next epoch starts with no
        heartbeat to ask). Bounded by `timeout`: a trial whose decision did not come in time
        trains on and never waits again; those, and any not waited for, get a `check`."""
        with self._lock:
            waiting = {
                t: a for t, a in attempts.items()
                if t not in self._undecided and t not in self._pruning
                and t not in self._stopping and t not in self._lost
            }  # fmt: skip
        deadline = time.monotonic() + timeout
        known: set[str] = set()  # told to go on, or how to end: nothing left to ask
        while waiting:
            try:
                verdicts = self.lifecycle.judged(waiting)
            except (StoreUnavailable, NotFound) as exc:
                log.warning("waiting for a pruning decision failed: %s", exc)
                break
            ending = {t: v.answer for t, v in verdicts.items() if v.answer != Heartbeat.OK}
            self._note(waiting, ending)
            decided = {t for t, v in verdicts.items() if t in ending or v.epoch >= epoch}
            known |= decided
            waiting = {t: a for t, a in waiting.items() if t not in decided}
            if not waiting:
                break
            if time.monotonic() >= deadline:
                log.warning(
                    "no pruning decision for %d trial(s) at epoch %d within %.1f s; training on",
                    len(waiting), epoch, timeout,
                )  # fmt: skip
                with self._lock:
                    self._undecided.update(waiting)
                break
            time.sleep(DECISION_POLL_SECONDS)
        self.check({t: a for t, a in attempts.items() if t not in known})

    def _note(self, held: Mapping[str, int], answers: Mapping[str, Heartbeat]) -> None:
        with self._lock:
            for trial_id, answer in answers.items():
                if self._held.get(trial_id) != held[trial_id]:
                    continue  # released or held again meanwhile: the answer is stale
                if answer == Heartbeat.LOST:
                    self._lost.add(trial_id)
                elif answer == Heartbeat.STOP:
                    self._stopping.add(trial_id)
                elif answer == Heartbeat.PRUNE:
                    self._pruning.add(trial_id)

    def run(self) -> None:
        while True:
            time.sleep(self.interval)
            with self._lock:
                held = dict(self._held)
            if not held:
                continue
            try:
                answers = self.lifecycle.heartbeat_many(held)
            except (StoreUnavailable, NotFound) as exc:
                log.warning("heartbeat for %d trial(s) failed: %s", len(held), exc)
                continue
            except Exception:  # the thread must outlive any one failed beat
                log.exception("heartbeat for %d trial(s) failed", len(held))
                continue
            self._note(held, answers)


class EpochRows:
    """Epoch rows waiting to be written, and when the next batch is due (module docstring)."""

    def __init__(self, every: float = ROWS_EVERY, clock: Callable[[], float] = time.monotonic):
        self.every, self._clock = every, clock
        self._rows: list[EpochRow] = []
        self._last: float | None = None

    def add(
        self, trial_id: str, attempt: int, epoch: int, metrics: dict[str, Any]
    ) -> list[EpochRow] | None:
        """Keep a row; the batch to write now if one is due, else None."""
        self._rows.append(EpochRow(trial_id, attempt, epoch, metrics))
        now = self._clock()
        if self._last is None or now - self._last >= self.every:
            return self.take()
        return None

    def keep(self, trial_id: str, attempt: int, epoch: int, metrics: dict[str, Any]) -> None:
        """Keep a row for the next `take`, whatever is due (a watched group takes at every
        epoch end, once for all its trials)."""
        self._rows.append(EpochRow(trial_id, attempt, epoch, metrics))

    def take(self) -> list[EpochRow]:
        """Every row kept so far, to write now (possibly none)."""
        rows, self._rows = self._rows, []
        self._last = self._clock()
        return rows
