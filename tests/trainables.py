"""Training functions for the tests, and the package metadata that installs them.

They are real entry points of the ``sweepstack.trainables`` group, found the way a user's
are: `install` writes a ``sweepstack_test_trainables-0.0.1.dist-info`` (METADATA and
entry_points.txt, as pip would) into a folder, and a process that has that folder on its
path (``PYTHONPATH`` of a worker, `sys.path` of the test) sees them. The code stays here
(``tests.trainables``, importable wherever the repository root is on the path); nothing is
installed into the environment.
"""

from __future__ import annotations

import itertools
import tempfile
import time
from pathlib import Path
from typing import Any

DIST = "sweepstack_test_trainables"
VERSION = "0.0.1"
#: Entry-point name -> function of this module.
FUNCTIONS = {
    "test_raises": "raises",
    "test_ignores_stop": "ignores_stop",
    "test_slow": "slow",
    "test_out_of_memory": "out_of_memory",
    "test_final_only": "final_only",
    "test_resumable": "resumable",
}


def install(folder: Path) -> Path:
    """Write the distribution's metadata into `folder` (made if missing); return `folder`."""
    info = folder / f"{DIST}-{VERSION}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {DIST}\nVersion: {VERSION}\n", encoding="utf-8"
    )
    lines = [f"{name} = tests.trainables:{function}" for name, function in FUNCTIONS.items()]
    (info / "entry_points.txt").write_text(
        "[sweepstack.trainables]\n" + "\n".join(lines) + "\n", encoding="utf-8"
    )
    return folder


def raises(params: dict[str, Any], ctx: Any) -> None:
    """Reports one epoch, then fails with the message its params give."""
    ctx.report(1, val_loss=1.0)
    raise ValueError(params.get("message", "the test trainable failed"))


def ignores_stop(params: dict[str, Any], ctx: Any) -> None:
    """Reports forever and never asks `should_stop`: only the time limit ends it."""
    for epoch in itertools.count(1):
        ctx.report(epoch, val_loss=1.0 / epoch)
        time.sleep(float(params.get("sleep", 0.1)))


def slow(params: dict[str, Any], ctx: Any) -> None:
    """`ctx.epochs` epochs of `params.sleep` seconds each, asking `should_stop` after each."""
    for epoch in range(1, ctx.epochs + 1):
        time.sleep(float(params.get("sleep", 0.2)))
        ctx.report(epoch, val_loss=1.0 / epoch, val_accuracy=1.0 - 1.0 / (epoch + 1))
        if ctx.should_stop():
            return


def resumable(params: dict[str, Any], ctx: Any) -> None:
    """`slow`, with its running total in a checkpoint after every epoch: a later attempt goes
    on from it, and the last row's ``total`` is 1 + 2 + ... + epochs only if it did."""
    state = ctx.load_checkpoint() or {"epoch": 0, "total": 0.0}
    total = float(state["total"])
    for epoch in range(int(state["epoch"]) + 1, ctx.epochs + 1):
        time.sleep(float(params.get("sleep", 0.2)))
        total += epoch
        ctx.report(epoch, val_loss=1.0 / epoch, total=total)
        ctx.save_checkpoint({"epoch": epoch, "total": total})
        if ctx.should_stop():
            return
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "notes.txt"
        path.write_text(f"total {total}\n", encoding="utf-8")
        ctx.save_artifact("notes.txt", path)


def out_of_memory(params: dict[str, Any], ctx: Any) -> None:
    """Runs out of memory on the host, as a too-large allocation would."""
    raise MemoryError()


def final_only(params: dict[str, Any], ctx: Any) -> dict[str, float]:
    """Reports nothing per epoch and returns its metrics at the end (a one-shot fit)."""
    return {"score": float(params.get("x", 1)) * 2, "seed_seen": float(ctx.seed)}
