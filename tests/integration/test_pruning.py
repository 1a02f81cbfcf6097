"""Early stopping on every path, on real RabbitMQ, a real MongoDB wire-protocol server and
real Celery workers: the test plays the scheduler.

It stores a sweep and enqueues its messages with ``watch`` on (what a pruning sweep sends,
`scheduler.enqueue.carry`), waits until a trial has reported an epoch, asks the store to
prune it at the latest epoch it sees (`SweepAdmin.request_prune`), and checks that the trial
ends ``pruned`` within one epoch of the request (``pruned_epoch`` is that epoch or the
next), with every row up to it stored once and its objective the value at that epoch,
while the other trials are untouched. The workers beat only every 60 s here, so only the
per-epoch check of a watched trial can stop it that soon. Without ``watch``, the heartbeat
thread's next beat stops it (the last test, in this process).
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
import torch

from core.spec.sweep import load_spec
from scheduler.enqueue import enqueue
from scheduler.expand import expand
from scheduler.messages import messages
from tests.integration.stack import Stack, wait_for
from tests.integration.test_parallel import _all_gone, _ranks_of
from workers.runner import RunnerOptions, execute_trial, worker_identity

pytestmark = pytest.mark.integration

#: Digits, a small net and small batches: ~0.2 s an epoch on one core, long enough to see.
TRAINING = "{optimizer: sgd, lr: [0.02, 0.05], epochs: 30, batch_size: 8, seed: 1}"


def _spec(name: str, training: str, execution: str) -> str:
    return (
        f"name: {name}-{uuid.uuid4().hex[:6]}\ndataset: {{name: digits}}\n"
        "objective: {metric: val_accuracy, direction: max}\n"
        f"model: {{hidden_layers: 2, hidden_units: 64}}\ntraining: {training}\n"
        f"execution: {execution}\n"
    )


def _submit_watched(stack: Stack, text: str) -> tuple[str, list[Any]]:
    """Store the sweep and enqueue its messages with ``watch`` on; its id and messages."""
    spec = load_spec(text)
    trials = expand(spec, with_config=True)
    sweep_id = stack.store.admin.create_sweep(spec, trials)
    sent = [(ids, limit, {**kwargs, "watch": True}) for ids, limit, kwargs in messages(
        sweep_id, trials
    )]  # fmt: skip
    assert enqueue(stack.app, sent) == len(sent)
    return sweep_id, sent


def _slow_beats(stack: Stack) -> None:
    """Workers whose heartbeat thread would take a minute to hear of a prune request."""
    stack.env["SWEEPSTACK_HEARTBEAT_SECONDS"] = "60"
    stack.env["SWEEPSTACK_STALE_AFTER_SECONDS"] = "300"


def _epochs(stack: Stack, trial_id: str) -> list[int]:
    """The trial's stored epochs (attempt 1), checked to be stored once each."""
    found = stack.store.db["metrics"].find({"trial_id": trial_id}, {"attempt": 1, "epoch": 1})
    rows = [(row["attempt"], row["epoch"]) for row in found]
    assert len(rows) == len(set(rows)), rows
    assert {a for a, _ in rows} <= {1}
    return sorted(e for _, e in rows)


def _prune_once_training(stack: Stack, sweep_id: str, after: int) -> tuple[str, int]:
    """Wait until a running trial has reported epoch `after`, then ask to prune it at the
    latest epoch stored; (its id, that epoch)."""

    def reported() -> tuple[str, int] | None:
        running, _ = stack.store.reads.trials(sweep_id, state="running")
        for doc in running:
            epochs = _epochs(stack, doc["_id"])
            if epochs and epochs[-1] >= after:
                return doc["_id"], doc["attempt"]
        return None

    trial_id, attempt = wait_for(reported, 120, f"a trial to report epoch {after}", every=0.05)
    seen = _epochs(stack, trial_id)[-1]
    assert stack.store.admin.request_prune({trial_id: (attempt, seen)}) == [trial_id]
    return trial_id, seen


def _assert_pruned(stack: Stack, trial_id: str, seen: int, epochs: int) -> dict[str, Any]:
    """The trial ended pruned within one epoch of the request at `seen`, rows kept."""
    doc = stack.store.reads.get_trial(trial_id)
    assert doc["state"] == "pruned", (doc["state"], doc.get("error"), stack.logs())
    assert doc["pruned_epoch"] in (seen, seen + 1), (doc["pruned_epoch"], seen)
    assert doc["pruned_epoch"] < epochs
    assert _epochs(stack, trial_id) == list(range(1, doc["pruned_epoch"] + 1))
    assert doc["prune_requested"]["epoch"] == seen and doc["prune_requested"]["attempt"] == 1
    last = doc["metrics"][-1]["metrics"]
    assert doc["objective"] == last["val_accuracy"] == doc["result"]["final"]["val_accuracy"]
    assert doc["result"]["epochs"] == doc["pruned_epoch"]
    assert [h["state"] for h in doc["history"]] == ["pruned"]
    return doc


def _assert_complete(stack: Stack, trial_id: str, epochs: int) -> dict[str, Any]:
    doc = stack.store.reads.get_trial(trial_id)
    assert doc["state"] == "complete", (doc["state"], doc.get("error"), stack.logs())
    assert _epochs(stack, trial_id) == list(range(1, epochs + 1))
    assert doc.get("pruned_epoch") is None and doc.get("prune_requested") is None
    return doc


def test_a_plain_trial_stops_within_an_epoch_and_ends_pruned(stack: Stack) -> None:
    _slow_beats(stack)
    sweep_id, sent = _submit_watched(
        stack, _spec("prune-plain", TRAINING, "{device: cpu, fuse: off}")
    )
    assert len(sent) == 2 and all(isinstance(ids, str) for ids, _, _ in sent)
    stack.start_worker()
    pruned, seen = _prune_once_training(stack, sweep_id, after=3)
    counts = stack.wait_finished(sweep_id, timeout=120)
    assert (counts["pruned"], counts["complete"]) == (1, 1), stack.logs()
    _assert_pruned(stack, pruned, seen, epochs=30)
    (other,) = [t for t, _, _ in sent if t != pruned]
    _assert_complete(stack, other, epochs=30)
    assert stack.store.reads.get_sweep(sweep_id)["counts"] == stack.store.admin.recount(sweep_id)


def test_a_pruned_member_leaves_its_fused_group_and_the_others_complete(stack: Stack) -> None:
    _slow_beats(stack)
    training = "{optimizer: sgd, lr: [0.01, 0.02, 0.05], epochs: 30, batch_size: 8, seed: 2}"
    sweep_id, sent = _submit_watched(
        stack, _spec("prune-fused", training, "{device: cpu, fuse: 64}")
    )
    ((ids, _, kwargs),) = sent  # one group message for the three trials
    assert len(ids) == 3 and kwargs["watch"] is True
    stack.start_worker()
    pruned, seen = _prune_once_training(stack, sweep_id, after=3)
    counts = stack.wait_finished(sweep_id, timeout=120)
    assert (counts["pruned"], counts["complete"]) == (1, 2), stack.logs()
    doc = _assert_pruned(stack, pruned, seen, epochs=30)
    assert doc["fused"] == 3 and doc["group_size"] == 3
    for other in (t for t in ids if t != pruned):
        kept = _assert_complete(stack, other, epochs=30)
        assert kept["group"] == doc["group"]


def test_a_data_parallel_trial_stops_on_every_rank_and_ends_pruned(stack: Stack) -> None:
    _slow_beats(stack)
    training = "{optimizer: sgd, lr: 0.05, epochs: 40, batch_size: 16, seed: 0}"
    execution = "{device: cpu, parallel: {world_size: 2, strategy: allreduce}}"
    sweep_id, _ = _submit_watched(stack, _spec("prune-parallel", training, execution))
    worker = stack.start_worker()

    def both_ranks() -> list[int] | None:
        found = _ranks_of(worker.proc.pid)
        return found if len(found) == 2 else None

    ranks = wait_for(both_ranks, 120, "the trial's two ranks to start")
    pruned, seen = _prune_once_training(stack, sweep_id, after=2)
    counts = stack.wait_finished(sweep_id, timeout=120)
    assert counts["pruned"] == 1, stack.logs()
    doc = _assert_pruned(stack, pruned, seen, epochs=40)
    assert doc["device_info"]["world_size"] == 2
    assert _all_gone(ranks)
    assert _ranks_of(worker.proc.pid) == []


def test_without_watch_the_heartbeat_thread_still_stops_a_pruned_trial(stack: Stack) -> None:
    # Unwatched, epoch rows are written every 2 s: 30 epochs can end before the pruner sees
    # one on a quiet machine, so the trial is long enough to be pruned whatever the speed.
    training = "{optimizer: sgd, lr: 0.02, epochs: 400, batch_size: 8, seed: 1}"
    spec = load_spec(_spec("prune-unwatched", training, "{device: cpu, fuse: off}"))
    trials = expand(spec, with_config=True)[:1]
    sweep_id = stack.store.admin.create_sweep(spec, trials)
    trial_id = f"{sweep_id}-{trials[0].id}"
    pruner = threading.Thread(target=_prune_once_training, args=(stack, sweep_id, 2))
    pruner.start()
    torch.set_num_threads(1)
    options = RunnerOptions(heartbeat_seconds=0.2, stale_after_seconds=30.0)
    carried = (0, trials[0].config)
    outcome = execute_trial(
        stack.store.lifecycle, trial_id, worker_identity("in-process"), options, carried=carried
    )
    pruner.join()
    assert outcome == "pruned"
    doc = stack.store.reads.get_trial(trial_id)
    assert doc["state"] == "pruned" and 2 <= doc["pruned_epoch"] < 400
    assert _epochs(stack, trial_id) == list(range(1, doc["pruned_epoch"] + 1))
