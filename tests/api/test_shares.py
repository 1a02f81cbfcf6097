"""Priorities, quotas and the fair share at the API (`api.shares`), on the real store and
broker: every refusal names its rule and stores nothing."""

from __future__ import annotations

import dataclasses

import pytest
from flask import Flask
from flask.testing import FlaskClient

from cli.app import create_app
from core.settings import Settings
from core.store.store import Store
from scheduler.enqueue import sender_app
from tests.api import ALICE, BOB, CAROL_TOKEN, SWEEPS, TOKENS, queue_depth, small_spec, submit

CAROL = {"Authorization": f"Bearer {CAROL_TOKEN}"}  # the admin


@pytest.fixture
def shared(settings: Settings) -> Settings:
    return dataclasses.replace(settings, api_tokens=dict(TOKENS), admins=frozenset({"carol"}),
                               quota_sweeps=2)  # fmt: skip


@pytest.fixture
def admin_client(shared: Settings, store: Store) -> FlaskClient:
    app: Flask = create_app(shared, store=store, sender=sender_app(shared))
    return app.test_client()


def test_high_priority_needs_an_admin_or_an_allowance(
    admin_client: FlaskClient, shared: Settings, store: Store
) -> None:
    response = admin_client.post(SWEEPS, json=small_spec(priority="high"), headers=BOB)
    assert response.status_code == 403, response.json
    assert response.json["code"] == "priority_not_allowed"
    assert "priority: high" in response.json["message"] and "'bob'" in response.json["message"]
    assert response.json["details"] == {"field": "priority", "value": "high"}
    assert store.shares.active_sweeps() == [] and queue_depth(shared) == 0
    # An admin may; and may allow bob.
    high = admin_client.post(SWEEPS, json=small_spec(priority="high"), headers=CAROL)
    assert high.status_code == 201
    allowed = admin_client.put("/api/v1/users/bob", json={"high_priority": True}, headers=CAROL)
    assert allowed.status_code == 200 and allowed.json["high_priority"] is True
    sweep_id = submit(admin_client, small_spec(priority="high"), BOB)
    assert store.reads.get_sweep(sweep_id)["priority"] == "high"
    # A priority that is none of the three is a spec error naming the field.
    bad = admin_client.post(SWEEPS, json=small_spec(priority="urgent"), headers=BOB)
    assert bad.status_code == 422
    assert any(p["path"] == "priority" for p in bad.json["details"]["problems"])


def test_a_submit_over_a_quota_is_429_naming_the_quota_and_the_use(
    admin_client: FlaskClient, shared: Settings, store: Store
) -> None:
    submit(admin_client, small_spec(), ALICE)
    submit(admin_client, small_spec(), ALICE)
    depth = queue_depth(shared)
    over = admin_client.post(SWEEPS, json=small_spec(), headers=ALICE)
    assert over.status_code == 429, over.json
    assert over.json["code"] == "quota_exceeded"
    assert over.json["details"] == {"quota": "sweeps", "limit": 2, "used": 2, "requested": 1}
    assert "quota sweeps" in over.json["message"] and "2 used of 2" in over.json["message"]
    assert queue_depth(shared) == depth and len(store.shares.active_sweeps("alice")) == 2
    # Trials stored: an admin gives bob 8; a first sweep of 6 goes in, a second does not.
    set_quota = admin_client.put("/api/v1/users/bob", json={"quotas": {"trials": 8}},
                                 headers=CAROL)  # fmt: skip
    assert set_quota.status_code == 200 and set_quota.json["quotas"]["trials"] == 8
    submit(admin_client, small_spec(), BOB)
    over = admin_client.post(SWEEPS, json=small_spec(), headers=BOB)
    assert over.status_code == 429
    assert over.json["details"] == {"quota": "trials", "limit": 8, "used": 6, "requested": 6}
    shown = admin_client.get("/api/v1/users/bob", headers=BOB).json
    assert shown["used"] == {"running": 0, "trials": 6, "sweeps": 1}
    assert shown["quotas"] == {"running": None, "trials": 8, "sweeps": 2}


def test_only_admins_set_weights_and_quotas_and_users_see_only_themselves(
    admin_client: FlaskClient, store: Store
) -> None:
    refused = admin_client.put("/api/v1/users/alice", json={"weight": 5}, headers=ALICE)
    assert refused.status_code == 403 and refused.json["code"] == "admin_only"
    assert admin_client.get("/api/v1/users/alice", headers=BOB).status_code == 404
    bad = admin_client.put("/api/v1/users/alice", json={"weight": -1}, headers=CAROL)
    assert bad.status_code in (400, 422) and "weight" in bad.get_data(as_text=True)
    sweep_id = submit(admin_client, small_spec(), ALICE)
    assert admin_client.put(f"{SWEEPS}/{sweep_id}/weight", json={"weight": 3},
                            headers=ALICE).status_code == 403  # fmt: skip
    assert admin_client.put(f"{SWEEPS}/{sweep_id}/weight", json={"weight": 3},
                            headers=CAROL).status_code == 200  # fmt: skip
    assert store.reads.get_sweep(sweep_id)["weight"] == 3.0
    assert admin_client.put("/api/v1/users/alice", json={"weight": 2},
                            headers=CAROL).json["weight"] == 2.0  # fmt: skip


def test_shares_show_each_sweep_its_part_of_the_workers_and_its_place(
    admin_client: FlaskClient, store: Store
) -> None:
    store.shares.note_workers(4)
    a = submit(admin_client, small_spec(), ALICE)
    b = submit(admin_client, small_spec(), BOB)
    mine = admin_client.get("/api/v1/shares", headers=ALICE).json
    assert mine["workers"] == 4 and [row["id"] for row in mine["items"]] == [a]
    everyone = admin_client.get("/api/v1/shares", headers=CAROL).json["items"]
    assert {row["id"]: row["share"] for row in everyone} == {a: 2.0, b: 2.0}
    assert sorted(row["position"] for row in everyone) == [1, 2]
    # A submit after the workers were counted stores its fair window only: its 2 workers
    # and a trial waiting for each.
    assert store.reads.counts(b)["queued"] == 6
    assert len(store.feeding.feed_trials(b)) == 4
