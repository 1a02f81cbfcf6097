"""Run a fused group end to end: claim its trials, train them as one, finish each alone.

The logic behind the thin Celery task `workers.run_group`, whose one argument is the list
of the group's trial ids (`scheduler.grouping`). Per trial it keeps every promise the
single-trial runner (`workers.runner`) keeps:

- **Claim.** The trials whose message carries their config and queued attempt are claimed
  in one write; the others (and those not where the message said) as `execute_trial`
  claims them (`workers.claims`): a finished trial, or one a live attempt holds, is
  skipped; a running one whose holder process is gone on this host is taken over. So a
  redelivered group message after a kill -9 trains exactly the trials that did not
  finish, and a trial requeued alone by the stale-heartbeat scan is trained once, by
  whichever message claims it first.
- **Heartbeat.** The process's one heartbeat thread (`HeartbeatSender`) beats for every
  trial still training. A trial whose claim is lost leaves the group at the next check and
  is not recorded; one whose sweep is cancelled leaves it and ends ``cancelled``.
- **Pruning.** A watched group (its message says ``watch``: a pruning sweep) writes the
  rows of all its trials at the end of every epoch at which the pruner may decide
  (`workers.claims.asks_at`) and, in the same pass of the writer, asks for prune requests
  (one heartbeat for the trials still training, or the wait for the decision); training waits
  for that answer, so a pruned member leaves the group before the next epoch and ends
  ``pruned`` (`workers.runner.settle`), the others go on, and the fused model computes
  for the others only from then on. Where the worker runs the pruner itself
  (``decide_at: "in-worker"``, `workers.pruning`), each epoch end asks it about every
  member instead, with one look at the complete trials, and writes nothing for it.
- **Report and finish.** Epoch rows are kept and written in batches for the whole group
  (`EpochRows`: the first at once, then at most every 2 s); the trials that end at the
  same point of training (all of them, usually, at the last epoch; a diverged model
  alone) are finished together, in one write, as soon as training moves on or stops, after
  every row kept so far. The writes go, in order, through one writer thread (`_Writer`),
  so that training goes on while the store takes them; a trial's heartbeat stops only
  once its finish is written, and the writer's queue is bounded, so training never runs
  far ahead of the record. Each finish's ``extra`` holds what a single trial records plus
  ``group`` (a stable id of the group's trial list), ``group_size`` (trials in the
  message) and ``fused`` (trials this attempt trained fused; `workers.training.fused_plan`
  may split them into chunks that fit in memory). One terminal record per attempt: each
  claimed trial is finished at most once, and the store refuses a second finish of an
  attempt.
- **Scale-down.** A worker sent SIGTERM stops the group at its members' next epoch end,
  after their checkpoints, and puts each unfinished member back in the queue
  (``handed_back``, `workers.shutdown`); the task sends the message again, and the worker that
  takes it trains those members on from their checkpoints.
- **Failures.** A training error fails its own trial. An error of the whole run (time
  limit, a bug) fails every trial of the group not yet finished, with the reason. Only an
  unreachable store escapes, as `StoreUnavailable`, so that the task is retried.

The message's time limit is the sum of its trials' `execution.time_limit`
(`scheduler.messages`); a trial's own limit is not enforced separately inside a group.
Trials that turn out not to be compatible (never from `scheduler.grouping`; possible for
a hand-made message), and a ``sequential`` chunk of cheap trials (`scheduler.chunks`), are
trained one by one, unfused, each finish written as soon as its trial ends.
"""

from __future__ import annotations

import hashlib
import logging
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from celery.exceptions import SoftTimeLimitExceeded
from pydantic import ValidationError

from core.errors import InvalidQuery, StoreUnavailable, TrainingError
from core.spec.config import TrialConfig
from core.spec.kinds import kind_of
from core.spec.search import IN_WORKER, decides
from core.states import TrialState
from core.store.roles import Artifacts, EpochRow, Finish, TrialLifecycle
from workers import shutdown
from workers.checkpointing import TrialCheckpoints, sweep_policy
from workers.claims import (
    EpochRows,
    HeartbeatSender,
    asks_at,
    claim_trials,
    gone_attempt,
    with_retry,
)
from workers.pruning import SweepPruner, TrialReports, sweep_pruner
from workers.runner import (
    HANDED_BACK,
    RunnerOptions,
    failure_reason,
    handing_back,
    settle,
    sweep_objective,
    versions,
)

if TYPE_CHECKING:
    from workers.training.epochs import Checkpointing

log = logging.getLogger(__name__)
MAX_GROUP_TIME_LIMIT = 7 * 24 * 3600.0


def group_id(trial_ids: list[str]) -> str:
    """A stable id for the group these trial ids form (the same for a redelivered message)."""
    return "g" + hashlib.sha256("\n".join(trial_ids).encode()).hexdigest()[:15]


class _Writer(threading.Thread):
    """Runs a group's store writes in order, off the training thread (module docstring).

    The first error (the store unreachable past the retry budget) stops the writes and is
    raised to the training thread at its next `submit`, and by `close`.
    """

    def __init__(self, maxsize: int = 256) -> None:
        super().__init__(name="group-writer", daemon=True)
        self._queue: queue.Queue[tuple[Callable[..., Any], tuple[Any, ...]] | None] = queue.Queue(
            maxsize
        )
        self.error: BaseException | None = None

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        if self.error is not None:
            raise self.error
        self._queue.put((fn, args))

    def sync(self) -> None:
        """Wait until every write submitted so far is done; raise the first error."""
        done = threading.Event()
        self.submit(done.set)
        while not done.wait(0.5):
            if self.error is not None or not self.is_alive():
                break
        if self.error is not None:
            raise self.error

    def run(self) -> None:
        while (item := self._queue.get()) is not None:
            if self.error is not None:
                continue  # drain: after a failure nothing more is written
            fn, args = item
            try:
                fn(*args)
            except Exception as exc:  # handed to the training thread
                self.error = exc

    def close(self) -> None:
        """Wait for every write; raise the first error."""
        self._queue.put(None)
        self.join()
        if self.error is not None:
            raise self.error


class _Run:
    """One attempt at a group: the claimed trials, their rows, and how each ended."""

    def __init__(
        self,
        lifecycle: TrialLifecycle,
        trial_ids: list[str],
        options: RunnerOptions,
        beats: HeartbeatSender,
        watch: bool = False,
        decide_at: frozenset[int] | str | None = None,
    ) -> None:
        self.lifecycle, self.options, self.beats, self.watch = lifecycle, options, beats, watch
        self.decide_at = decide_at
        self.attempts: dict[str, int] = {}
        self.budget = options.store_retry_seconds
        self.writer = _Writer()
        self.rows = EpochRows()
        self.ending: list[Finish] = []
        self.versions = versions()
        self.group = group_id(trial_ids)
        self.group_size = len(trial_ids)
        self.outcomes: dict[str, str] = {}
        self.fused = 0
        self.pruner: SweepPruner | None = None  # the sweep's pruner, run here (`judge_here`)
        self.own: dict[str, TrialReports] = {}  # trial id -> its reports to that pruner
        self.saving: dict[str, TrialCheckpoints] = {}  # trial id -> its checkpoints

    def keep_checkpoints(self, artifacts: Artifacts | None, docs: list[dict[str, Any]]) -> None:
        """Each trial's checkpoints and kept model (`workers.checkpointing`), when the store
        keeps artifacts."""
        if artifacts is None or not docs:
            return
        policy = sweep_policy(artifacts, docs[0]["sweep_id"], self.options.artifacts_keep,
                              self.options.artifacts_top_k, self.budget)  # fmt: skip
        for doc in docs:
            self.saving[doc["_id"]] = TrialCheckpoints(
                artifacts,
                self.lifecycle,
                doc,
                policy,
                self.write_now,
                self.budget,
                self.objective(doc["sweep_id"]),
            )

    def write_now(self) -> None:
        """Write the rows kept so far and wait for them (before a checkpoint is saved)."""
        self.writer.submit(self._write_rows, self.rows.take())
        self.writer.sync()

    def objective(self, sweep_id: str) -> dict[str, str]:
        return sweep_objective(self.lifecycle, sweep_id, self.budget)

    def report(self, doc: dict[str, Any], epoch: int, row: dict[str, float]) -> None:
        """Keep an epoch's row; first write the finishes of trials that ended before it."""
        self.flush_finishes()
        if doc["_id"] in self.own:
            self.own[doc["_id"]].add(epoch, row)
        if asks_at(self.watch, self.decide_at, epoch):
            self.rows.keep(doc["_id"], doc["attempt"], epoch, row)
            return
        due = self.rows.add(doc["_id"], doc["attempt"], epoch, row)
        if due:
            self.writer.submit(self._write_rows, due)

    def judge_here(self, sweep_id: str) -> None:
        """Run the sweep's pruner in this worker for each trial (`workers.pruning`), when
        the message says so (``decide_at: "in-worker"``): at each epoch end, not by asking."""
        if not (self.watch and self.decide_at == IN_WORKER):
            return
        pruner = with_retry(sweep_pruner, self.lifecycle, sweep_id,
                            self.objective(sweep_id), budget=self.budget)  # fmt: skip
        self.pruner = pruner
        self.own = {t: TrialReports(pruner) for t in self.attempts}

    def epoch_end(self, epoch: int) -> None:
        """A watched group's epoch end: its rows, then a check for prune requests of the
        trials still training (at a pruner's epoch, the wait for its decision), written in
        order; training waits for the answer. With the worker's own pruner, its verdict
        for each trial that reported the epoch (the complete trials looked up once)."""
        if self.pruner is not None:
            judged = [t for t in self.own if t not in self.outcomes]
            if judged:
                self.pruner.refresh()
            for trial_id in judged:
                if self.own[trial_id].judge(refresh=False):
                    self.beats.prune_now(trial_id)
        if not asks_at(self.watch, self.decide_at, epoch):
            return
        self.writer.submit(self._write_rows, self.rows.take())
        live = {t: a for t, a in self.attempts.items() if t not in self.outcomes}
        if decides(self.decide_at, epoch):
            self.writer.submit(self.beats.await_decision, live, epoch)
        else:
            self.writer.submit(self.beats.check, live)
        self.writer.sync()

    def flush_finishes(self) -> None:
        """Write every row kept so far, then the finishes waiting (one write each)."""
        if not self.ending:
            return
        self.writer.submit(self._write_rows, self.rows.take())
        self.writer.submit(self._write_finishes, self.ending)
        self.ending = []

    def flush(self) -> None:
        """Write everything kept: rows, then finishes."""
        self.writer.submit(self._write_rows, self.rows.take())
        self.flush_finishes()

    def _write_rows(self, rows: list[EpochRow]) -> None:
        if not rows:
            return
        try:
            with_retry(self.lifecycle.report_many, rows, budget=self.budget)
        except InvalidQuery as exc:
            if not gone_attempt(exc):
                raise
            self._write_each(rows)

    def _write_each(self, rows: list[EpochRow]) -> None:
        """Write each trial's rows alone, after the store refused the batch for an attempt it
        never had: the trials whose claim vanished stop as lost ones do (and the task sends
        the group again for them), the others' rows are kept."""
        mine: dict[str, list[EpochRow]] = {}
        for row in rows:
            mine.setdefault(row.trial_id, []).append(row)
        for trial_id, part in mine.items():
            try:
                with_retry(self.lifecycle.report_many, part, budget=self.budget)
            except InvalidQuery as exc:
                if not gone_attempt(exc):
                    raise
                log.warning("trial %s: the store has no attempt %s; leaving the group",
                            trial_id, part[0].attempt)  # fmt: skip
                self.beats.mark_lost(trial_id)

    def _write_finishes(self, finishes: list[Finish]) -> None:
        ended = with_retry(self.lifecycle.finish_many, finishes, budget=self.budget)
        for finish in finishes:
            self.beats.release(finish.trial_id)
            recorded = ended.get(finish.trial_id, False)
            if not recorded:
                # Not this attempt's to end any more (its claim vanished, or it was taken
                # over): lost, which the task may send again (`workers.tasks`).
                self.outcomes[finish.trial_id] = "lost"
            if (saver := self.saving.get(finish.trial_id)) is not None:
                saver.ended(recorded)

    def should_stop(self, trial_id: str) -> bool:
        """Whether a member's training should end now: lost, stopping, pruning, or to be
        handed back (`workers.shutdown`)."""
        return self.beats.should_stop(trial_id) or shutdown.stop_training(self.saving.get(trial_id))

    def _hand_back(self, doc: dict[str, Any]) -> None:
        """Put a member back in the queue once its checkpoint is written (`workers.shutdown`)."""
        trial_id = doc["_id"]
        saver = self.saving.get(trial_id)
        if saver is not None:
            saver.wait()
        handed = with_retry(self.lifecycle.hand_back, trial_id, doc["attempt"],
                            shutdown.REASON, budget=self.budget)  # fmt: skip
        self.beats.release(trial_id)
        if not handed:
            self.outcomes[trial_id] = "lost"
        if saver is not None:
            saver.ended(False)

    def finish(self, doc: dict[str, Any], outcome: Any, dtype: str | None = None) -> None:
        """Record how one trial ended (a `TrainResult`, or an error or reason); at most once.

        The finish waits in `ending` until training moves on or stops (`flush_finishes`).
        """
        from workers.training import TrainResult

        trial_id = doc["_id"]
        if trial_id in self.outcomes:
            return
        if self.beats.lost(trial_id):
            self.beats.release(trial_id)
            log.warning(
                "trial %s: attempt %s lost its claim; not recording", trial_id, doc["attempt"]
            )
            self.outcomes[trial_id] = "lost"
            return
        extra: dict[str, Any] = {
            "versions": self.versions,
            "group": self.group,
            "group_size": self.group_size,
            "fused": self.fused,
        }
        if dtype is not None:
            extra["dtype"] = dtype
        state, result, error = TrialState.FAILED, None, None
        if (
            isinstance(outcome, TrainResult)
            and outcome.stopped_early
            and handing_back(self.beats, trial_id)
        ):
            self.outcomes[trial_id] = HANDED_BACK
            self.writer.submit(self._write_rows, self.rows.take())
            self.writer.submit(self._hand_back, doc)
            return
        if isinstance(outcome, TrainResult):
            extra["macs"] = kind_of(doc["config"]).macs(doc["config"], outcome.dataset or {})
            state, result, error = settle(
                outcome,
                self.objective(doc["sweep_id"]),
                extra,
                stopping=self.beats.stopping(trial_id),
                pruning=self.beats.pruning(trial_id),
            )
        elif isinstance(outcome, BaseException):
            error = failure_reason(outcome)
        else:
            error = str(outcome)
        if (saver := self.saving.get(trial_id)) is not None and result is not None:
            saver.keep_model(state.value, self.objective(doc["sweep_id"]), result.get("objective"))
        self.outcomes[trial_id] = state.value
        self.ending.append(Finish(trial_id, doc["attempt"], state, result, error, extra))


def _time_limit(configs: list[TrialConfig]) -> float:
    return min(sum(c.execution.time_limit for c in configs), MAX_GROUP_TIME_LIMIT)


def _fusable(configs: list[TrialConfig]) -> bool:
    from workers.training.fused import check_compatible

    try:
        check_compatible(configs)
    except ValueError as exc:
        log.warning("group is not fusable (%s); training its trials one by one", exc)
        return False
    return True


def _train(
    configs: list[TrialConfig],
    fused: bool,
    on_epoch: Callable[[int, int, dict[str, float]], None],
    should_stop: Callable[[int], bool],
    on_done: Callable[[int, Any], None],
    data_dir: Path | None = None,
    on_epoch_end: Callable[[int], None] = lambda epoch: None,
    checkpoints: list[Checkpointing | None] | None = None,
) -> None:
    """Train the configs as one fused model, or (not `fused`) one by one, unfused; dataset
    files are read from `data_dir` (the worker's datasets folder); `on_epoch_end` runs
    after each epoch's rows."""
    from workers.training import train
    from workers.training.fused import train_fused

    if fused:
        train_fused(
            configs,
            on_epoch=on_epoch,
            should_stop=should_stop,
            on_done=on_done,
            data_dir=data_dir,
            on_epoch_end=lambda fused_epoch: on_epoch_end(fused_epoch.epoch),
            checkpoints=checkpoints,
        )
        return
    for k, config in enumerate(configs):

        def one_epoch(epoch: int, row: dict[str, float], k: int = k) -> None:
            on_epoch(k, epoch, row)
            on_epoch_end(epoch)

        try:
            outcome: Any = train(
                config,
                on_epoch=one_epoch,
                should_stop=lambda k=k: should_stop(k),
                data_dir=data_dir,
                checkpoints=checkpoints[k] if checkpoints is not None else None,
            )
        except TrainingError as err:
            outcome = err
        on_done(k, outcome)


def execute_group(
    lifecycle: TrialLifecycle,
    trial_ids: list[str],
    worker: dict[str, Any],
    options: RunnerOptions,
    carried: dict[str, tuple[int, dict[str, Any]]] | None = None,
    *,
    watch: bool = False,
    decide_at: frozenset[int] | str | None = None,
    sequential: bool = False,
    artifacts: Artifacts | None = None,
) -> dict[str, str]:
    """Run the trials of a group this worker can claim; what happened to each, by id.

    `carried` maps ids to the (queued attempt, config) the message carries; `watch`: check
    for prune requests at every epoch end, and wait for the pruner's decision at the epochs
    of `decide_at` (module docstring); `sequential`: a chunk of
    cheap trials (`scheduler.chunks`), trained one by one and never fused. Outcomes as
    `execute_trial`'s: ``skipped``, ``complete``, ``failed``, ``cancelled``, ``pruned``,
    ``lost``, ``handed_back``, and ``unknown`` for an id the store does not have.
    """
    budget = options.store_retry_seconds
    beats = HeartbeatSender.of_process(lifecycle, options.heartbeat_seconds)
    run = _Run(lifecycle, trial_ids, options, beats, watch, decide_at)
    unique = list(dict.fromkeys(trial_ids))
    claims = claim_trials(
        lifecycle,
        unique,
        worker,
        options.stale_after_seconds,
        carried or {},
        budget,
        max_attempts=options.max_attempts,
    )
    docs: list[dict[str, Any]] = []
    for trial_id in unique:
        if trial_id not in claims:
            log.error("trial %s does not exist; leaving it out of its group", trial_id)
            run.outcomes[trial_id] = "unknown"
        elif (doc := claims[trial_id]) is None:
            log.info("trial %s: nothing to do (finished or held by a live attempt)", trial_id)
            run.outcomes[trial_id] = "skipped"
        else:
            docs.append(doc)
            beats.hold(trial_id, doc["attempt"])
            run.attempts[trial_id] = doc["attempt"]
    if not docs:
        return run.outcomes
    run.writer.start()
    members: list[tuple[dict[str, Any], TrialConfig]] = []
    try:
        run.judge_here(docs[0]["sweep_id"])
        for doc in docs:
            try:
                members.append((doc, TrialConfig.model_validate(doc["config"])))
            except ValidationError as exc:
                run.finish(doc, exc)
        configs = [config for _, config in members]
        fused = bool(configs) and not sequential and _fusable(configs)
        run.fused = len(configs) if fused else 1
        log.info("group %s: training %d trial(s), fused: %s", run.group, len(configs), fused)

        def done(k: int, outcome: Any) -> None:
            run.finish(members[k][0], outcome, members[k][1].execution.dtype)
            if not fused:  # one by one, no two end together: each finish is written now
                run.flush()

        run.keep_checkpoints(artifacts, [doc for doc, _ in members])
        try:
            _train(
                configs,
                fused,
                on_epoch=lambda k, epoch, row: run.report(members[k][0], epoch, row),
                should_stop=lambda k: run.should_stop(members[k][0]["_id"]),
                on_done=done,
                data_dir=options.data_dir,
                on_epoch_end=run.epoch_end,
                checkpoints=[run.saving.get(doc["_id"]) for doc, _ in members],
            )
        except SoftTimeLimitExceeded:
            reason = (
                f"time limit exceeded: the fused group of {len(configs)} trials ran past "
                f"{_time_limit(configs):g} s, the sum of their execution.time_limit"
            )
            for doc, config in members:
                run.finish(doc, reason, config.execution.dtype)
        except StoreUnavailable:
            raise
        except Exception as exc:  # a training error is a result, whatever its kind
            log.exception("group %s failed as a whole", run.group)
            for doc, config in members:
                run.finish(doc, exc, config.execution.dtype)
        run.flush()
        run.writer.close()
    finally:
        if run.writer.is_alive():  # an error escaped: write what was queued, then give up
            try:
                run.writer.close()
            except Exception as exc:
                log.warning("group %s: writes after the error failed: %s", run.group, exc)
        for doc in docs:
            beats.release(doc["_id"])
            if (saver := run.saving.get(doc["_id"])) is not None:
                saver.wait()
    return run.outcomes
