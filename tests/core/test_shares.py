"""The fair share's arithmetic (`core.shares`): tiers, weights, demands, quotas, slots."""

from __future__ import annotations

import pytest

from core.shares import Claim, exact_shares, fair_shares, water_fill


def test_water_fill_gives_by_weight_and_passes_on_what_a_key_cannot_use() -> None:
    assert water_fill(6, {"a": 2, "b": 1}, {"a": 100, "b": 100}) == pytest.approx(
        {"a": 4, "b": 2}
    )
    assert water_fill(6, {"a": 1, "b": 1}, {"a": 1, "b": 100}) == pytest.approx({"a": 1, "b": 5})
    assert water_fill(6, {"a": 1, "b": 1}, {"a": 0, "b": 2}) == pytest.approx({"a": 0, "b": 2})


def test_users_share_first_then_their_sweeps() -> None:
    claims = [
        Claim("a1", "alice", 2000),
        Claim("a2", "alice", 2000),
        Claim("b1", "bob", 100),
    ]
    shares = exact_shares(claims, 4)
    # Two users, equal weights: two workers each, alice's split between her two sweeps.
    assert shares == pytest.approx({"a1": 1, "a2": 1, "b1": 2})


def test_user_weights_set_the_proportions() -> None:
    claims = [
        Claim("a", "alice", 100, user_weight=2),
        Claim("b", "bob", 100),
        Claim("c", "carol", 100),
    ]
    assert exact_shares(claims, 8) == pytest.approx({"a": 4, "b": 2, "c": 2})


def test_a_high_sweep_is_served_before_normal_and_low_after() -> None:
    claims = [
        Claim("a", "alice", 2000),
        Claim("h", "bob", 3, priority="high"),
        Claim("l", "carol", 50, priority="low"),
    ]
    shares = exact_shares(claims, 4)
    assert shares == pytest.approx({"h": 3, "a": 1, "l": 0})
    fair = fair_shares(claims, 4)
    assert fair["h"].position == 1 and fair["l"].position == 3
    assert fair["l"].window == 0  # nothing of it waits on the queue while others use all


def test_the_running_quota_caps_a_user_and_the_rest_goes_to_others() -> None:
    claims = [Claim("a", "alice", 2000), Claim("b", "bob", 2000)]
    shares = fair_shares(claims, 6, {"alice": 1})
    assert shares["a"].exact == pytest.approx(1) and shares["b"].exact == pytest.approx(5)
    assert shares["a"].window == 1  # no trial waiting beyond the quota
    assert shares["b"].window == 10  # its 5 workers and a trial waiting for each


def test_fractions_become_whole_slots_for_whoever_is_furthest_behind() -> None:
    claims = [
        Claim("a", "alice", 100, running=1),
        Claim("b", "bob", 100, running=1),
        Claim("c", "carol", 100, running=0),
    ]
    shares = fair_shares(claims, 2)
    assert sum(s.slots for s in shares.values()) == 2
    # carol runs nothing of her two thirds of a worker: the next slot is hers.
    assert shares["c"].slots == 1 and shares["c"].position == 1
    assert all(s.window <= s.slots + 1 for s in shares.values())


def test_a_new_sweep_behind_a_large_one_gets_half_at_once() -> None:
    claims = [Claim("a", "alice", 2000, running=2), Claim("b", "bob", 100)]
    shares = fair_shares(claims, 2)
    assert (shares["a"].window, shares["b"].window) == (2, 2)
    assert shares["b"].position == 1


def test_windows_follow_the_exact_shares_in_whole_trials() -> None:
    """The queue is first in, first out: a sweep's throughput follows its trials in flight,
    so the windows (twice the share) carry the weights, the fractions by turns."""
    claims = [
        Claim("a", "alice", 2000, running=2, user_weight=3),
        Claim("b", "bob", 1000, running=1, user_weight=2),
        Claim("c", "carol", 1000, running=1, user_weight=1),
    ]
    shares = fair_shares(claims, 4)
    assert [round(shares[k].exact, 3) for k in "abc"] == [2.0, 1.333, 0.667]
    assert sum(s.window for s in shares.values()) == 8
    assert shares["a"].window == 4
    # bob runs 1 of his 1.33 (75 %), carol 1 of her 0.67 (150 %): the spare unit is bob's.
    assert (shares["b"].window, shares["c"].window) == (3, 1)
    again = fair_shares([claims[0], Claim("b", "bob", 1000, running=2, user_weight=2),
                         Claim("c", "carol", 1000, running=0, user_weight=1)], 4)  # fmt: skip
    assert (again["b"].window, again["c"].window) == (2, 2)


def test_a_paused_sweep_claims_its_running_trials_only() -> None:
    """A paused sweep starts nothing new (#32 part 3): the share counts its running trials
    as its demand, so its workers go to the others as those trials end."""
    from datetime import UTC, datetime

    from core.store.shares import claims

    docs = [
        {"_id": "p", "owner": "a", "counts": {"queued": 50, "running": 2},
         "paused_at": datetime(2026, 12, 6, tzinfo=UTC)},
        {"_id": "q", "owner": "b", "counts": {"queued": 50, "running": 2}, "paused_at": None},
    ]  # fmt: skip
    paused, live = claims(docs, {})
    assert (paused.demand, paused.running) == (2, 2) and live.demand == 52
    assert exact_shares([paused, live], 8) == pytest.approx({"p": 2, "q": 6})
