"""Fixtures of the dashboard tests: a store on the real server with a small sweep whose
trials went through the real lifecycle, and (in `test_browser`) a real Chromium."""

from __future__ import annotations

import dataclasses
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from flask import Flask
from flask.testing import FlaskClient
from playwright.sync_api import Browser, BrowserContext, sync_playwright

from cli.app import create_app
from core.settings import Settings
from core.spec.sweep import SweepSpec, load_spec
from core.states import TrialState
from core.store.store import Store
from dashboard.blueprint import STATE_KEY
from dashboard.payloads import DashboardState
from dashboard.table import Tables
from scheduler.expand import TrialPoint
from tests.core import FakeClock, finish, make_sweep, open_store, report, trial_ids
from tests.dashboard.browser import (
    CHROMIUM,
    FLOWER,
    ROOT,
    VIEWPORT,
    browser_login,
    launch,
    live_server,
)
from tests.dashboard.seeding import Seeded, mcleod_spec, seed_sweep

#: 16 trials: depth 1-2 x width 32/64 x relu/tanh x seeds 0/1.
SPEC: dict[str, Any] = {
    "name": "dashboard-test",
    "dataset": {"name": "digits"},
    "model": {"hidden_layers": [1, 2], "hidden_units": [32, 64], "activation": ["relu", "tanh"]},
    "training": {"seed": [0, 1], "epochs": 3},
    "objective": {"metric": "val_accuracy", "direction": "maximize"},
}


def small_sweep_spec(**overrides: Any) -> SweepSpec:
    return load_spec({**SPEC, **overrides})


@dataclass
class Sweep:
    """A sweep in the store, its points and trial ids by index, and the clock it ran on."""

    store: Store
    clock: FakeClock
    sweep_id: str
    points: list[TrialPoint]
    ids: list[str]

    def finish(
        self,
        index: int,
        state: TrialState = TrialState.COMPLETE,
        *,
        objective: float | None = None,
        seconds: float = 1.0,
        error: str | None = None,
        epochs: int = 0,
        device: str = "cpu",
        worker: str = "celery@w1",
    ) -> None:
        """Claim, report `epochs` epochs and finish trial `index`, `seconds` of clock later."""
        trial_id = self.ids[index]
        claimed = self.store.lifecycle.claim(
            trial_id, {"host": "h", "pid": 7, "name": worker}, stale_after=60
        )
        assert claimed is not None
        for epoch in range(1, epochs + 1):
            accuracy = (objective or 0.5) * epoch / epochs
            report(
                self.store,
                trial_id,
                claimed["attempt"],
                epoch,
                {
                    "train_loss": 1 / epoch,
                    "val_loss": 1.2 / epoch,
                    "val_accuracy": accuracy,
                    "lr": 0.01,
                    "epoch_seconds": 0.1,
                },
            )
        self.clock.advance(seconds)
        result = {"objective": objective} if objective is not None else None
        extra = {"train_seconds": seconds, "device": device} if state == "complete" else None
        assert finish(
            self.store, trial_id, claimed["attempt"], state, result=result, error=error, extra=extra
        )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(secantus_url: str, db_name: str, clock: FakeClock) -> Iterator[Store]:
    yield from open_store(secantus_url, db_name, clock)


@pytest.fixture
def sweep(store: Store, clock: FakeClock) -> Sweep:
    """16 queued trials of `SPEC`."""
    sweep_id, points = make_sweep(store, small_sweep_spec(), owner="alice")
    return Sweep(store, clock, sweep_id, points, trial_ids(sweep_id, points))


#: Owners and tokens the dashboard tests log in with (root is an admin).
ALICE_TOKEN = "alice-token-0123456789abcdef0123456789"
BOB_TOKEN = "bob-token-0123456789abcdef0123456789ab"
ROOT_TOKEN = "root-token-0123456789abcdef0123456789a"
TOKENS = {ALICE_TOKEN: "alice", BOB_TOKEN: "bob", ROOT_TOKEN: "root"}


def dashboard_settings(secantus_url: str, db_name: str, **overrides: Any) -> Settings:
    """Settings of a dashboard with alice, bob and root (admin), and a fixed session key."""
    base = Settings(
        mongo_url=secantus_url,
        mongo_db=db_name,
        api_tokens=dict(TOKENS),
        admins=frozenset({"root"}),
        secret_key="dashboard-test-secret-0123456789abcdef",
    )
    return dataclasses.replace(base, **overrides)


def dashboard_app(settings: Settings, store: Store, sender: Celery | None = None) -> Flask:
    """The dashboard alone (`cli.app.create_app` without the API) on the test's store."""
    return create_app(settings, store=store, sender=sender, api=False)


def fresh_app(store: Store, secantus_url: str, db_name: str) -> Flask:
    """A dashboard process that has read nothing yet, whose tables sync on every request."""
    app = dashboard_app(dashboard_settings(secantus_url, db_name), store)
    app.extensions[STATE_KEY] = DashboardState(Tables(min_interval=0))
    return app


def csrf_of(html: str) -> str:
    """The CSRF token in a page's form."""
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found, html[:500]
    return found.group(1)


def login(client: FlaskClient, token: str = ALICE_TOKEN) -> FlaskClient:
    """Log `client` in through the login form, as a browser does."""
    form = client.get("/login")
    assert form.status_code == 200
    response = client.post(
        "/login", data={"token": token, "csrf_token": csrf_of(form.get_data(as_text=True))}
    )
    assert response.status_code == 303, response.get_data(as_text=True)[:500]
    return client


# The browser tests' fixtures: one headless Chromium per module, a fresh context per test,
# a store on the real clock, the dashboard served live with alice logged in, the McLeod sweep.


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists() and shutil.which(CHROMIUM) is None:
        pytest.fail(
            f"no Chromium at {CHROMIUM}: apt-get install chromium (make test does)", pytrace=False
        )
    with sync_playwright() as playwright:
        browser = launch(playwright)
        yield browser
        browser.close()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    context = browser.new_context(viewport=VIEWPORT)
    yield context
    context.close()


@pytest.fixture
def live_store(secantus_url: str, db_name: str) -> Iterator[Store]:
    """A store on the real clock (pages poll in real time), its database dropped after."""
    store = Store.connect(secantus_url, db_name)
    store.ensure_indexes()
    yield store
    store.client.drop_database(db_name)
    store.close()


@pytest.fixture
def base_url(
    live_store: Store, secantus_url: str, db_name: str, context: BrowserContext
) -> Iterator[str]:
    """The dashboard served live, with `context` logged in as alice (the seeded owner)."""
    settings = dashboard_settings(secantus_url, db_name, flower_url=FLOWER)
    with live_server(dashboard_app(settings, live_store)) as url:
        browser_login(context, url, ALICE_TOKEN).close()
        yield url


@pytest.fixture
def mcleod(live_store: Store) -> Seeded:
    """The McLeod digits sweep: 309 complete, 8 failed, 3 running, 40 queued."""
    return seed_sweep(live_store, mcleod_spec(str(ROOT)), failed=8, running=3, queued=40)
