"""A real headless Chromium (Debian's ``chromium``) driven by playwright, and a live server.

Playwright's own browser downloads are not used: `launch` points it at the system
Chromium (``SWEEPSTACK_CHROMIUM`` overrides the path). Pages mark themselves drawn by
setting ``window.__dashboard.drawn`` (and ``drawnAt``, ms since navigation start) once
every figure is drawn and painted; `open_drawn` waits for that.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flask import Flask
from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page, Playwright
from werkzeug.serving import make_server

from tests.integration.stack import ROOT

CHROMIUM = os.environ.get("SWEEPSTACK_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
#: A laptop screen.
VIEWPORT = {"width": 1440, "height": 900}

SCREENSHOTS = ROOT / "test-output" / "screenshots"
FLOWER = "http://127.0.0.1:5555/"
WORKER = {"host": "browser-test", "pid": 4321, "name": "celery@browser-test"}


def wait_until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def shoot(page: Page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def launch(playwright: Playwright) -> Browser:
    """Debian's Chromium, headless."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)


def launch_profile(playwright: Playwright, user_dir: str) -> BrowserContext:
    """Chromium with a profile on disk, as a returning user has: its HTTP and code caches."""
    return playwright.chromium.launch_persistent_context(
        user_dir, executable_path=CHROMIUM, args=ARGS, viewport=VIEWPORT
    )


@dataclass
class Console:
    """What a page logged: every console message, and uncaught errors."""

    messages: list[tuple[str, str]] = field(default_factory=list)

    def attach(self, page: Page) -> Console:
        page.on("console", self._message)
        page.on("pageerror", lambda exc: self.messages.append(("pageerror", str(exc))))
        return self

    def _message(self, message: ConsoleMessage) -> None:
        self.messages.append((message.type, message.text))

    def errors(self) -> list[str]:
        """Console errors and uncaught exceptions (warnings, such as the software GL
        driver's performance notes, are not errors)."""
        return [text for kind, text in self.messages if kind in ("error", "pageerror")]


def open_drawn(context: BrowserContext, url: str, timeout_s: float = 60) -> tuple[Page, Console]:
    """A new page at `url`, once it says every figure is drawn."""
    page = context.new_page()
    console = Console().attach(page)
    page.goto(url)
    page.wait_for_function(
        "() => window.__dashboard && window.__dashboard.drawn", timeout=timeout_s * 1000
    )
    return page, console


def drawn_ms(page: Page) -> float:
    """Milliseconds from navigation start to the page's fully drawn mark."""
    return float(page.evaluate("window.__dashboard.drawnAt"))


def trace_lengths(page: Page, element_id: str) -> list[int]:
    """How many points each trace of a figure holds (x values, nulls included)."""
    return page.evaluate(
        "(id) => document.getElementById(id).data.map((t) => (t.x || []).length)", element_id
    )


def figure(page: Page, element_id: str) -> dict[str, Any]:
    """A drawn figure's data and layout, as plotly.js holds them."""
    return page.evaluate(
        "(id) => { const gd = document.getElementById(id);"
        " return {data: gd.data, layout: gd.layout}; }",
        element_id,
    )


@contextmanager
def live_server(app: Flask) -> Iterator[str]:
    """`app` served by werkzeug on a free port in a thread; yields its base URL."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="dashboard-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(10)


def browser_login(context: BrowserContext, base_url: str, token: str) -> Page:
    """Log `context` in through the dashboard's login form, as a person does; the page
    it lands on (the Sweeps page)."""
    page = context.new_page()
    page.goto(f"{base_url}/login")
    page.fill("#token", token)
    page.click("#login-submit")
    page.wait_for_url(f"{base_url}/")
    return page
