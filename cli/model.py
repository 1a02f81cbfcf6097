"""`sweepstack model`: a trial's kept model, written to a file in the format asked for.

It reads the store as the other reading commands do (`cli.local.open_store`: the store of
``SWEEPSTACK_MONGO_URL``, else the data folder of `sweepstack run`). The model is the
one the sweep's ``artifacts:`` policy kept (`core.store.kept_models`; a trial with none is
an error saying why). Formats:

- ``safetensors`` (the default): the stored file as it is, streamed to disk and checked
  against its SHA-256 on the way (with a progress bar on a terminal, for a big one);
  `sweepstack.load_model` loads it, and so does any safetensors reader (the weights by
  their ``state_dict`` names, the trial's config in the metadata);
- ``torchscript`` and ``onnx``: the module rebuilt and converted (`workers.models_io`,
  imported only for these, since it imports torch); ONNX needs the ``onnx`` extra.

A SWEEP id instead of a trial's takes the sweep's best kept model.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from cli.local import open_store, reached, with_data_dir
from cli.options import data_option
from cli.shared import program, read_settings
from core.errors import NoModel, NotFound
from core.settings import Settings
from core.store.kept_models import best_kept_model, kept_model, open_model
from core.store.store import Store

FORMATS = ("safetensors", "torchscript", "onnx")
#: A file at least this big gets a progress bar while it streams (on a terminal).
PROGRESS_BYTES = 16 << 20


@click.command("model")
@click.argument("trial_id", metavar="TRIAL")
@click.option(
    "--out",
    "-o",
    "out_path",
    required=True,
    type=click.Path(dir_okay=False, writable=True),
    help="The file to write (replaced if it exists).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="safetensors",
    show_default=True,
    help="safetensors: the stored weights and config as they are (sweepstack.load_model "
    "reads them); torchscript: for torch.jit.load; onnx: for ONNX runtimes (needs the "
    "onnx extra: pip install 'sweepstack[onnx]').",
)
@data_option
def model(trial_id: str, out_path: str, fmt: str, data_dir: str | None) -> None:
    """Write the kept model of trial TRIAL (or of the best trial of a SWEEP id) to a file.

    A sweep keeps the models of its best trials (its spec's `artifacts:`, by default the
    10 best); the weights are the trial's last epoch's. A trial with no kept model is an
    error that says why: not complete, or not kept by its sweep's policy.
    """
    settings = with_data_dir(read_settings(), data_dir)
    store = open_store(settings)
    doc = _find(store, trial_id, settings)
    path = Path(out_path)
    if fmt == "safetensors":
        _stream(store, doc, path)
        written = [path]
    else:
        written = _convert(store.artifacts.read(doc), fmt, path)
    size = sum(p.stat().st_size for p in written)
    also = f" (+ {written[1].name})" if len(written) > 1 else ""
    click.echo(f"wrote the model of trial {doc['trial_id']} ({fmt}, {size:,} bytes) to "
               f"{path}{also}", err=True)  # fmt: skip


def _find(store: Store, ident: str, settings: Settings) -> dict[str, Any]:
    """The kept model's document of trial `ident`, or of sweep `ident`'s best trial."""
    try:
        return kept_model(store.reads, store.artifacts, ident,
                          default_keep=settings.artifacts_keep,
                          default_top_k=settings.artifacts_top_k)  # fmt: skip
    except NoModel as exc:
        raise click.ClickException(str(exc)) from exc
    except NotFound:
        pass
    try:
        doc = best_kept_model(store.reads, store.artifacts, ident)
    except NoModel as exc:
        raise click.ClickException(str(exc)) from exc
    except NotFound as exc:
        found = reached()
        where = f" in {found.folder}" if found else ""
        raise click.ClickException(
            f"no trial or sweep {ident}{where}; `{program()} ls` lists the sweeps there, "
            f"`{program()} export SWEEP` their trials"
        ) from exc
    click.echo(f"sweep {ident}: its best kept model is trial {doc['trial_id']} "
               f"({(doc.get('meta') or {}).get('metric', 'objective')} "
               f"{doc.get('objective')})", err=True)  # fmt: skip
    return doc


def _stream(store: Store, doc: dict[str, Any], path: Path) -> None:
    """The stored bytes to `path`, through a file beside it that replaces it only once
    whole and matching the stored SHA-256."""
    try:
        chunks = open_model(store.artifacts, doc)
    except NoModel as exc:
        raise click.ClickException(str(exc)) from exc
    part = path.with_name(f".{path.name}.part")
    digest = hashlib.sha256()
    total = int(doc.get("size") or 0)
    err = Console(stderr=True)
    shown = err.is_terminal and total >= PROGRESS_BYTES
    progress = Progress(
        TextColumn("model"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
        TimeRemainingColumn(), console=err, transient=True, disable=not shown,
    )  # fmt: skip
    try:
        with progress, part.open("wb") as handle:
            task = progress.add_task("model", total=total)
            for chunk in chunks:
                handle.write(chunk)
                digest.update(chunk)
                progress.advance(task, len(chunk))
        if digest.hexdigest() != doc.get("sha256"):
            raise click.ClickException(
                f"trial {doc['trial_id']}'s model read back from the store does not match its "
                "SHA-256 (cut short or corrupt); nothing was written"
            )
        os.replace(part, path)
    finally:
        part.unlink(missing_ok=True)


def _convert(data: bytes, fmt: str, path: Path) -> list[Path]:
    from workers.models_io import CheckpointError, load_model_bytes, to_onnx, to_torchscript

    try:
        module, meta = load_model_bytes(data)
    except CheckpointError as exc:
        raise click.ClickException(f"the stored model cannot be rebuilt: {exc}") from exc
    if fmt == "onnx":
        return to_onnx(module, meta, path)
    part = path.with_name(f".{path.name}.part")
    try:
        part.write_bytes(to_torchscript(module, meta))
        os.replace(part, path)
    finally:
        part.unlink(missing_ok=True)
    return [path]
