"""The ways the API is started: ``cli.wsgi`` (no torch, no workers), and ``sweepstack api``
serving it with gunicorn on a real port: gunicorn's own refusals in the JSON error shape,
and one session key for all its workers."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests
from click.testing import CliRunner

from cli.api_server import api, gunicorn_argv
from core.settings import Settings
from tests.api import ALICE_TOKEN
from tests.services import free_port, wait_listening

ROOT = Path(__file__).resolve().parents[2]


def _env(settings: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWEEPSTACK_")}
    env.update(
        SWEEPSTACK_BROKER_URL=settings.broker_url or "",
        SWEEPSTACK_MONGO_URL=settings.mongo_url or "",
        SWEEPSTACK_MONGO_DB=settings.mongo_db,
        SWEEPSTACK_QUEUE=settings.queue,
        SWEEPSTACK_API_TOKENS=f"alice:{ALICE_TOKEN}",
        PYTHONPATH=str(ROOT),
    )
    return env


def test_importing_the_wsgi_app_loads_neither_torch_nor_the_workers(settings: Settings) -> None:
    code = (
        "import sys, cli.wsgi\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'workers'))\n"
        "print(bad)\n"
        "assert not bad, bad\n"
        "assert cli.wsgi.app.extensions['sweepstack'].settings.queue\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=_env(settings), cwd=ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]


def test_sweepstack_api_serves_with_gunicorn(settings: Settings, tmp_path: Path) -> None:
    port = free_port()
    argv = gunicorn_argv("127.0.0.1", port, workers=1, threads=2)
    env = {**_env(settings), "HOME": str(tmp_path)}
    proc = subprocess.Popen(argv, env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        wait_listening("127.0.0.1", port, 60, proc)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/health", timeout=10) as r:
            assert r.status == 200 and json.load(r)["status"] == "ok"
        request = urllib.request.Request(f"http://127.0.0.1:{port}/api/v1/sweeps")
        try:
            urllib.request.urlopen(request, timeout=10)
        except urllib.error.HTTPError as exc:
            assert exc.code == 401 and json.load(exc)["code"] == "unauthorized"
        else:
            raise AssertionError("an unauthenticated request got through")
        # No control socket (`cli.gunicorn_conf`): its default path is one per user.
        time.sleep(1)
        assert not (tmp_path / ".gunicorn").exists()
    finally:
        proc.terminate()
        proc.wait(20)


def test_the_api_command_needs_the_service_urls() -> None:
    result = CliRunner().invoke(api, ["--port", "9"], env={"SWEEPSTACK_BROKER_URL": ""})
    assert result.exit_code == 2 and "SWEEPSTACK_BROKER_URL is not set" in result.output
    argv = gunicorn_argv("0.0.0.0", 8080, workers=3, threads=4)
    assert argv[argv.index("--bind") + 1] == "0.0.0.0:8080" and "cli.wsgi:app" in argv
    assert argv[argv.index("--workers") + 1] == "3"


@contextmanager
def served(settings: Settings, workers: int = 1) -> Iterator[str]:
    """`sweepstack api`'s gunicorn on a free port; its base URL."""
    port = free_port()
    argv = gunicorn_argv("127.0.0.1", port, workers=workers, threads=2)
    proc = subprocess.Popen(argv, env=_env(settings), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_listening("127.0.0.1", port, 60, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(20)


def test_gunicorn_refusals_answer_the_json_error_shape(settings: Settings) -> None:
    with served(settings) as base:
        long_url = requests.get(f"{base}/api/v1/sweeps?q={'x' * 10_000}", timeout=10)
        assert long_url.status_code == 414
        assert long_url.headers["Content-Type"] == "application/json"
        assert long_url.json()["code"] == "uri_too_long"
        assert set(long_url.json()) == {"code", "message", "details"}
        big_header = requests.get(f"{base}/api/v1/health", headers={"X-Big": "y" * 10_000},
                                  timeout=10)
        assert big_header.status_code in (400, 431)
        assert set(big_header.json()) == {"code", "message", "details"}


def test_a_login_holds_across_gunicorn_workers_without_a_configured_key(
    settings: Settings,
) -> None:
    with served(settings, workers=2) as base:
        session = requests.Session()
        form = session.get(f"{base}/login", timeout=10).text
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', form)
        assert csrf is not None
        done = session.post(f"{base}/login", data={"token": ALICE_TOKEN, "csrf_token": csrf[1]},
                            allow_redirects=False, timeout=10)
        assert done.status_code == 303
        # A new connection each time, so the two workers take turns answering.
        answers = [requests.get(f"{base}/dashboard/data/sweeps", cookies=session.cookies,
                                headers={"Connection": "close"}, timeout=10).status_code
                   for _ in range(12)]
        assert answers == [200] * 12
