"""The dashboard's logins in the store (`core.store.roles.Sessions`): collection
``sessions``, one document per login, ``{_id: session id, name, created_at, expires_at}``.

A session id is 256 random bits (`secrets.token_hex`); the browser holds it in the signed
session cookie (`web.auth`), never a token or a digest of one. A logout deletes the
document, so a cookie copied before it opens nothing after; a document past its
``expires_at`` counts as gone, and is removed at the next login.
"""

from __future__ import annotations

import re
import secrets
from datetime import timedelta

from core.errors import InvalidQuery
from core.store.roles import Sessions
from core.store.state import StoreState, available

#: What a session id looks like (`secrets.token_hex(32)`).
_SESSION_ID = re.compile(r"[0-9a-f]{64}")


class MongoSessions(Sessions):
    """`Sessions` on MongoDB."""

    def __init__(self, state: StoreState) -> None:
        self._s = state
        self._sessions = state.db["sessions"]

    @available
    def open_session(self, name: str, seconds: float) -> str:
        if not isinstance(name, str) or not name:
            raise InvalidQuery("name", f"must be a token owner's name, got {name!r}")
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0:
            raise InvalidQuery("seconds", f"must be a number > 0, got {seconds!r}")
        now = self._s.clock()
        self._sessions.delete_many({"expires_at": {"$lt": now}})
        session_id = secrets.token_hex(32)
        self._sessions.insert_one({"_id": session_id, "name": name, "created_at": now,
                                   "expires_at": now + timedelta(seconds=seconds)})  # fmt: skip
        return session_id

    @available
    def session_owner(self, session_id: str) -> str | None:
        if not isinstance(session_id, str) or not _SESSION_ID.fullmatch(session_id):
            return None
        doc = self._sessions.find_one({"_id": session_id})
        if doc is None or doc["expires_at"] <= self._s.clock():
            return None
        return str(doc["name"])

    @available
    def close_session(self, session_id: str) -> None:
        if isinstance(session_id, str) and _SESSION_ID.fullmatch(session_id):
            self._sessions.delete_one({"_id": session_id})
