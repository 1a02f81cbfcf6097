"""The fair share over time, full size (#32): three users with different weights share real
workers, fed by a real scheduler, on the real RabbitMQ and a SecantusDB started here.

alice (weight 3) submits a 2,000-trial grid; bob (weight 2) a 1,000-trial grid 30 s later;
carol (weight 1) a 1,000-trial grid 30 s after bob. Every trial is the same small network
(one epoch on digits, ``fuse: off``: one message per trial), so a user's share of the
worker time is its share of the trials' training time. Prints, per bin of time, each user's
share of the worker time and what the weights give the users active then (3:2:1 is 50 %,
33 %, 17 %; 3:2 is 60 %, 40 %); then writes the plot (an SVG written here: no plotting
library is a dependency) for the README.

    python -m bench.bench_share [--workers 4] [--seconds 180] [--bin 10] [--plot docs/share.svg]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path

from core.spec.sweep import load_spec
from scheduler.submit import submit_sweep
from tests.integration.stack import Scheduler, Stack, wait_for
from tests.services import SecantusProcess, reachable

BROKER = "amqp://guest:guest@127.0.0.1:5672//"
USERS = (("alice", 3.0, 2000, 0.0), ("bob", 2.0, 1000, 30.0), ("carol", 1.0, 1000, 60.0))
COLOURS = {"alice": "#2680c2", "bob": "#e12d39", "carol": "#3ebd93"}


def grid(name: str, trials: int) -> str:
    rates = [round(0.001 + 0.00001 * i, 6) for i in range(trials // 2)]
    return f"""
name: {name}
dataset: {{name: digits}}
model: {{hidden_units: [256, 256], activation: relu}}
training: {{epochs: 3, batch_size: 32, lr: {rates}, seed: [1, 2]}}
execution: {{fuse: off}}
"""


def spans(stack: Stack, sweep_id: str, now: float) -> list[tuple[float, float]]:
    fields = ("started_at", "finished_at")
    out = []
    for doc in stack.store.reads.changed_rows(sweep_id, None, fields)[0]:
        if isinstance(doc.get("started_at"), datetime):
            end = doc.get("finished_at")
            out.append((doc["started_at"].timestamp(),
                        end.timestamp() if isinstance(end, datetime) else now))  # fmt: skip
    return out


def expected(active: list[str]) -> dict[str, float]:
    weights = {name: w for name, w, _, _ in USERS if name in active}
    total = sum(weights.values())
    return {name: w / total for name, w in weights.items()}


def svg(rows: list[dict], path: Path, bin_seconds: float) -> None:
    """Each user's share per bin as a line, the weights' share as a dashed one."""
    width, height, left, bottom, top, right = 640, 300, 50, 40, 20, 110
    span = max(r["t"] for r in rows) + bin_seconds

    def x(t: float) -> float:
        return left + (width - left - right) * t / span

    def y(share: float) -> float:
        return top + (height - top - bottom) * (1 - share)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]
    for share in (0, 0.25, 0.5, 0.75, 1):
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y(share):.1f}" '
                     f'y2="{y(share):.1f}" stroke="#e4e7eb"/>')  # fmt: skip
        parts.append(f'<text x="{left - 6}" y="{y(share) + 4:.1f}" text-anchor="end">'
                     f"{share:.0%}</text>")  # fmt: skip
    for t in range(0, int(span) + 1, 30):
        parts.append(f'<text x="{x(t):.1f}" y="{height - bottom + 16}" text-anchor="middle">'
                     f"{t} s</text>")  # fmt: skip
    for i, (name, weight, _, _) in enumerate(USERS):
        mid = [(x(r["t"] + bin_seconds / 2), r) for r in rows]
        got = " ".join(f"{px:.1f},{y(r['share'].get(name, 0)):.1f}" for px, r in mid)
        want = " ".join(f"{px:.1f},{y(r['expected'].get(name, 0)):.1f}" for px, r in mid)
        colour = COLOURS[name]
        parts.append(f'<polyline points="{got}" fill="none" stroke="{colour}" stroke-width="2"/>')
        parts.append(f'<polyline points="{want}" fill="none" stroke="{colour}" '
                     'stroke-dasharray="4 3" stroke-width="1"/>')  # fmt: skip
        ly = top + 16 * i + 6
        parts.append(f'<line x1="{width - right + 10}" x2="{width - right + 28}" y1="{ly}" '
                     f'y2="{ly}" stroke="{colour}" stroke-width="2"/>')  # fmt: skip
        parts.append(f'<text x="{width - right + 32}" y="{ly + 4}">{name} (w {weight:g})</text>')
    parts.append(f'<text x="{width - right + 10}" y="{top + 16 * 3 + 10}">dashed: the</text>')
    parts.append(f'<text x="{width - right + 10}" y="{top + 16 * 3 + 24}">weights\' share</text>')
    parts.append(f'<text x="{left}" y="{height - 6}">share of the worker time, per '
                 f"{bin_seconds:g} s (bench/bench_share.py)</text>")  # fmt: skip
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4, help="worker processes")
    parser.add_argument("--seconds", type=float, default=180, help="seconds observed")
    parser.add_argument("--bin", type=float, default=10, help="seconds per line printed")
    parser.add_argument("--plot", type=Path, default=None, help="write the SVG plot here")
    args = parser.parse_args()
    if not reachable(BROKER):
        raise SystemExit(f"RabbitMQ is not reachable at {BROKER}")
    folder = Path(tempfile.mkdtemp(prefix="sweepstack-share-bench-"))
    (folder / "secantus").mkdir()
    server = SecantusProcess(folder / "secantus")
    stack = Stack(BROKER, server.url, f"share_{uuid.uuid4().hex[:8]}", folder)
    schedulers: list[Scheduler] = []
    try:
        stack.start_worker(concurrency=args.workers)
        schedulers.append(Scheduler(stack.env, folder / "scheduler.log", 3))
        wait_for(lambda: stack.store.shares.workers() == args.workers, 120, "the workers")
        for name, weight, _, _ in USERS:
            stack.store.shares.set_user(name, {"weight": weight})
        start = time.time()
        sweeps: dict[str, str] = {}
        submitted: dict[str, float] = {}
        for name, _, trials, at in USERS:
            time.sleep(max(0.0, start + at - time.time()))
            submitted[name] = time.time()
            sweeps[name], _ = submit_sweep(load_spec(grid(name, trials)), stack.store,
                                           stack.app, owner=name)  # fmt: skip
            print(f"{time.time() - start:5.1f} s  {name} submits {trials} trials", flush=True)
        time.sleep(max(0.0, start + args.seconds - time.time()))
        now = time.time()
        done = {name: spans(stack, sweep_id, now) for name, sweep_id in sweeps.items()}
    finally:
        for s in schedulers:
            s.stop()
        stack.close()
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
    for name, began in submitted.items():
        first = min((s for s, _ in done[name]), default=None)
        waited = "never" if first is None else f"{first - began:.2f} s after its submit"
        print(f"{name}'s first trial started {waited}")
    rows = []
    print(f"\n{'from':>6} {'to':>6}  " + "  ".join(f"{n:>14}" for n, *_ in USERS))
    t = 0.0
    while t + args.bin <= args.seconds + 1e-9:
        a, b = start + t, start + t + args.bin
        used = {n: sum(max(0.0, min(e, b) - max(s, a)) for s, e in done[n]) for n in done}
        total = sum(used.values()) or 1.0
        share = {n: used[n] / total for n in used}
        active = [n for n, _, _, at in USERS if at < t + args.bin / 2]
        want = expected(active)
        rows.append({"t": t, "share": share, "expected": want})
        cells = "  ".join(f"{share.get(n, 0):6.0%} ({want.get(n, 0):4.0%})" for n, *_ in USERS)
        print(f"{t:5.0f}s {t + args.bin:5.0f}s  {cells}", flush=True)
        t += args.bin
    print("(each cell: the user's share of the worker time in the bin (the weights' share))")
    if args.plot:
        svg(rows, args.plot, args.bin)
        print(f"plot written to {args.plot}")


if __name__ == "__main__":
    main()
