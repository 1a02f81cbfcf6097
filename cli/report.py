"""``sweepstack report SWEEP``: what a sweep found, as Markdown, JSON or one HTML file.

The analysis is `core.analysis.sweep_analysis` with Optuna's importance
(`scheduler.importance`), the same value the API's ``/analysis`` and the dashboard's
Analysis panel show. The store comes from `cli.local.open_store`, as for every command
that reads sweeps. A finished sweep's analysis is kept with it, so a second report of it
reads nothing but that.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console

from cli.local import open_store, with_data_dir
from cli.options import data_option
from cli.shared import EXIT_PROBLEM, read_settings
from core.analysis import sweep_analysis
from core.errors import InvalidQuery, NotFound

SUFFIXES = {".md": "md", ".markdown": "md", ".html": "html", ".htm": "html", ".json": "json"}


@click.command()
@click.argument("sweep_id")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["md", "html", "json"]),
    default=None,
    help="md (the default), html (one self-contained file with every figure; opens "
    "offline) or json (what GET /api/v1/sweeps/ID/analysis answers). Without it, the "
    "suffix of -o decides.",
)
@click.option(
    "-o",
    "--output",
    "out_path",
    type=click.Path(dir_okay=False),
    help="Write to this file instead of standard output.",
)
@data_option
def report(sweep_id: str, fmt: str | None, out_path: str | None, data_dir: str | None) -> None:
    """What a sweep found: where the objective plateaus, how cost grows with depth and
    width, which parameters matter (Optuna's fANOVA and PED-ANOVA), and the accuracy-cost
    front. Reads SWEEPSTACK_MONGO_URL's store, or without it the data folder's (--data)."""
    # Imported here: Optuna and Jinja load only for this command, not for every `sweepstack`.
    from cli.report_files import render
    from scheduler.importance import param_importances

    if fmt is None:
        fmt = SUFFIXES.get(Path(out_path).suffix.lower(), "md") if out_path else "md"
    store = open_store(with_data_dir(read_settings(), data_dir))
    console = Console(stderr=True)
    try:
        with console.status(f"analysing sweep {sweep_id}…", spinner="dots"):
            analysis = sweep_analysis(store.reads, sweep_id, importance=param_importances)
    except InvalidQuery as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_PROBLEM)
    except NotFound as exc:
        raise click.ClickException(f"no sweep {sweep_id}") from exc
    finally:
        store.close()
    text = render(analysis, fmt)
    if out_path is None:
        click.echo(text, nl=not text.endswith("\n"))
        return
    try:
        Path(out_path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise click.ClickException(f"cannot write {out_path}: {exc.strerror}") from exc
    done = analysis["sweep"]["analysed"]
    click.echo(f"wrote the {fmt} report of sweep {sweep_id} ({done:,} complete trials) to "
               f"{out_path}", err=True)  # fmt: skip
