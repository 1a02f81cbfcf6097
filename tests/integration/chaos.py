"""The chaos harness (#29): sweeps of every kind trained through a seeded schedule of
disruptions on real services, then checked trial by trial.

One implementation for the test (`tests/integration/test_chaos.py`, a bounded run) and the
benchmark (`python -m bench.bench_chaos`, >= 500 trials and >= 40 disruptions).

What runs, all real: a RabbitMQ node of the harness's own (`tests.services.RabbitNode`, so
that a broker restart leaves the shared broker alone), SecantusDB behind a TCP proxy that
the harness cuts (`tests.services.Proxy`; the harness itself reads the store directly),
two `sweepstack worker --workers 1 --name chaos-N` commands and `sweepstack scheduler`.
The sweeps (`plan`) train fused groups pruned by successive halving at their rungs, chunks
of cheap trials, plain trials with checkpoints under ASHA, and data-parallel trials.

The disruptions (`schedule`, seeded; each kind at least once):

- ``child``: kill -9 the training process (a Celery pool child) of a running trial;
- ``rank``: kill -9 one rank of a running data-parallel trial (a child when none runs);
- ``worker``: kill -9 a whole worker (its process group), then start it again;
- ``scheduler``: kill -9 the scheduler, then start it again;
- ``two_schedulers``: a second scheduler beside the first for a while, then stopped or
  killed;
- ``broker``: the broker stopped for a few seconds (``rabbitmqctl stop_app``), then started;
- ``store``: the store cut off for a few seconds (the proxy refuses and drops everything).

Then the harness waits for every sweep to end and checks (`Chaos.check`, the checks in
`tests.integration.chaos_checks`, read from the store alone): every planned
trial was created, once; each ended exactly once (one terminal record, its last, after
lost attempts only); no (trial, attempt, epoch) row twice; its final attempt has every epoch
row (1..epochs when complete, 1..pruned_epoch when pruned) and none after; the sweep's counts
equal a recount of its trials; no process exited on its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from core.spec.sweep import load_spec
from scheduler.submit import submit_sweep
from tests.integration.chaos_checks import (
    TERMINAL,
    Check,
    Report,
    check_sweeps,
    chunked,
    count_drift,
    world_size,
)
from tests.integration.stack import Process, Scheduler, Stack
from tests.services import Proxy, RabbitNode

KINDS = ("child", "rank", "worker", "scheduler", "two_schedulers", "broker", "store")


@dataclass(frozen=True)
class SweepPlan:
    """A sweep to submit: its label (what kind of trials it trains), its spec, the workers
    its first window is cut for, and when it is submitted: `at` a share of the schedule
    (0: before the first disruption, 0.5: after half of them)."""

    label: str
    spec: str
    workers: int | None = None
    at: float = 0.0


@dataclass(frozen=True)
class Disruption:
    """One disruption of the schedule: its kind, how long it lasts (an outage, a second
    scheduler, the wait before a killed process starts again), and the quiet after it."""

    kind: str
    hold: float
    gap: float


def _spec(name: str, body: str) -> str:
    return (
        f"name: chaos-{name}-{uuid.uuid4().hex[:6]}\n"
        "objective: {metric: val_accuracy, direction: max}\n" + body
    )


def plan(scale: int = 1, at: float = 0.0, later: dict[str, float] | None = None) -> list[SweepPlan]:
    """One wave of sweeps, about 48 trials per `scale`, submitted at `at` (a share of the
    schedule, `SweepPlan`), those `later` names (by label) at their own share: cheap trials
    end within seconds of their submission, and the data-parallel ones are what a rank's
    kill needs running."""
    later = later or {}
    seeds = ", ".join(str(s) for s in range(2 * scale))
    return [
        SweepPlan(
            "fused+asha",
            _spec(
                "fused",
                "dataset: {name: digits}\n"
                "model: {hidden_layers: 1, hidden_units: [16, 32]}\n"
                "training: {optimizer: sgd, epochs: 7, batch_size: 16,"
                f" lr: [0.003, 0.01, 0.03, 0.1], seed: [{seeds}]}}\n"
                "execution: {device: cpu, fuse: 8}\n"
                "search: {algorithm: grid, parallelism: 16}\n"  # room for groups of 8
                "pruning: {algorithm: asha, min_resource: 2, reduction_factor: 3}\n",
            ),
            at=later.get("fused+asha", at),
        ),
        SweepPlan(
            "plain+asha+checkpoints",
            _spec(
                "plain",
                "dataset: {name: digits}\n"
                "model: {hidden_layers: 2, hidden_units: 64}\n"
                "training: {optimizer: sgd, epochs: 9, batch_size: 16,"
                f" lr: [0.001, 0.01, 0.05], seed: [{seeds}]}}\n"
                "execution: {device: cpu, fuse: off}\n"
                "search: {algorithm: grid, parallelism: 6}\n"
                "pruning: {algorithm: asha, min_resource: 2, reduction_factor: 3}\n"
                "artifacts: {keep: top_k, top_k: 2, checkpoint_every: 2}\n",
            ),
            at=later.get("plain+asha+checkpoints", at),
        ),
        SweepPlan(
            "data-parallel",
            _spec(
                "parallel",
                "dataset: {name: digits}\n"
                "model: {hidden_layers: 2, hidden_units: 64}\n"
                "training: {optimizer: sgd, lr: 0.05, epochs: 12, batch_size: 32,"
                f" seed: [{', '.join(str(s) for s in range(max(2, scale)))}]}}\n"
                "execution: {device: cpu, fuse: off, parallel: {world_size: 2,"
                " strategy: allreduce}}\n"
                "artifacts: {keep: none, checkpoint_every: 4}\n",
            ),
            at=later.get("data-parallel", at),
        ),
        SweepPlan(
            "chunks",
            _spec(
                "chunks",
                "dataset: {name: iris}\n"
                "model: {hidden_layers: [1, 2], hidden_units: 8,"
                " activation: [relu, tanh, sigmoid]}\n"
                "training: {optimizer: [sgd, adam], epochs: 12, batch_size: [16, 64],"
                f" lr: 0.01, seed: [{', '.join(str(s) for s in range(scale))}]}}\n"
                "execution: {device: cpu}\n",
            ),
            workers=2,
            at=later.get("chunks", at),
        ),
    ]


def schedule(
    seed: int, count: int, hold: tuple[float, float], gap: tuple[float, float]
) -> list[Disruption]:
    """`count` disruptions, each kind of `KINDS` at least once, the rest drawn; holds and
    gaps drawn from their ranges. The same seed gives the same schedule."""
    rng = random.Random(seed)
    kinds = list(KINDS) + [rng.choice(KINDS) for _ in range(max(0, count - len(KINDS)))]
    rng.shuffle(kinds)
    return [
        Disruption(kind, round(rng.uniform(*hold), 1), round(rng.uniform(*gap), 1))
        for kind in kinds[:count]
    ]


def _children(pid: int) -> list[int]:
    """Every process under `pid`, depth first (Linux's /proc)."""
    out: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out += [int(entry), *_children(int(entry))]
    return out


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


class Worker(Process):
    """`sweepstack worker --workers 1 --name NAME` (a Celery worker of one pool child)."""

    def __init__(self, env: dict[str, str], log_path: Path, name: str) -> None:
        self.name = name
        argv = [sys.executable, "-m", "cli.main", "worker", "--workers", "1", "--name", name]
        super().__init__(argv, env, log_path, " ready.", f"worker {name}")

    def descendants(self) -> list[int]:
        return _children(self.proc.pid)

    def pool_children(self) -> list[int]:
        """The Celery pool's processes: children of the Celery main process, which is the
        child of the `sweepstack worker` command."""
        return [
            pid for main in _children(self.proc.pid)
            if _parent(main) == self.proc.pid for pid in _children(main) if _parent(pid) == main
        ]  # fmt: skip


class Chaos:
    """A run of the harness (module docstring): `start`, `run`, then `close` (or use it as a
    context manager). `mongo_url` is the SecantusDB the run's database goes on; everything
    it starts logs under `tmp`. `stale_after` is ``SWEEPSTACK_STALE_AFTER_SECONDS`` (a rank
    killed leaves its attempt silent until then)."""

    def __init__(
        self,
        mongo_url: str,
        tmp: Path,
        *,
        seed: int,
        sweeps: list[SweepPlan],
        disruptions: list[Disruption],
        stale_after: float = 8.0,
        say: Callable[[str], None] = lambda _line: None,
    ) -> None:
        self.mongo_url, self.tmp, self.seed = mongo_url, tmp, seed
        self.plans, self.disruptions = sweeps, disruptions
        self.stale_after = stale_after
        self.say = say
        self.rng = random.Random(seed)
        self.report = Report(seed)
        self.node: RabbitNode | None = None
        self.proxy: Proxy | None = None
        self.stack: Stack | None = None
        self.workers: list[Worker] = []
        self.scheduler: Scheduler | None = None
        self.second: Scheduler | None = None
        self.sweeps: dict[str, tuple[str, int]] = {}  # sweep id -> (label, trials)
        self._starts: Counter[str] = Counter()
        self._kills: Counter[str] = Counter()  # what the kills of children hit, by label
        self.crashes: list[str] = []
        self.suspects: set[str] = set()  # trials a check found wrong: dumped by `close`
        self._t0 = time.monotonic()

    # -- the services ----------------------------------------------------------------------

    def start(self) -> None:
        self.node = RabbitNode(self.tmp / "rabbitmq")
        where = urlparse(self.mongo_url)
        self.proxy = Proxy((where.hostname or "127.0.0.1", where.port or 27017))
        db_name = f"sweepstack_chaos_{uuid.uuid4().hex[:10]}"
        self.stack = Stack(self.node.url, self.mongo_url, db_name, self.tmp)
        # The platform's processes reach the store through the proxy; the harness (submit,
        # checks) directly, so that an outage it makes never fails its own reads.
        self.stack.env.update(
            {
                "SWEEPSTACK_MONGO_URL": f"mongodb://127.0.0.1:{self.proxy.port}/?retryWrites=false",
                "SWEEPSTACK_STALE_AFTER_SECONDS": str(self.stale_after),
                "SWEEPSTACK_HEARTBEAT_SECONDS": "1",
                # No trial is meant to fail: a poison verdict here would hide a lost attempt.
                "SWEEPSTACK_MAX_ATTEMPTS": "20",
                "SWEEPSTACK_LOG_LEVEL": "INFO",
            }
        )
        self.workers = [self._worker(f"chaos-{i}") for i in (1, 2)]
        self.scheduler = self._scheduler()
        self._t0 = time.monotonic()

    def _log(self, what: str) -> Path:
        self._starts[what] += 1
        return self.tmp / f"{what}-{self._starts[what]}.log"

    def _worker(self, name: str) -> Worker:
        assert self.stack is not None
        worker = Worker(self.stack.env, self._log(name), name)
        self.stack.workers.append(worker)  # stopped by `Stack.close`
        return worker

    def _scheduler(self, what: str = "scheduler") -> Scheduler:
        assert self.stack is not None
        return Scheduler(self.stack.env, self._log(what), lease=3)

    def close(self) -> None:
        for sched in (self.second, self.scheduler):
            if sched is not None:
                sched.stop()
        if self.stack is not None:
            for worker in self.stack.workers:
                worker.stop()
            if self.suspects:
                self._dump(self.tmp / "suspects.json")
            self.stack.store.client.drop_database(self.stack.store.db.name)
            self.stack.store.close()
        if self.proxy is not None:
            self.proxy.close()
        if self.node is not None:
            self.node.close()

    def _dump(self, path: Path) -> None:
        """The trials a check found wrong, with their metric rows (no metrics), as JSON."""
        assert self.stack is not None
        db = self.stack.store.db
        out = []
        for trial_id in sorted(self.suspects):
            doc = db["trials"].find_one({"_id": trial_id}, {"config": 0, "params": 0}) or {}
            doc["rows"] = [
                (r["attempt"], r["epoch"], str(r.get("reported_at")))
                for r in db["metrics"].find({"trial_id": trial_id}, {"metrics": 0})
            ]
            out.append(doc)
        path.write_text(json.dumps(out, indent=1, default=str))

    def __enter__(self) -> Chaos:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- the run ---------------------------------------------------------------------------

    def _event(self, text: str) -> None:
        line = f"{time.monotonic() - self._t0:6.1f} s  {text}"
        self.report.events.append(line)
        self.say(line)

    def _submit(self, sweep: SweepPlan) -> None:
        assert self.stack is not None
        sweep_id, count = submit_sweep(
            load_spec(sweep.spec), self.stack.store, self.stack.app, workers=sweep.workers
        )
        self.sweeps[sweep_id] = (sweep.label, count)
        self._event(f"submitted {sweep.label}: sweep {sweep_id}, {count} trials")

    def run(self, timeout: float) -> Report:
        """Submit the sweeps, run the schedule, wait (at most `timeout` seconds after the
        last disruption) for every sweep to end, and check; the report."""
        n = len(self.disruptions)
        when: dict[int, list[SweepPlan]] = {}
        for sweep in self.plans:
            when.setdefault(min(n, round(sweep.at * n)), []).append(sweep)
        for sweep in when.pop(0, []):
            self._submit(sweep)
        self._wait_running(60)
        for i, disruption in enumerate(self.disruptions, 1):
            self._watch()
            self._disrupt(i, disruption)
            for sweep in when.pop(i, []):
                self._submit(sweep)
            self._sleep(disruption.gap)
        ended = self._wait_ended(timeout)
        self.check(ended)
        return self.report

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self._watch()
            time.sleep(min(0.5, left))

    def _watch(self) -> None:
        """Note and restart a process that exited on its own (a crash is a finding)."""
        for i, worker in enumerate(self.workers):
            if worker.proc.poll() is not None:
                self._crashed(f"worker {worker.name}", worker)
                self.workers[i] = self._worker(worker.name)
        if self.scheduler is not None and self.scheduler.proc.poll() is not None:
            self._crashed("scheduler", self.scheduler)
            self.scheduler = self._scheduler()

    def _crashed(self, what: str, process: Process) -> None:
        tail = process.log_path.read_text()[-3000:]
        self.crashes.append(f"{what} exited with {process.proc.returncode}: ...{tail}")
        self._event(f"!! {what} exited on its own with {process.proc.returncode} (restarted)")
        process.stop()

    def _running(self) -> list[dict[str, Any]]:
        assert self.stack is not None
        return list(
            self.stack.store.db["trials"].find(
                {"state": "running"}, {"sweep_id": 1, "worker": 1, "config.execution": 1}
            )
        )

    def _unfinished(self) -> set[str]:
        """The sweeps of this run with a trial not ended yet (or not created yet)."""
        assert self.stack is not None
        live = self.stack.store.db["trials"].find(
            {"sweep_id": {"$in": list(self.sweeps)}, "state": {"$in": ["queued", "running"]}},
            {"sweep_id": 1},
        )
        return {d["sweep_id"] for d in live} | {
            sid for sid in self.sweeps if self._sweep(sid).get("planned")
        }

    def _wait_running(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self._running():
            time.sleep(0.2)

    def _ours(self, pid: int) -> bool:
        """Whether `pid` is a process under one of this run's workers (never another's)."""
        return any(pid in worker.descendants() for worker in self.workers)

    def _disrupt(self, i: int, d: Disruption) -> None:
        head = f"#{i} {d.kind}:"
        if d.kind in ("child", "rank"):
            self._kill_training(head, rank=d.kind == "rank", hold=d.hold)
        elif d.kind == "worker":
            worker = self.rng.choice(self.workers)
            worker.kill_all()
            self._event(f"{head} kill -9 of worker {worker.name} (its process group); "
                        f"restarted after {d.hold} s")  # fmt: skip
            time.sleep(d.hold)
            self.workers[self.workers.index(worker)] = self._worker(worker.name)
        elif d.kind == "scheduler":
            assert self.scheduler is not None
            self.scheduler.kill_all()
            self._event(f"{head} kill -9 of the scheduler; restarted after {d.hold} s")
            time.sleep(d.hold)
            self.scheduler = self._scheduler()
        elif d.kind == "two_schedulers":
            self.second = self._scheduler("second-scheduler")
            how = self.rng.choice(("stopped", "killed"))
            self._event(f"{head} a second scheduler beside the first for {d.hold} s, then {how}")
            self._sleep(d.hold)
            if how == "killed":
                self.second.kill_all()
            self.second.stop()
            self.second = None
        elif d.kind == "broker":
            assert self.node is not None
            self.node.stop_app()
            self._event(f"{head} broker stopped for {d.hold} s (rabbitmqctl stop_app)")
            time.sleep(d.hold)
            self.node.start_app()
        elif d.kind == "store":
            assert self.proxy is not None
            self.proxy.cut()
            self._event(f"{head} store cut off for {d.hold} s")
            time.sleep(d.hold)
            self.proxy.restore()
        else:
            raise ValueError(f"unknown disruption kind {d.kind!r}; one of {', '.join(KINDS)}")

    def _kill_training(self, head: str, *, rank: bool, hold: float) -> None:
        """kill -9 the training process of a running trial, or a rank of a data-parallel
        one; a trial of a sweep whose trials no kill has hit yet first (waiting up to
        `hold` + 5 s for one to run, 30 s for a data-parallel one); with none running, a
        pool child."""
        labels = {sid: label for sid, (label, _) in self.sweeps.items()}
        # A rank's kill waits longer for a data-parallel trial to run (after a broker
        # restart the workers take some seconds to consume again).
        parallel = rank and any(labels[sid] == "data-parallel" for sid in self._unfinished())
        deadline = time.monotonic() + hold + (30 if parallel else 5)
        while True:
            running = [d for d in self._running() if self._ours(int(d["worker"]["pid"]))]
            wide = [d for d in running if world_size(d) > 1]
            unhit = {sid for sid in self._unfinished() if not self._kills[labels[sid]]}
            if time.monotonic() > deadline:
                running = (wide if rank else []) or running
                break
            if parallel:
                if wide:
                    running = wide
                    break
            elif any(d["sweep_id"] in unhit for d in running) or (running and not unhit):
                break
            time.sleep(0.2)
        if not running:
            children = [p for w in self.workers for p in w.pool_children()]
            if not children:
                self._event(f"{head} nothing to kill: no worker has a pool child")
                return
            pid = self.rng.choice(children)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            self._event(f"{head} kill -9 of pool child {pid} (no trial running)")
            return
        self.rng.shuffle(running)
        doc = min(running, key=lambda d: self._kills[labels.get(d["sweep_id"], "?")])
        label = labels.get(doc["sweep_id"], "?")
        holder = int(doc["worker"]["pid"])
        target, what = holder, f"training process {holder}"
        if rank and world_size(doc) > 1:
            ranks = [p for p in _children(holder) if b"parallel.rank" in _cmdline(p)]
            if ranks:
                target = self.rng.choice(ranks)
                what = f"rank process {target} (of holder {holder})"
        self._kills[label] += 1
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, signal.SIGKILL)
        self._event(f"{head} kill -9 of the {what} of trial {doc['_id']} ({label})")

    # -- the end ---------------------------------------------------------------------------

    def _trials(self, sweep_id: str) -> list[dict[str, Any]]:
        assert self.stack is not None
        return list(self.stack.store.db["trials"].find({"sweep_id": sweep_id}))

    def _wait_ended(self, timeout: float) -> bool:
        """Until every sweep has all its trials, each ended (`timeout` at most)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._watch()
            if all(
                len(docs := self._trials(sid)) == total
                and all(d["state"] in TERMINAL for d in docs)
                for sid, (_, total) in self.sweeps.items()
            ):
                self._event("every trial of every sweep ended")
                self._settle_counts(30)
                return True
            time.sleep(1)
        self._event(f"!! timed out: sweeps still unfinished {timeout:.0f} s after the schedule")
        return False

    def _settle_counts(self, timeout: float) -> None:
        """Wait (a little) for the counts to agree with the trials: a finish's counter write
        comes a moment after its trial's."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(not count_drift(self._sweep(sid), self._trials(sid)) for sid in self.sweeps):
                return
            time.sleep(1)

    def _sweep(self, sweep_id: str) -> dict[str, Any]:
        assert self.stack is not None
        doc = self.stack.store.db["sweeps"].find_one({"_id": sweep_id})
        assert doc is not None, sweep_id
        return doc

    def check(self, ended: bool) -> list[Check]:
        """The checks of the module docstring (`tests.integration.chaos_checks`), added to
        the report with what the run did."""
        assert self.stack is not None
        db = self.stack.store.db
        every, checks, suspects = check_sweeps(db, self.sweeps, ended, time.monotonic() - self._t0)
        checks.append(Check(
            "no process exited on its own", not self.crashes,
            f"{len(self.crashes)} exits" + ("".join(f"\n{c}" for c in self.crashes)),
        ))  # fmt: skip
        self.suspects |= suspects
        self.report.checks += checks
        retried = [d for d in every if int(d.get("attempt") or 0) > 1]
        kinds = Counter(d.kind for d in self.disruptions)
        self.report.notes += [
            f"disruptions: {len(self.disruptions)} "
            f"({', '.join(f'{k} {kinds[k]}' for k in KINDS if kinds[k])})",
            f"kills of training processes, by sweep: {dict(self._kills)}",
            f"trials with lost attempts: {len(retried)} "
            f"(resumed from a checkpoint: {sum(bool(d.get('resumed')) for d in retried)}); "
            f"fused members: {sum(int(d.get('fused') or 1) > 1 for d in every)}, "
            f"chunked: {sum(chunked(d) for d in every)}, "
            f"data-parallel: {sum(world_size(d) > 1 for d in every)}",
            f"logs: {self.tmp}",
        ]
        return checks
