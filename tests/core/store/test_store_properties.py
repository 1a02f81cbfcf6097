"""Random sequences of lifecycle calls never rewrite a terminal record (hypothesis).

A state machine drives claim, heartbeat, report, finish, requeue, retry and cancel, with
current, stale and made-up attempt numbers and a clock that jumps, against the real
server. After every step: a terminal trial is unchanged unless an explicit retry of a
failed trial queued it again; no attempt has two records in a trial's history; the stored
counts equal the counts of the trials; one metrics row per (trial, attempt, epoch). A trial
whose worker died `DEFAULT_MAX_ATTEMPTS` times ends failed with that loss as the attempt's
one history entry (a poison trial), and that is the one terminal record not ended by `finish`.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from core.errors import InvalidQuery, InvalidTransition
from core.settings import DEFAULT_MAX_ATTEMPTS
from core.states import TERMINAL_STATES
from core.store.store import Store
from tests.core import (
    WORKER,
    FakeClock,
    finish,
    heartbeat,
    make_sweep,
    report,
    trial_ids,
    width_spec,
)

TRIALS = 4
ENDED = {"complete", "failed", "pruned", "cancelled", "lost"}
trial = st.integers(0, TRIALS - 1)
which = st.sampled_from(["current", "previous", "next"])


class Lifecycle(RuleBasedStateMachine):
    """One small sweep per example; `frozen` holds each terminal record as first seen."""

    def __init__(self, store: Store, clock: FakeClock) -> None:
        super().__init__()
        self.store = store
        self.clock = clock
        self.sweep_id, points = make_sweep(store, width_spec(TRIALS, name="properties"))
        self.ids = trial_ids(self.sweep_id, points)
        self.frozen: dict[str, dict[str, Any]] = {}

    def _attempt(self, i: int, pick: str) -> int:
        current = self.store.reads.get_trial(self.ids[i], with_metrics=False)["attempt"]
        return max(1, {"current": current, "previous": current - 1, "next": current + 1}[pick])

    @rule(i=trial, takeover=st.booleans(), stale_after=st.sampled_from([0, 30, 3600]))
    def claim(self, i: int, takeover: bool, stale_after: float) -> None:
        attempt = self._attempt(i, "current") if takeover else None
        claimed = self.store.lifecycle.claim(
            self.ids[i], WORKER, stale_after=stale_after, takeover_attempt=attempt
        )
        if claimed is not None:
            assert claimed["state"] == "running"
            event(f"claimed attempt {min(claimed['attempt'], 3)}")

    @rule(i=trial, pick=which)
    def heartbeat(self, i: int, pick: str) -> None:
        heartbeat(self.store, self.ids[i], self._attempt(i, pick))

    @rule(i=trial, pick=which, epoch=st.integers(0, 2), loss=st.floats(0, 10))
    def report(self, i: int, pick: str, epoch: int, loss: float) -> None:
        try:
            report(self.store, self.ids[i], self._attempt(i, pick), epoch, {"val_loss": loss})
        except InvalidQuery as exc:
            assert exc.field == "attempt"

    @rule(
        i=trial,
        pick=which,
        state=st.sampled_from(["complete", "failed", "pruned", "cancelled"]),
        objective=st.none() | st.floats(0, 1),
    )
    def finish(self, i: int, pick: str, state: str, objective: float | None) -> None:
        tid = self.ids[i]
        before = self.store.reads.get_trial(tid, with_metrics=False)
        try:
            done = finish(
                self.store,
                tid,
                self._attempt(i, pick),
                state,
                result={"objective": objective},
                error="e",
            )
        except InvalidTransition:
            assert state == "cancelled" and not before.get("stop_requested")
            return
        event(f"finish {state}: {'done' if done else 'no-op'}")
        if done:
            assert before["state"] == "running"
        elif before["state"] in TERMINAL_STATES:
            assert self.store.reads.get_trial(tid, with_metrics=False) == before

    @rule(seconds=st.sampled_from([1, 31, 61, 3601]))
    def tick(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule(stale_after=st.sampled_from([0, 60]))
    def requeue(self, stale_after: float) -> None:
        for tid in self.store.admin.requeue_stale(stale_after, sweep_id=self.sweep_id):
            assert tid not in self.frozen

    @rule()
    def retry(self) -> None:
        try:
            queued = self.store.admin.retry_failed(self.sweep_id)
        except InvalidTransition:
            assert self.store.reads.get_sweep(self.sweep_id)["cancelled_at"] is not None
            return
        event(f"retried {min(len(queued), 1)}+")
        for tid in queued:
            assert self.frozen.pop(tid)["state"] == "failed"  # only failed trials come back

    @rule()
    def cancel(self) -> None:
        self.store.admin.cancel_sweep(self.sweep_id)

    @invariant()
    def terminal_records_never_change(self) -> None:
        docs, _ = self.store.reads.trials(self.sweep_id, limit=TRIALS)
        assert len(docs) == TRIALS
        for doc in docs:
            tid = doc["_id"]
            if tid in self.frozen:
                assert doc == self.frozen[tid]
            elif doc["state"] in TERMINAL_STATES:
                self.frozen[tid] = doc
            attempts = [h["attempt"] for h in doc["history"]]
            assert len(attempts) == len(set(attempts)), "an attempt ended twice"
            assert all(h["state"] in ENDED for h in doc["history"])
            assert doc["attempt"] >= max(attempts, default=0)
            if doc["state"] in {"complete", "failed", "pruned"}:
                last = doc["history"][-1]
                assert last["attempt"] == doc["attempt"]
                if last["state"] == "lost":
                    # A poison trial: the loss that made the limit ended it failed, and
                    # that attempt's one history entry is the loss.
                    assert doc["state"] == "failed"
                    assert doc["lost_attempts"] >= DEFAULT_MAX_ATTEMPTS
                    assert doc["error"].startswith("its worker died")
                else:
                    assert last["state"] == doc["state"]

    @invariant()
    def counts_match_the_trials(self) -> None:
        assert self.store.reads.counts(self.sweep_id) == self.store.admin.recount(self.sweep_id)

    @invariant()
    def one_metrics_row_per_attempt_and_epoch(self) -> None:
        rows = list(self.store.db["metrics"].find({"sweep_id": self.sweep_id}))
        keys = [(r["trial_id"], r["attempt"], r["epoch"]) for r in rows]
        assert len(keys) == len(set(keys))


def test_terminal_records_change_only_by_an_explicit_retry(store: Store, clock: FakeClock) -> None:
    run_state_machine_as_test(
        lambda: Lifecycle(store, clock),
        settings=settings(
            max_examples=30,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
