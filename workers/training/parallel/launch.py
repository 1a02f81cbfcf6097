"""Start a data-parallel trial's ranks on this host and follow them to one outcome.

A trial whose ranks spread over hosts (`execution.parallel.hosts`) starts the first share
here (`train_parallel` with `Hosts`), and a worker on each other host runs its share
(`run_share`); `workers.gang` gathers them through the queue.

The worker that claimed the trial calls `train_parallel` in place of the one-process loop:
it starts `world_size` processes of `rank.py` (gloo on the CPU; one GPU each with NCCL),
relays rank 0's epochs to `on_epoch`, and returns rank 0's result. Whatever happens, no
rank outlives the call: the first rank to fail ends the others (a rank killed by a signal
from outside, `AttemptLost`: the attempt is lost and the trial retaken; a rank's own error,
`TrainingError`: the trial fails), a `should_stop` (the
sweep was cancelled, the trial pruned, the claim was lost) ends them all, a time limit
raised in the worker ends them all, and every rank dies with the worker process (Linux
parent-death signal). `should_stop` is asked after every epoch relayed (and between
polls): epochs the ranks trained past it are not taken, so a stop asked at epoch k ends
the trial's record at epoch k however far ahead the ranks ran.
"""

from __future__ import annotations

import json
import logging
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from core.errors import AttemptLost, RanksNotGathered, TrainingError
from core.procs import die_with_parent, free_port
from core.spec.config import TrialConfig
from workers.training.checkpoints import pack, read_model_file, unpack
from workers.training.epochs import Checkpointing
from workers.training.models import build_mlp
from workers.training.result import TrainResult, best_values

log = logging.getLogger(__name__)

POLL_SECONDS = 0.2
# After the first failure, how long the other ranks get to fail on their own (a peer's
# death shows in their collectives at once) before they are killed.
SETTLE_SECONDS = 1.0


@dataclass
class _Rank:
    index: int
    proc: subprocess.Popen
    fd: int
    buffer: bytes = b""
    closed: bool = False
    killed_by_us: bool = False


@dataclass
class _Follow:
    """What the ranks have said so far."""

    ready: dict[str, Any] = field(default_factory=dict)
    metrics: list[dict[str, float]] = field(default_factory=list)
    result: dict[str, Any] | None = None
    errors: list[tuple[int, str]] = field(default_factory=list)
    stop: Callable[[], bool] | None = None
    stopped: bool = False
    saving: _Saving | None = None


def _gpu_ids(world_size: int) -> list[str]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = (
        [v.strip() for v in visible.split(",") if v.strip()]
        if visible is not None
        else [str(i) for i in range(torch.cuda.device_count())]
    )
    if len(ids) < world_size:
        raise TrainingError(
            f"execution.parallel.world_size {world_size} needs one GPU per rank, but this "
            f"worker sees {len(ids)}"
        )
    return ids[:world_size]


def _on_cuda(config: TrialConfig) -> bool:
    device = config.execution.device
    return device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with status {code}"


@dataclass(frozen=True)
class Hosts:
    """How a trial whose ranks spread over hosts (`execution.parallel.hosts`) reaches them:
    the address the other hosts reach this one at (where rank 0 opens the rendezvous), its
    network interface (gloo's), and `gather(master, shares, resume_epoch)`, which asks a
    worker for each other host's share of the ranks (`workers.gang`)."""

    address: str
    interface: str | None
    gather: Callable[[str, list[list[int]], int | None], None]


def rank_shares(world_size: int, hosts: int) -> list[list[int]]:
    """Each host's ranks, the first host's first: ``world_size / hosts`` consecutive ones."""
    each = world_size // hosts
    return [list(range(h * each, (h + 1) * each)) for h in range(hosts)]


#: What a rank's error says when a peer rank went away (its host lost, its process killed):
#: gloo's closed or reset connections, and a collective that timed out waiting for it.
PEER_LOST = re.compile(
    r"connection (closed|reset) by peer|broken pipe|connection refused|timed out|timeout",
    re.IGNORECASE,
)


def _start(
    config_path: Path,
    indices: list[int],
    master: str,
    extra: list[str],
    data_dir: Path | None,
    gpus: list[str] | None,
    interface: str,
) -> list[_Rank]:
    """Start the ranks `indices` of a trial, each reporting on a pipe of its own."""
    # The worker's share of the cores, split among its ranks.
    threads = max(1, torch.get_num_threads() // len(indices))
    ranks: list[_Rank] = []
    try:
        for local, index in enumerate(indices):
            read_fd, write_fd = os.pipe()
            env = dict(os.environ)
            env.setdefault("GLOO_SOCKET_IFNAME", interface)
            env.setdefault("TP_SOCKET_IFNAME", interface)
            env["OMP_NUM_THREADS"] = str(threads)
            if gpus is not None:
                env["CUDA_VISIBLE_DEVICES"] = gpus[local]
            argv = [
                sys.executable, "-m", "workers.training.parallel.rank",
                "--config", str(config_path), "--rank", str(index), "--master", master,
                "--report-fd", str(write_fd), "--threads", str(threads),
            ]  # fmt: skip
            if data_dir is not None:
                argv += ["--data-dir", str(data_dir)]
            argv += extra
            proc = subprocess.Popen(
                argv,
                env=env,
                pass_fds=(write_fd,),
                stdin=subprocess.DEVNULL,
                preexec_fn=die_with_parent(signal.SIGKILL),
            )
            os.close(write_fd)
            ranks.append(_Rank(index, proc, read_fd))
    except BaseException:
        _end(ranks)
        raise
    return ranks


def train_parallel(
    config: TrialConfig,
    *,
    on_epoch: Callable[[int, dict[str, float]], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    data_dir: Path | None = None,
    checkpoints: Checkpointing | None = None,
    hosts: Hosts | None = None,
) -> TrainResult:
    """Train `config` on `execution.parallel.world_size` processes; rank 0's result.

    They are all on this host, unless `execution.parallel.hosts` spreads them: this host
    then runs the first share, and `hosts` gathers the others (`Hosts`, `workers.gang`).
    With `checkpoints`, every rank goes on from the trial's last checkpoint (rank 0's state,
    handed to each), and rank 0's checkpoints and trained model are stored as it reports
    them (`rank.RankCheckpoints`). Raises `TrainingError` naming the rank and the cause when
    any rank fails; `AttemptLost` when a rank was killed or a host's ranks went away;
    `RanksNotGathered` when another host's share did not join in time.
    """
    parallel = config.execution.parallel
    spread = parallel.hosts > 1
    if spread and hosts is None:
        raise TrainingError(
            f"execution.parallel.hosts {parallel.hosts} needs a worker that gathers the other "
            "hosts' ranks through the queue (sweepstack worker); train it with hosts: 1 here"
        )
    shares = rank_shares(parallel.world_size, parallel.hosts)
    local = shares[0]
    gpus = _gpu_ids(len(local)) if _on_cuda(config) else None
    folder = Path(tempfile.mkdtemp(prefix="sweepstack-ranks-"))
    config_path = folder / "trial.json"
    config_path.write_text(config.model_dump_json())
    extra: list[str] = []
    resumed: list[dict[str, float]] = []
    resume_epoch: int | None = None
    if checkpoints is not None:
        extra = ["--checkpoint-dir", str(folder),
                 "--checkpoint-policy", checkpoints.policy.model_dump_json()]  # fmt: skip
        found = checkpoints.resumed()
        if found is not None:
            state, meta = found
            (folder / "resume").write_bytes(pack(state, meta))
            extra += ["--resume", str(folder / "resume")]
            resumed = list(meta["metrics"])
            resume_epoch = int(meta["epoch"])
            checkpoints.resuming(meta)
    address, interface = "127.0.0.1", "lo"
    if hosts is not None and spread:
        address, interface = hosts.address, hosts.interface or ""
        extra += ["--join-timeout", str(parallel.gather_timeout)]
    master = f"{address}:{free_port(address)}"
    ranks: list[_Rank] = []
    started = time.perf_counter()
    try:
        if hosts is not None and spread:
            hosts.gather(master, shares[1:], resume_epoch)
        ranks = _start(config_path, local, master, extra, data_dir, gpus, interface)
        log.info("trial started %d of %d ranks (%s, master %s)", len(local),
                 parallel.world_size, parallel.strategy, master)  # fmt: skip
        follow = _follow(ranks, on_epoch, should_stop, _Saving(config, checkpoints), resumed,
                         spread=spread)  # fmt: skip
    finally:
        _end(ranks)
        shutil.rmtree(folder, ignore_errors=True)
    if follow.result is None or follow.stopped:  # stopped: what rank 0 had said so far
        return _partial(config, follow, time.perf_counter() - started)
    fields = follow.result
    fields["stopped_early"] = False
    return TrainResult(**fields)


class _Saving:
    """What the launcher does with rank 0's ``checkpoint`` and ``model`` events: store them
    through the trial's checkpoints (`workers.checkpointing`)."""

    def __init__(self, config: TrialConfig, checkpoints: Checkpointing | None) -> None:
        self.config, self.checkpoints = config, checkpoints

    def handle(self, event: dict[str, Any]) -> None:
        if self.checkpoints is None:
            return
        path = Path(event["path"])
        data = path.read_bytes()
        path.unlink(missing_ok=True)
        if event["event"] == "checkpoint":
            state, meta = unpack(data)
            self.checkpoints.save(int(event["epoch"]), state, meta)
            return
        weights, meta = read_model_file(data)
        dtype = getattr(torch, str(meta.get("dtype", "float32")))
        model = build_mlp(self.config.model, int(meta["n_in"]), int(meta["n_out"]), dtype=dtype)
        model.load_state_dict(weights)
        self.checkpoints.trained(model, meta)


def run_share(
    config: TrialConfig,
    indices: list[int],
    master: str,
    *,
    interface: str | None,
    data_dir: Path | None = None,
    resume: bytes | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> None:
    """Run ranks `indices` of a trial whose rank 0 runs on another host (at `master`), for
    the worker that holds the trial (`workers.gang`), until they end. `resume`: the
    checkpoint that rank 0 goes on from. Raises as `train_parallel` does when they fail."""
    gpus = _gpu_ids(len(indices)) if _on_cuda(config) else None
    folder = Path(tempfile.mkdtemp(prefix="sweepstack-ranks-"))
    config_path = folder / "trial.json"
    config_path.write_text(config.model_dump_json())
    extra = ["--join-timeout", str(config.execution.parallel.gather_timeout)]
    if resume is not None:
        (folder / "resume").write_bytes(resume)
        extra += ["--resume", str(folder / "resume"), "--checkpoint-dir", str(folder),
                  "--checkpoint-policy", '{"keep": "none"}']  # fmt: skip
    ranks: list[_Rank] = []
    try:
        ranks = _start(config_path, indices, master, extra, data_dir, gpus, interface or "")
        log.info("started ranks %s of a trial whose rank 0 is at %s", indices, master)
        _follow(ranks, None, should_stop, None, None, spread=True)
    finally:
        _end(ranks)
        shutil.rmtree(folder, ignore_errors=True)


def _follow(
    ranks: list[_Rank],
    on_epoch: Callable[[int, dict[str, float]], None] | None,
    should_stop: Callable[[], bool] | None,
    saving: _Saving | None = None,
    resumed: list[dict[str, float]] | None = None,
    *,
    spread: bool = False,
) -> _Follow:
    """Read the ranks' events until they end, or a stop is asked, or one fails. With ranks
    on several hosts (`spread`), a failure before rank 0 said ``ready`` (every rank joined;
    a rank 0 elsewhere says nothing here: until its ranks exit) is `RanksNotGathered`, and
    one that reads as a peer gone (`PEER_LOST`) is `AttemptLost`."""
    follow = _Follow(stop=should_stop, saving=saving, metrics=list(resumed or []))
    leads = any(r.index == 0 for r in ranks)
    while True:
        _read(ranks, follow, on_epoch, POLL_SECONDS)
        if follow.stopped:
            log.info("stop asked; ending the ranks")
            return follow
        failed = follow.errors or any(r.proc.poll() not in (None, 0) for r in ranks)
        if failed:
            deadline = time.monotonic() + SETTLE_SECONDS
            while time.monotonic() < deadline and any(r.proc.poll() is None for r in ranks):
                _read(ranks, follow, on_epoch, 0.05)
            reason = _failure(ranks, follow)
            if spread and leads and not follow.ready:
                raise RanksNotGathered(f"not every host's ranks joined: {reason}")
            if _signalled(ranks):  # killed from outside: the attempt is lost, not the trial
                raise AttemptLost(reason)
            if spread and PEER_LOST.search(reason):
                raise AttemptLost(f"a rank on another host went away: {reason}")
            raise TrainingError(reason)
        if all(r.proc.poll() == 0 for r in ranks):
            _read(ranks, follow, on_epoch, 0)  # whatever is left in the pipes
            if follow.stopped or not leads:
                return follow
            if follow.result is None:
                raise TrainingError("rank 0 exited without reporting a result")
            return follow
        if should_stop is not None and should_stop():
            log.info("stop asked; ending the ranks")
            follow.stopped = True
            return follow


def _read(
    ranks: list[_Rank],
    follow: _Follow,
    on_epoch: Callable[[int, dict[str, float]], None] | None,
    timeout: float,
) -> None:
    open_ranks = {r.fd: r for r in ranks if not r.closed}
    if not open_ranks:
        time.sleep(timeout)
        return
    readable, _, _ = select.select(list(open_ranks), [], [], timeout)
    for fd in readable:
        rank = open_ranks[fd]
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            rank.closed = True
            continue
        rank.buffer += chunk
        *lines, rank.buffer = rank.buffer.split(b"\n")
        for line in lines:
            if line.strip() and not follow.stopped:
                _handle(rank.index, json.loads(line), follow, on_epoch)


def _handle(
    index: int,
    event: dict[str, Any],
    follow: _Follow,
    on_epoch: Callable[[int, dict[str, float]], None] | None,
) -> None:
    kind = event.get("event")
    if kind == "error":
        follow.errors.append((index, str(event.get("reason", "unknown error"))))
    elif kind == "ready":
        follow.ready = event
    elif kind == "epoch":
        follow.metrics.append(event["row"])
        if on_epoch is not None:
            on_epoch(int(event["epoch"]), event["row"])
        if follow.stop is not None and follow.stop():
            follow.stopped = True  # what the ranks said after this is not taken
    elif kind in ("checkpoint", "model") and follow.saving is not None:
        follow.saving.handle(event)
    elif kind == "result":
        follow.result = event["result"]


def _signalled(ranks: list[_Rank]) -> bool:
    """Whether a rank died of a signal that this launcher did not send."""
    return any(
        (code := r.proc.poll()) is not None and code < 0 and not r.killed_by_us for r in ranks
    )


def _failure(ranks: list[_Rank], follow: _Follow) -> str:
    """The cause a reader needs: a rank that died on its own first, else the first error."""
    for rank in ranks:
        code = rank.proc.poll()
        if code is not None and code < 0 and not rank.killed_by_us:
            return f"rank {rank.index} of {len(ranks)} {_describe_exit(code)}"
    if follow.errors:
        index, reason = follow.errors[0]
        return reason if reason.startswith("rank ") else f"rank {index}: {reason}"
    for rank in ranks:
        code = rank.proc.poll()
        if code not in (None, 0):
            return f"rank {rank.index} of {len(ranks)} {_describe_exit(code)}"
    return "a rank failed"


def _end(ranks: list[_Rank]) -> None:
    for rank in ranks:
        if rank.proc.poll() is None:
            rank.killed_by_us = True
            rank.proc.kill()
    for rank in ranks:
        try:
            rank.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            log.warning("rank %d (pid %d) did not exit", rank.index, rank.proc.pid)
        os.close(rank.fd)


def _partial(config: TrialConfig, follow: _Follow, seconds: float) -> TrainResult:
    """The result of a trial stopped before rank 0 finished: its epochs so far."""
    metrics = follow.metrics
    return TrainResult(
        metrics=metrics,
        final=metrics[-1] if metrics else {},
        best=best_values(metrics),
        param_count=int(follow.ready.get("param_count", 0)),
        train_seconds=seconds,
        setup_seconds=float(follow.ready.get("setup_seconds", 0.0)),
        seed=int(follow.ready.get("seed", config.training.seed or 0)),
        device={"world_size": config.execution.parallel.world_size},
        dataset={},
        dataset_fingerprint=str(follow.ready.get("dataset_fingerprint", "")),
        stopped_early=len(metrics) < config.training.epochs,
    )
