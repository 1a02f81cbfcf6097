"""The shared auth layer (`web.auth`): bearer tokens compared in constant time with every
token, failed attempts throttled per address, and the token rules checked at start."""

from __future__ import annotations

import dataclasses
import time

import pytest

from cli.app import create_app
from core.errors import ConfigError
from core.settings import Settings
from core.store.store import Store
from scheduler.enqueue import sender_app
from tests.api import ALICE, ALICE_TOKEN, BOB_TOKEN
from web.auth import identify


def test_identify_compares_against_every_token() -> None:
    tokens = {ALICE_TOKEN: "alice", BOB_TOKEN: "bob"}
    assert identify(f"Bearer {BOB_TOKEN}", tokens) == "bob"
    assert identify(f"bearer   {ALICE_TOKEN} ", tokens) == "alice"
    assert identify(f"Bearer {ALICE_TOKEN[:-1]}", tokens) is None
    assert identify(f"Bearer {ALICE_TOKEN}-and-more", tokens) is None
    assert identify("Bearer ", tokens) is None
    assert identify(ALICE_TOKEN, tokens) is None
    assert identify(None, tokens) is None
    assert identify(f"Bearer {ALICE_TOKEN}", {}) is None
    assert identify("Bearer \udcff\u00e9", tokens) is None


def test_wrong_bearer_tokens_are_throttled_per_address(settings: Settings, store: Store) -> None:
    app = create_app(dataclasses.replace(settings, auth_failures=3, auth_window_seconds=2),
                     store=store, sender=sender_app(settings))
    client = app.test_client()
    client.environ_base["REMOTE_ADDR"] = "10.9.0.1"
    for _ in range(5):  # right tokens never count
        assert client.get("/api/v1/sweeps", headers=ALICE).status_code == 200
    wrong = {"Authorization": "Bearer " + "w" * 40}
    assert [client.get("/api/v1/sweeps", headers=wrong).status_code for _ in range(3)] == [
        401, 401, 401]
    blocked = client.get("/api/v1/sweeps", headers=wrong)
    assert blocked.status_code == 429 and blocked.json["code"] == "too_many_failures"
    wait = int(blocked.headers["Retry-After"])
    assert 1 <= wait <= 2
    # A right token from the same address (a reverse proxy's, shared by every user) is
    # never locked out, however many wrong ones came from there.
    for _ in range(100):
        assert client.get("/api/v1/sweeps", headers=wrong).status_code == 429
    assert client.get("/api/v1/sweeps", headers=ALICE).status_code == 200
    other = app.test_client()
    other.environ_base["REMOTE_ADDR"] = "10.9.0.2"
    assert other.get("/api/v1/sweeps", headers=wrong).status_code == 401
    time.sleep(wait + 0.5)
    assert client.get("/api/v1/sweeps", headers=wrong).status_code == 401


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("alice:short-token", "the token of 'alice' has 11 characters; at least 32"),
        ("alice:" + "a" * 40, "the token of 'alice' is too easy to guess"),
        ("alice:" + "ab" * 20, "the token of 'alice' is too easy to guess"),
        (f"alice:{ALICE_TOKEN},bob:{ALICE_TOKEN}", "'alice' and 'bob' have the same token"),
    ],
    ids=["short", "one-letter", "two-letters", "duplicate"],
)
def test_token_rules_at_start(raw: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        Settings.from_env({"SWEEPSTACK_API_TOKENS": raw})
    assert message in str(raised.value)
    assert "short-token" not in str(raised.value) and ALICE_TOKEN not in str(raised.value)


def test_admins_must_be_token_names() -> None:
    env = {"SWEEPSTACK_API_TOKENS": f"alice:{ALICE_TOKEN}", "SWEEPSTACK_ADMINS": "alice,eve"}
    with pytest.raises(ConfigError, match="SWEEPSTACK_ADMINS: eve not among"):
        Settings.from_env(env)
    env["SWEEPSTACK_ADMINS"] = "alice"
    assert Settings.from_env(env).admins == frozenset({"alice"})


def test_behind_a_trusted_proxy_the_throttle_counts_the_client(
    settings: Settings, store: Store
) -> None:
    proxied = dataclasses.replace(settings, auth_failures=2, auth_window_seconds=30,
                                  trusted_proxies=1)  # fmt: skip
    app = create_app(proxied, store=store, sender=sender_app(settings))
    client = app.test_client()
    client.environ_base["REMOTE_ADDR"] = "10.9.9.9"  # the proxy: every request comes from it
    wrong = {"Authorization": "Bearer " + "w" * 40}

    def from_client(address: str, headers: dict[str, str]) -> int:
        return client.get("/api/v1/sweeps", headers={**headers, "X-Forwarded-For": address}
                          ).status_code  # fmt: skip

    assert [from_client("203.0.113.7", wrong) for _ in range(3)] == [401, 401, 429]
    # Another client behind the same proxy is its own address: not blocked.
    assert from_client("203.0.113.8", wrong) == 401
    assert from_client("203.0.113.7", ALICE) == 200
    # Not trusted (the default), the header is ignored: the proxy's address is counted.
    plain = create_app(dataclasses.replace(proxied, trusted_proxies=0), store=store,
                       sender=sender_app(settings)).test_client()  # fmt: skip
    plain.environ_base["REMOTE_ADDR"] = "10.9.9.8"
    codes = [plain.get("/api/v1/sweeps", headers={**wrong, "X-Forwarded-For": f"198.51.100.{i}"}
                       ).status_code for i in range(3)]  # fmt: skip
    assert codes == [401, 401, 429]
