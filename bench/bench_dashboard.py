"""The sweep page at 50,000 finished trials: time to a fully drawn page in headless Chromium,
and ``GET /api/v1/sweeps/{id}``.

    python -m bench.bench_dashboard [--url mongodb://...] [--seeds 10]

Seeds a store with a finished grid sweep (5 depths x 50 widths x 5 activations x 4
learning rates x `--seeds` seeds: 50,000 trials with 10) and its summaries (what the
lifecycle keeps as trials finish: `core.store.summaries`), serves the dashboard with gunicorn as
``sweepstack dashboard`` does, and opens the sweep page in Debian's Chromium (software
WebGL, no GPU). The figure is the time from navigation start to the page's own "every
figure drawn and painted" mark, in four situations, compared in one run (in brackets: when
the figures' data had come; when the page found plotly.js ready, its "plotly" mark (it is
the page's last script, so the cards and tables are filled before it; a page without the
mark: DOMContentLoaded's end, which then held the drawing too); and the time from then to
the drawn mark):

- first open ever, on a server just started: the server reads the sweep from its finish
  log and computes every figure (before summaries, it read every trial: 11.8 s);
- first open after a server restart: the figures of the finished sweep and its trials
  table's first page were stored by the first open (`dashboard.snapshots`), so nothing is
  read again until the page's first poll, after it is drawn;
- server warm, new browser (empty caches: plotly.js, 4.8 MB (1.5 gzipped), is parsed
  from scratch);
- server warm, returning browser (a profile on disk that has opened the dashboard
  before, so plotly.js comes from the browser's code cache): the everyday case.

``GET /api/v1/sweeps/{id}`` is timed in-process (Flask's test client, a new app and store
client as after a start): the first call, and the median of the next ones.

Without --url (or SWEEPSTACK_BENCH_MONGO_URL) it starts its own SecantusDB.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from bench import store_url
from bench.bench_expand import GRID
from cli.dashboard_server import gunicorn_argv
from core.spec.sweep import load_spec
from core.store.store import Store
from tests.dashboard.browser import VIEWPORT, launch, launch_profile, open_drawn
from tests.dashboard.seeding import seed_sweep
from tests.services import free_port, wait_listening

ROOT = Path(__file__).resolve().parents[1]
BUDGET_MS = 2000
API_BUDGET_MS = 100
REPEAT = 3
API_REPEAT = 20
BENCH_TOKEN = "bench-token-0123456789abcdef0123456789"

_PROBE = """() => {
  const marks = Object.fromEntries(performance.getEntriesByType('mark')
    .map((m) => [m.name, m.startTime]));
  const data = performance.getEntriesByType('resource')
    .find((r) => r.name.includes('/dashboard/data/sweeps/'));
  const gd = (id) => document.getElementById(id);
  return {
    drawn: window.__dashboard.drawnAt,
    dom: marks.plotly !== undefined ? marks.plotly
      : performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd,
    data: data ? data.responseEnd : null,
    bytes: data ? data.encodedBodySize : null,
    figures: marks.plotly !== undefined ? window.__dashboard.drawnAt - marks.plotly : null,
    marks: Object.entries(marks).map(([k, v]) => k + ' ' + Math.round(v)).join(', '),
    scatter: gd('fig-scatter').data[0].x.length,
    parallel: gd('fig-parallel').layout.meta.kept.length,
  };
}"""


def _measure(context: Any, url: str) -> dict[str, Any]:
    page, console = open_drawn(context, url, timeout_s=180)
    probe = page.evaluate(_PROBE)
    probe["errors"] = console.errors()
    page.close()
    return probe


def _line(label: str, runs: list[dict[str, Any]]) -> str:
    drawn = statistics.median(r["drawn"] for r in runs)
    last = runs[-1]
    verdict = "within" if drawn <= BUDGET_MS else "OVER"
    return (
        f"{label:<44} {drawn / 1000:6.2f} s ({verdict} the {BUDGET_MS / 1000:.0f} s budget)"
        f"  [data {last['data'] / 1000:5.2f} s, {last['bytes'] / 1e6:4.1f} MB;"
        f" plotly.js ready {last['dom'] / 1000:5.2f} s; figures {last['figures'] / 1000:5.2f} s]"
    )


def _serve(env: dict[str, str], port: int) -> subprocess.Popen:
    """The dashboard under gunicorn, as ``sweepstack dashboard`` serves it, listening."""
    argv = gunicorn_argv("127.0.0.1", port, threads=8)
    argv[argv.index("--access-logfile") + 1] = "/dev/null"
    server = subprocess.Popen(argv, env=env, cwd=ROOT)
    wait_listening("127.0.0.1", port, 60, server)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/dashboard/plotly.min.js") as answer:
        answer.read()
    return server


def _time_get_sweep(url: str, db_name: str, sweep_id: str) -> tuple[float, float]:
    """Seconds of ``GET /api/v1/sweeps/{id}`` on a new app: the first call, then the median."""
    from cli.app import create_app
    from core.settings import Settings

    settings = Settings(
        mongo_url=url, mongo_db=db_name, broker_url="memory://", api_tokens={BENCH_TOKEN: "alice"}
    )
    store = Store.connect(url, db_name)
    try:
        client = create_app(settings, store=store).test_client()
        headers = {"Authorization": f"Bearer {BENCH_TOKEN}"}
        times = []
        for _ in range(API_REPEAT + 1):
            start = time.perf_counter()
            answer = client.get(f"/api/v1/sweeps/{sweep_id}", headers=headers)
            times.append(time.perf_counter() - start)
            if answer.status_code != 200:
                raise RuntimeError(f"GET sweep answered {answer.status_code}: {answer.text}")
        return times[0], statistics.median(times[1:])
    finally:
        store.close()


def run(url: str, seeds: int, verbose: bool = False) -> None:
    db_name = f"bench_dashboard_{uuid.uuid4().hex[:8]}"
    store = Store.connect(url, db_name)
    server = None
    try:
        seed_list = ", ".join(str(s) for s in range(seeds))
        text = GRID.replace("seed: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]", f"seed: [{seed_list}]")
        spec = load_spec(text + "objective: {metric: val_accuracy, direction: maximize}\n")
        start = time.perf_counter()
        seeded = seed_sweep(store, spec, failed=25 * seeds, curves=20, spacing=0.05)
        n = len(seeded.points)
        complete = seeded.count("complete")
        print(
            f"seeded {n:,} finished trials ({complete:,} complete) in "
            f"{time.perf_counter() - start:.1f} s"
        )

        start = time.perf_counter()
        store.reads.best(seeded.sweep_id, 1)  # its first read builds the summaries
        print(
            f"built its summaries from the trials in {time.perf_counter() - start:.1f} s"
            " (the lifecycle keeps them as trials finish; this is the once-only slow path)"
        )
        api_first, api_warm = _time_get_sweep(url, db_name, seeded.sweep_id)

        env = {
            **os.environ,
            "SWEEPSTACK_MONGO_URL": url,
            "SWEEPSTACK_MONGO_DB": db_name,
            "SWEEPSTACK_LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(ROOT),
        }
        env.pop("SWEEPSTACK_BROKER_URL", None)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        page_url = f"{base}/sweeps/{seeded.sweep_id}"

        from playwright.sync_api import sync_playwright

        with sync_playwright() as playwright:
            browser = launch(playwright)
            first_ever, cold_server = [], []
            for runs in (first_ever, cold_server):  # a server start before each
                if server is not None:
                    server.terminate()
                    server.wait(30)
                server = _serve(env, port)
                context = browser.new_context(viewport=VIEWPORT)
                runs.append(_measure(context, page_url))
                context.close()
            cold_browser = []
            for _ in range(REPEAT):
                context = browser.new_context(viewport=VIEWPORT)
                cold_browser.append(_measure(context, page_url))
                context.close()
            browser.close()
            with tempfile.TemporaryDirectory() as profile:
                context = launch_profile(playwright, profile)
                for _ in range(2):  # a returning user: plotly.js is in the code cache
                    _measure(context, page_url)
                warm = [_measure(context, page_url) for _ in range(REPEAT)]
                context.close()

        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        print(
            f"sweep page, {n:,} trials, Chromium {VIEWPORT['width']}x{VIEWPORT['height']},"
            f" software WebGL, {os.cpu_count()} CPUs with load average {load};"
            f" median of {REPEAT} where repeated:"
        )
        print(_line("first open ever, server just started", first_ever))
        print(_line("first open after a server restart", cold_server))
        print(_line("server warm, new browser (no caches)", cold_browser))
        print(_line("server warm, returning browser (code cache)", warm))
        verdict = "within" if api_first <= API_BUDGET_MS / 1000 else "OVER"
        print(
            f"GET /api/v1/sweeps/{{id}}: first after a start {api_first * 1000:.0f} ms"
            f" ({verdict} the {API_BUDGET_MS} ms budget), then {api_warm * 1000:.0f} ms"
            f" (median of {API_REPEAT})"
        )
        if verbose:
            for label, runs in (
                ("ever", first_ever),
                ("restart", cold_server),
                ("new", cold_browser),
                ("warm", warm),
            ):
                for r in runs:
                    print(f"  {label}: drawn {r['drawn']:.0f} ms; marks (ms) {r['marks']}")
        every = first_ever + cold_server + cold_browser + warm
        points_ok = all(
            r["scatter"] == complete and r["parallel"] == min(complete, 5000) for r in every
        )
        errors = sorted({e for r in every for e in r["errors"]})
        print(
            f"scatter points {every[-1]['scatter']:,} (complete trials {complete:,}), "
            f"parallel coordinates {every[-1]['parallel']:,}: "
            f"{'as expected' if points_ok else 'WRONG'}; console errors: {errors or 'none'}"
        )
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
        store.client.drop_database(db_name)
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("SWEEPSTACK_BENCH_MONGO_URL"))
    parser.add_argument(
        "--seeds",
        type=int,
        default=10,
        help="seeds per setting: 5,000 trials each (default 10: 50,000)",
    )
    parser.add_argument("--verbose", action="store_true", help="print when each figure drew")
    args = parser.parse_args()
    with store_url(args.url) as url:
        run(url, args.seeds, args.verbose)


if __name__ == "__main__":
    sys.exit(main())
