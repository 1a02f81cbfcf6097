"""The windows a grid's feeder sends after the first go in fused groups and chunks as the
first does (`scheduler.point_list.PointList`): pure logic on the feeder's source, then
the messages on the real store and RabbitMQ with a stand-in worker."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from core.spec.kinds import kind_of
from core.spec.sweep import load_spec
from scheduler.feed import Feeder
from scheduler.messages import messages
from scheduler.submit import submit_sweep
from tests.integration.stack import Stack
from tests.scheduler.test_feed import finish_some

#: Cheap trials of small nets on digits: fused groups, and lone ones in chunks.
MIXED = (
    "dataset: {name: digits}\n"
    "model: {hidden_units: [8, 16, 32], activation: [relu, tanh]}\n"
    "training: {epochs: 2, lr: [0.01, 0.02, 0.05, 0.1], seed: {int: [1, 5]}}\n"
    "objective: {metric: val_accuracy, direction: max}\n"
)
#: Trials that train nothing: chunks only.
CHEAP = "dataset: {name: iris}\ntraining: {epochs: 0, seed: {int: [1, 120]}}\n"


def spec_of(text: str) -> Any:
    return load_spec(f"name: b-{uuid.uuid4().hex[:6]}\n{text}")


def shape(out: list[Any]) -> list[tuple[int, bool]]:
    """Each message as (trials it carries, whether a chunk)."""
    return [
        (len(ids), bool(kw.get("sequential"))) if isinstance(ids, list) else (1, False)
        for ids, _, kw in out
    ]


def fed_one_at_a_time(feeder: Feeder, total: int) -> list[Any]:
    """The messages of a feeder asked for one trial per pass, until its points run out."""
    out: list[Any] = []
    asked = 0
    while asked < total:
        points, _ = feeder.ask(1)
        assert points, "the feeder ran out early"
        assert len(points) < 2 * 32, "a pass sends at most one message past its room"
        out += feeder.outgoing("s", points, None)
        feeder.sent(points)
        asked += len(points)
    assert asked == total
    return out


@pytest.mark.parametrize("text", [MIXED, CHEAP], ids=["fused-and-chunks", "chunks"])
def test_later_windows_go_as_the_first_window_of_their_points_would(text: str) -> None:
    spec = spec_of(text)
    feeder = Feeder(None, None, "", spec, owner="t", workers=2, big_window=40)  # type: ignore[arg-type]
    first, _ = feeder.ask(40)
    assert len(first) == 40
    sent_first = feeder.outgoing("s", first, None)
    assert sent_first == messages("s", first, 2)
    feeder.sent(first)
    # Each later pass has room for one trial: its block is still grouped as a first window.
    second = fed_one_at_a_time(feeder, 40)
    block = feeder.listed.points[40:80]  # type: ignore[union-attr]
    assert sorted(map(str, second)) == sorted(map(str, messages("s", block, 2)))
    assert len(second) < 40, "later trials went alone"
    assert any(n > 1 for n, _ in shape(second))


def test_a_fused_and_chunked_block_is_sent_whole_before_the_next_is_planned() -> None:
    spec = spec_of(MIXED)
    feeder = Feeder(None, None, "", spec, owner="t", workers=2, big_window=40)  # type: ignore[arg-type]
    ids: list[str] = []
    while True:
        points, _ = feeder.ask(7)
        if not points:
            break
        ids += [p.id for p in points]
        feeder.sent(points)
    assert sorted(ids) == sorted(p.id for p in feeder.listed.points)  # type: ignore[union-attr]
    assert len(ids) == len(set(ids)) == feeder.total == 120


@pytest.mark.integration
def test_a_grid_fed_in_small_windows_sends_groups_and_chunks_after_the_first(
    stack: Stack,
) -> None:
    spec = spec_of(CHEAP)
    sweep_id, total = submit_sweep(spec, stack.store, stack.app, workers=2, window=30)
    assert total == 120
    first = stack.queue_depth()
    assert first < 30  # chunks
    feeder = Feeder.open(stack.store, stack.app, sweep_id, owner="f", workers=2, big_window=30)
    assert feeder is not None
    fed = 30
    while fed < total:
        finish_some(stack, sweep_id, 3)
        feeder.step()
        now = len(stack.store.feeding.feed_trials(sweep_id))
        assert now - fed <= 32 + 3  # the room, and one message past it at most
        fed = now
    # 90 trials fed a few at a time went in chunks, as the first 30 did (90 messages before).
    later = stack.queue_depth() - first
    assert later <= 3 * first + 3, (first, later)
    counts = stack.store.reads.counts(sweep_id)
    assert sum(counts.values()) == 120 and counts["queued"] + counts["complete"] == 120


def test_a_sweep_of_costly_configs_is_resolved_a_block_at_a_time() -> None:
    """Caffe nets of 300 layers (~0.1 s each to render and price): the feeder resolves at
    most `RESOLVE_SECONDS` of them a call, in the expansion's order, each config as
    `expand` gives it, and never mistakes a block's end for the end of the sweep."""
    from scheduler.expand import expand
    from scheduler.point_list import RESOLVE_SECONDS
    from tests.api.test_ceilings import caffe, deep_net

    spec = load_spec(caffe(deep_net(300), layers={"ip": {"num_output": list(range(10, 40))}}))
    feeder = Feeder(None, None, "", spec, owner="t", workers=2)  # type: ignore[arg-type]
    block = feeder.listed.block  # type: ignore[union-attr]
    assert block is not None and 1 <= block < 30
    assert block * kind_of(spec).config_seconds(spec) <= RESOLVE_SECONDS  # type: ignore[operator]
    expected = {p.id: p.config for p in expand(spec, with_config=True)}
    order = [p.id for p in expand(spec)]
    asked: list[str] = []
    while not feeder.ran_out:
        points, _ = feeder.ask(100)
        assert 0 < len(points) <= block
        assert all(p.config == expected[p.id] for p in points)
        asked += [p.id for p in points]
        feeder.sent(points)
    assert sorted(asked) == sorted(order) and len(asked) == 30
    assert feeder.ask(100) == ([], {})


@pytest.mark.integration
def test_a_window_the_broker_refuses_is_sent_by_a_later_pass(stack: Stack) -> None:
    """`sweepstack scheduler` meets the broker down while it sends a window: the pass goes
    on (no crash), and the window, stored, is sent once the broker answers again."""
    import dataclasses

    from scheduler.enqueue import sender_app
    from scheduler.feeders import Feeders

    spec = spec_of(CHEAP)
    sweep_id, _ = submit_sweep(spec, stack.store, stack.app, workers=2, window=30)
    first = stack.queue_depth()
    finish_some(stack, sweep_id, 30)
    down = sender_app(
        dataclasses.replace(stack.settings, broker_url="amqp://guest:guest@127.0.0.1:9//")
    )
    feeders = Feeders(stack.store, down, workers=2, big_window=30)
    feeders.step()  # stores the next window, cannot send it
    assert feeders.feeders == {}
    stored = len(stack.store.feeding.feed_trials(sweep_id))
    assert stored > 30 and stack.store.reads.get_sweep(sweep_id)["sending"]
    assert stack.queue_depth() == first
    up = Feeders(stack.store, stack.app, workers=2, big_window=30)
    up.step()
    assert stack.queue_depth() > first
    assert not stack.store.reads.get_sweep(sweep_id).get("sending")
    up.close()
