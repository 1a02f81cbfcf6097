"""A quorum trials queue (`SWEEPSTACK_QUEUE_TYPE=quorum`, #33) on the real RabbitMQ: declared
with a delivery limit of SWEEPSTACK_MAX_ATTEMPTS; a queue of the same name and another type
is a clear error naming the setting; a message the broker drops at the limit ends its trial
failed with the reason (`scheduler.undelivered`), so nothing waits for ever."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from kombu import Connection

from cli.main import main
from core.broker import check_queue, trial_queue, undelivered_queue
from core.errors import ConfigError
from core.settings import Settings
from core.shares import MAX_MESSAGE_PRIORITY
from scheduler.enqueue import sender_app
from scheduler.undelivered import drain_undelivered, trial_ids_of
from tests.integration.stack import Stack, wait_for

pytestmark = pytest.mark.integration

SPEC = """
name: undelivered
objective: {metric: val_accuracy, direction: max}
dataset: {name: iris}
model: {hidden_layers: 1, hidden_units: 8}
training: {optimizer: sgd, epochs: 1, batch_size: 16, lr: [0.01, 0.1]}
execution: {device: cpu, fuse: off}
"""


def quorum(stack: Stack, max_attempts: int) -> Settings:
    stack.env.update({"SWEEPSTACK_QUEUE_TYPE": "quorum",
                      "SWEEPSTACK_MAX_ATTEMPTS": str(max_attempts)})  # fmt: skip
    stack.settings = Settings.from_env(stack.env)
    stack.app = sender_app(stack.settings)
    return stack.settings


def remove(settings: Settings) -> None:
    with Connection(settings.broker_url) as conn:
        conn.default_channel.queue_delete(undelivered_queue(settings).name)


def test_queue_type_is_classic_or_quorum() -> None:
    assert Settings.from_env({}).queue_type == "classic"
    assert Settings.from_env({"SWEEPSTACK_QUEUE_TYPE": "quorum"}).queue_type == "quorum"
    with pytest.raises(ConfigError, match="SWEEPSTACK_QUEUE_TYPE: must be one of classic, quorum"):
        Settings.from_env({"SWEEPSTACK_QUEUE_TYPE": "mirrored"})
    arguments = trial_queue(Settings(queue="q", queue_type="quorum", max_attempts=4))
    assert arguments.queue_arguments == {
        "x-queue-type": "quorum",
        "x-delivery-limit": 4,
        "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": "q.undelivered",
    }
    # A classic queue is a priority queue; a quorum queue takes no x-max-priority.
    assert trial_queue(Settings(queue="q")).max_priority == MAX_MESSAGE_PRIORITY
    assert trial_queue(Settings(queue="q", queue_type="quorum")).max_priority is None


def test_a_classic_queue_of_the_name_is_a_clear_error(stack: Stack) -> None:
    check_queue(stack.settings)  # the classic queue, as the stack's workers would declare it
    settings = quorum(stack, 3)
    try:
        with pytest.raises(ConfigError) as caught:
            check_queue(settings)
        assert "SWEEPSTACK_QUEUE_TYPE=quorum" in str(caught.value)
        assert stack.queue in str(caught.value) and "cannot change" in str(caught.value)
    finally:
        remove(settings)


def test_a_message_dropped_at_the_delivery_limit_ends_its_trial_failed(stack: Stack) -> None:
    settings = quorum(stack, 2)
    try:
        check_queue(settings)
        sweep_id, total = stack.submit(SPEC)
        assert total == 2
        # A consumer that takes each message and gives it back, again and again (a worker
        # that dies before its claim): the broker drops each after 2 returns.
        returned = 0
        with Connection(settings.broker_url) as conn:
            queue = trial_queue(settings)(conn.channel())
            first = wait_for(lambda: queue.get(no_ack=False), 10, "a message")
            ids = trial_ids_of(first.body, first.headers)
            first.reject(requeue=True)
            returned += 1
            while (message := queue.get(no_ack=False)) is not None and returned < 20:
                ids += trial_ids_of(message.body, message.headers)
                message.reject(requeue=True)
                returned += 1
            assert returned == 2 * 3, returned  # each delivered 3 times: 2 returns allowed
            assert queue.queue_declare(passive=True).message_count == 0
            ended = drain_undelivered(stack.store, stack.app)
        assert sorted(ended) == sorted(set(ids)) and len(ended) == 2
        for trial_id in ended:
            doc = stack.store.reads.get_trial(trial_id, with_metrics=False)
            assert doc["state"] == "failed"
            assert "delivery limit" in doc["error"], doc["error"]
            assert "SWEEPSTACK_MAX_ATTEMPTS=2" in doc["error"], doc["error"]
            assert "after 2 returns" in doc["error"], doc["error"]
        counts = stack.store.reads.counts(sweep_id)
        assert counts["failed"] == 2 and counts["queued"] == 0, counts
        # Draining again ends nothing more; a trial that runs is never ended by a drain.
        assert drain_undelivered(stack.store, stack.app) == []
    finally:
        remove(settings)


@pytest.mark.parametrize("command", ["worker", "scheduler"])
def test_worker_and_scheduler_stop_at_a_queue_of_another_type(stack: Stack, command: str) -> None:
    check_queue(stack.settings)  # the classic queue
    env = {**stack.env, "SWEEPSTACK_QUEUE_TYPE": "quorum"}
    try:
        out = CliRunner().invoke(main, [command], env=env)
        assert out.exit_code == 2, out.output
        assert "SWEEPSTACK_QUEUE_TYPE=quorum" in out.output and stack.queue in out.output
        assert "Traceback" not in out.output
    finally:
        remove(Settings.from_env(env))
