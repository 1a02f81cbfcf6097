"""Workers on real RabbitMQ, a real MongoDB wire-protocol server and real Celery processes."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
import uuid

import pytest
from kombu import Connection

from core.broker import TASK_NAME
from tests.integration.stack import ROOT, Stack, wait_for

pytestmark = pytest.mark.integration

QUICKSTART = (ROOT / "configs" / "quickstart.yaml").read_text()


def spec(name: str, body: str, execution: str = "device: cpu") -> str:
    return (
        f"name: {name}-{uuid.uuid4().hex[:6]}\ndataset: {{name: digits}}\n"
        f"execution: {{{execution}}}\nobjective: {{metric: val_accuracy, direction: max}}\n{body}"
    )


def test_quickstart_sweep_completes_with_metrics_via_cli(stack: Stack) -> None:
    stack.start_worker(concurrency=2)
    cli = [sys.executable, "-m", "cli.main"]
    out = subprocess.run(
        [*cli, "submit", str(ROOT / "configs" / "quickstart.yaml"), "--json"],
        env=stack.env,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    submitted = json.loads(out.stdout)
    assert submitted["trials"] == 12
    sweep_id = submitted["sweep_id"]
    counts = stack.wait_finished(sweep_id, timeout=240)
    assert counts["complete"] == 12, stack.logs()
    out = subprocess.run(
        [*cli, "status", sweep_id, "--json"],
        env=stack.env,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    status = json.loads(out.stdout)
    assert status["counts"]["complete"] == 12
    assert status["best"]["result"]["objective"] > 0.8
    trials, _ = stack.store.reads.trials(sweep_id, limit=100)
    for doc in trials:
        full = stack.store.reads.get_trial(doc["_id"])
        epochs = [m["epoch"] for m in full["metrics"]]
        assert epochs == list(range(1, 9)) or epochs == list(range(8)), epochs
        assert full["param_count"] > 0 and full["train_seconds"] > 0
        assert full["versions"]["torch"].startswith("2.13.0")
        assert full["dtype"] == "float32" and full["device"] == "cpu"


def test_diverging_trial_fails_with_reason_and_others_complete(stack: Stack) -> None:
    stack.start_worker()
    sweep_id, _ = stack.submit(
        f"name: diverge-{uuid.uuid4().hex[:6]}\ndataset: {{name: synthetic_regression}}\n"
        "execution: {device: cpu}\nobjective: {metric: val_rmse, direction: min}\n"
        "training:\n  optimizer: sgd\n  lr: [0.01, 50.0]\n  epochs: 3\n"
    )
    counts = stack.wait_finished(sweep_id, timeout=120)
    assert (counts["complete"], counts["failed"]) == (1, 1), stack.logs()
    failed, _ = stack.store.reads.trials(sweep_id, state="failed")
    assert "nan" in failed[0]["error"].lower() or "inf" in failed[0]["error"].lower()


def test_time_limit_fails_the_trial(stack: Stack) -> None:
    stack.start_worker()
    sweep_id, _ = stack.submit(
        spec("slow", "training:\n  epochs: 5000\n", execution="device: cpu, time_limit: 2")
    )
    counts = stack.wait_finished(sweep_id, timeout=120)
    assert counts["failed"] == 1, stack.logs()
    (doc,), _ = stack.store.reads.trials(sweep_id)
    assert "time limit" in doc["error"]


def _long_sweep(stack: Stack, name: str) -> str:
    sweep_id, _ = stack.submit(
        spec(
            name,
            "training:\n  epochs: 40\n  batch_size: 16\n"
            "model:\n  hidden_layers: 2\n  hidden_units: 128\n",
        )
    )
    return sweep_id


def _running_after_an_epoch(stack: Stack, sweep_id: str) -> dict:
    def running() -> dict | None:
        trials, _ = stack.store.reads.trials(sweep_id, state="running")
        if trials and stack.store.reads.get_trial(trials[0]["_id"])["metrics"]:
            return trials[0]
        return None

    return wait_for(running, 120, "a running trial with a reported epoch")


def _one_terminal_record(stack: Stack, sweep_id: str) -> dict:
    (doc,), _ = stack.store.reads.trials(sweep_id)
    full = stack.store.reads.get_trial(doc["_id"])
    assert full["state"] == "complete", full.get("error")
    assert full["attempt"] == 2
    terminal = [h for h in full["history"] if h["state"] in ("complete", "failed", "pruned")]
    assert len(terminal) <= 1
    assert [h["attempt"] for h in full["history"]].count(1) == 1
    found = stack.store.db["metrics"].find({"trial_id": doc["_id"]}, {"attempt": 1, "epoch": 1})
    rows = [(row["attempt"], row["epoch"]) for row in found]
    assert len(rows) == len(set(rows)), rows  # no (attempt, epoch) row twice
    lost = sorted(e for a, e in rows if a == 1)
    assert lost == list(range(1, len(lost) + 1))  # the kill lost only the newest rows
    assert sorted(e for a, e in rows if a == 2) == list(range(1, 41))
    return full


def test_kill_9_of_the_training_child_retries_the_trial(stack: Stack) -> None:
    stack.start_worker()
    sweep_id = _long_sweep(stack, "kill-child")
    doc = _running_after_an_epoch(stack, sweep_id)
    os.kill(doc["worker"]["pid"], signal.SIGKILL)
    stack.wait_finished(sweep_id, timeout=180)
    _one_terminal_record(stack, sweep_id)


def test_kill_9_of_the_whole_worker_then_restart(stack: Stack) -> None:
    worker = stack.start_worker()
    sweep_id = _long_sweep(stack, "kill-worker")
    _running_after_an_epoch(stack, sweep_id)
    worker.kill_all()
    time.sleep(1)
    stack.start_worker()
    stack.wait_finished(sweep_id, timeout=180)
    _one_terminal_record(stack, sweep_id)


def test_rabbitmq_restart_with_200_trials_queued_loses_none(stack: Stack) -> None:
    # One message per trial (``fuse: off``; under ``auto`` such cheap trials share messages).
    body = "training:\n  epochs: 0\n  seed: {int: [1, 200]}\n"
    sweep_id, n = stack.submit(spec("restart", body, "device: cpu, fuse: off"))
    assert n == 200
    wait_for(lambda: stack.queue_depth() == 200, 30, "200 messages in the queue")
    for action in ("stop_app", "start_app"):
        subprocess.run(["rabbitmqctl", action], check=True, capture_output=True, timeout=120)
    subprocess.run(["rabbitmqctl", "await_startup"], check=True, capture_output=True, timeout=120)
    assert stack.queue_depth() == 200
    stack.start_worker(concurrency=2)
    counts = stack.wait_finished(sweep_id, timeout=240)
    assert counts["complete"] == 200, stack.logs()


def test_pickled_message_is_refused(stack: Stack) -> None:
    sweep_id, _ = stack.submit(spec("pickle", "training:\n  epochs: 0\n"))
    (doc,), _ = stack.store.reads.trials(sweep_id)
    # Drain the proper message first, so only the pickled one is left for the worker.
    with Connection(stack.settings.broker_url) as conn:
        conn.default_channel.queue_purge(stack.queue)
        with conn.Producer() as producer:
            producer.publish(
                pickle.dumps(([doc["_id"]], {}, {})),
                exchange=stack.queue,
                routing_key=stack.queue,
                content_type="application/x-python-serialize",
                content_encoding="binary",
                serializer=None,
                headers={
                    "lang": "py",
                    "task": TASK_NAME,
                    "id": str(uuid.uuid4()),
                    "argsrepr": "",
                    "kwargsrepr": "",
                },
            )
    stack.start_worker()
    wait_for(
        lambda: "untrusted content" in stack.logs() or "pickle" in stack.logs(),
        30,
        "the worker to refuse the pickled message",
    )
    assert stack.store.reads.get_trial(doc["_id"], with_metrics=False)["state"] == "queued"
    wait_for(lambda: stack.queue_depth() == 0, 30, "the refused message to leave the queue")


def test_redelivered_message_for_a_finished_trial_changes_nothing(stack: Stack) -> None:
    stack.start_worker()
    sweep_id, _ = stack.submit(spec("redeliver", "training:\n  epochs: 1\n"))
    stack.wait_finished(sweep_id, timeout=60)
    (doc,), _ = stack.store.reads.trials(sweep_id)
    before = stack.store.reads.get_trial(doc["_id"])
    stack.app.send_task(TASK_NAME, args=[doc["_id"]])
    wait_for(lambda: stack.logs().count("succeeded") >= 2, 30, "the second message to be handled")
    wait_for(lambda: stack.queue_depth() == 0, 30, "the queue to empty")
    after = stack.store.reads.get_trial(doc["_id"])
    assert after == before


def test_api_scheduler_and_core_do_not_import_torch() -> None:
    code = (
        "import sys, core.spec.sweep, core.store.store, core.broker, core.settings, cli.main, "
        "cli.commands, scheduler.submit, scheduler.enqueue, api, dashboard; "
        "bad = [m for m in ('torch', 'workers') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_remote_control_answers_inspections_and_refuses_shutdown(stack: Stack) -> None:
    """Any client of the broker may send a remote-control command: a worker answers the
    inspections (Flower, the Workers page) but refuses to shut down, restart its pool or
    change its queues (`workers.app.restrict_remote_control`)."""
    stack.start_worker()
    control = stack.app.control
    wait_for(lambda: control.inspect(timeout=1).ping(), 60, "the worker to answer a ping")
    for command in ("shutdown", "pool_restart", "cancel_consumer", "revoke"):
        replies = control.broadcast(command, arguments={"queue": stack.queue, "task_id": "x"},
                                    reply=True, timeout=2)  # fmt: skip
        assert replies, command
        for reply in replies:
            (answer,) = reply.values()
            assert command in answer.get("error", ""), (command, answer)  # unknown there
    time.sleep(1)
    assert control.inspect(timeout=2).ping(), "the worker is still up"
    assert control.inspect(timeout=2).active_queues()  # what Flower shows
    sweep_id, _ = stack.submit(spec("after-control", "training:\n  epochs: 0\n"))
    assert stack.wait_finished(sweep_id, timeout=60)["complete"] >= 1


def _roll_back_claim(stack: Stack, trial_id: str, sweep_id: str) -> None:
    """What a store that lost its last acknowledged writes shows of a running trial: queued
    at attempt 0 again, no worker, no rows (the claim and what followed never happened)."""
    db = stack.store.db
    done = db["trials"].update_one(
        {"_id": trial_id, "state": "running"},
        {"$set": {"state": "queued", "attempt": 0},
         "$unset": {"worker": "", "started_at": "", "heartbeat_at": "", "progress": ""}},
    )  # fmt: skip
    assert done.modified_count == 1
    db["metrics"].delete_many({"trial_id": trial_id})
    db["sweeps"].update_one({"_id": sweep_id},
                            {"$inc": {"counts.running": -1, "counts.queued": 1}})  # fmt: skip


@pytest.mark.parametrize("fused", [False, True], ids=["plain", "fused-group"])
def test_a_trial_whose_claim_the_store_lost_is_sent_again_and_completes(
    stack: Stack, fused: bool
) -> None:
    """The claim was acknowledged, the worker trains, then the store comes back without it:
    the worker's next write is refused as an attempt the trial never had, the attempt ends
    lost, and the task sends its message again (the trial is queued, with no message
    anywhere), so the trial still ends complete, once, with every epoch of its attempt."""
    stack.start_worker()
    width = "hidden_units: [16, 24]" if fused else "hidden_units: 64"
    execution = "device: cpu, fuse: 2" if fused else "device: cpu, fuse: off"
    sweep_id, total = stack.submit(spec(
        "vanished", f"model: {{hidden_layers: 2, {width}}}\n"
        "training: {optimizer: sgd, lr: 0.02, epochs: 12, batch_size: 8, seed: 1}\n",
        execution,
    ))  # fmt: skip
    ids = [d["_id"] for d in stack.all_trials(sweep_id)]
    metrics = stack.store.db["metrics"]
    wait_for(lambda: metrics.count_documents({"trial_id": ids[0]}) >= 1, 120,
             "the first epoch row")  # fmt: skip
    _roll_back_claim(stack, ids[0], sweep_id)
    counts = stack.wait_finished(sweep_id, timeout=240)
    assert counts["complete"] == total, (counts, stack.logs()[-3000:])
    for trial_id in ids:
        doc = stack.store.reads.get_trial(trial_id, with_metrics=True)
        assert doc["state"] == "complete"
        ended = [h for h in doc.get("history", []) if h.get("state") == "complete"]
        assert len(ended) == 1, doc.get("history")
        epochs = [r["epoch"] for r in doc["metrics"] if r["attempt"] == doc["attempt"]]
        assert sorted(epochs) == list(range(1, 13)), epochs
    assert "claim vanished" in stack.logs()
