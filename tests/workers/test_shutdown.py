"""When a worker that shuts down stops its trials and ends its tasks (`workers.shutdown`):
the rules alone; `tests/integration/test_scale_down.py` sends real workers SIGTERM."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from core.spec.artifacts import Artifacts
from workers import shutdown


@pytest.fixture
def fresh() -> Iterator[object]:
    """This process's hand-back state, as before any request, and put back after."""
    saved = shutdown._STATE.requested_at, shutdown._STATE.grace
    previous = signal.getsignal(shutdown.HAND_BACK_SIGNAL)
    shutdown._STATE.requested_at = None
    yield shutdown._STATE
    shutdown._STATE.requested_at, shutdown._STATE.grace = saved
    signal.signal(shutdown.HAND_BACK_SIGNAL, previous)


def test_the_escalation_leaves_the_cold_shutdown_time_before_the_grace_ends() -> None:
    assert shutdown.escalate_after(30) == 24  # 80%
    assert shutdown.escalate_after(15) == 10  # 5 s before the end
    assert shutdown.escalate_after(10) == 5  # never before the trials' own half
    for grace in (4, 10, 30, 120):
        assert grace * shutdown.TRAIN_SHARE <= shutdown.escalate_after(grace) < grace


def test_a_trial_stops_after_its_checkpoint_or_at_half_the_grace(fresh: object) -> None:
    shutdown.configure(0.4)
    saver = SimpleNamespace(policy=Artifacts(keep="best"), saved_for_hand_back=False)
    assert not shutdown.requested() and not shutdown.stop_training(saver)
    os.kill(os.getpid(), shutdown.HAND_BACK_SIGNAL)  # what the main process sends
    assert shutdown.requested()
    assert not shutdown.stop_training(saver)  # its epoch may still end, with a checkpoint
    assert shutdown.stop_training(None)  # nothing to save: at once
    off = SimpleNamespace(policy=Artifacts(keep="none"), saved_for_hand_back=False)
    assert shutdown.stop_training(off)  # the sweep saves no checkpoints: at once
    saver.saved_for_hand_back = True
    assert shutdown.stop_training(saver)
    saver.saved_for_hand_back = False
    time.sleep(0.2)  # half of the 0.4 s grace
    assert shutdown.stop_training(saver)
