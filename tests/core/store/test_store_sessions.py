"""Contract of the dashboard's logins in the store (`core.store.sessions`): a session id is
random and opens its owner's login until it is closed or expires; anything else opens
nothing. Runs against the real server of the `mongo_url` fixture."""

from __future__ import annotations

import pytest

from core.errors import InvalidQuery
from core.store.store import Store
from tests.core import FakeClock


def test_a_session_opens_its_owners_login_until_it_is_closed(store: Store) -> None:
    first = store.sessions.open_session("alice", 3600)
    second = store.sessions.open_session("alice", 3600)
    assert len(first) == 64 and first != second
    assert store.sessions.session_owner(first) == "alice"
    store.sessions.close_session(first)
    assert store.sessions.session_owner(first) is None
    assert store.sessions.session_owner(second) == "alice"  # the other login stays
    store.sessions.close_session(first)  # twice: nothing


def test_a_session_ends_at_its_time_and_is_removed_at_the_next_login(
    store: Store, clock: FakeClock
) -> None:
    old = store.sessions.open_session("bob", 60)
    clock.advance(61)
    assert store.sessions.session_owner(old) is None
    store.sessions.open_session("carol", 60)
    assert store.db["sessions"].count_documents({"_id": old}) == 0


@pytest.mark.parametrize("session_id", ["", "nope", "0" * 63, {"$ne": ""}, None, "A" * 64])
def test_anything_but_a_live_session_id_opens_nothing(store: Store, session_id: object) -> None:
    store.sessions.open_session("alice", 60)
    assert store.sessions.session_owner(session_id) is None  # type: ignore[arg-type]
    store.sessions.close_session(session_id)  # type: ignore[arg-type]
    assert store.db["sessions"].count_documents({}) == 1


def test_bad_input_is_refused_naming_the_field(store: Store) -> None:
    with pytest.raises(InvalidQuery, match="name"):
        store.sessions.open_session("", 60)
    with pytest.raises(InvalidQuery, match="seconds"):
        store.sessions.open_session("alice", -1)
