"""``sweepstack validate`` and ``sweepstack generate``: the commands that read a spec and
need no server, and the forms `generate` prints the trials in (`write_jsonl`,
`write_csv`, `write_table`).
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path
from typing import TextIO

import click
from rich.console import Console
from rich.table import Table

from cli.shared import fail_spec, load_spec
from core.errors import Problem, SpecError
from core.spec.sweep import SweepSpec
from core.spec.values import csv_safe, short_text
from scheduler.expand import TrialPoint, expand


def _expand(spec: SweepSpec, with_config: bool = False) -> list[TrialPoint]:
    try:
        return expand(spec, with_config=with_config)
    except SpecError as exc:
        fail_spec(exc)


def _param_columns(trials: list[TrialPoint]) -> list[str]:
    columns: dict[str, None] = {}
    for trial in trials:
        for key in trial.params:
            columns.setdefault(key, None)
    return list(columns)


def write_jsonl(trials: list[TrialPoint], out: TextIO) -> None:
    """One JSON object per line: id, index, seed and params (and the full config, if the
    trials were expanded with it)."""
    for t in trials:
        row = {"id": t.id, "index": t.index, "seed": t.seed, "params": t.params}
        if t.config:
            row["config"] = t.config
        out.write(json.dumps(row))
        out.write("\n")


def write_csv(trials: list[TrialPoint], out: TextIO) -> None:
    """A header of id, index, seed and every param path; empty cells where a param is off."""
    columns = _param_columns(trials)
    writer = csv.writer(out)
    writer.writerow(["id", "index", "seed", *columns])
    for t in trials:
        cells = [
            json.dumps(t.params[c]) if isinstance(t.params.get(c), list)
            else csv_safe(t.params.get(c, ""))
            for c in columns
        ]  # fmt: skip
        writer.writerow([t.id, t.index, t.seed, *cells])


def write_table(trials: list[TrialPoint], out: TextIO, limit: int, title: str) -> None:
    """A readable table of the first `limit` trials."""
    columns = _param_columns(trials)
    table = Table(title=title, header_style="bold")
    table.add_column("#", justify="right")
    table.add_column("id", no_wrap=True)
    for column in columns:
        table.add_column(column.split(".", 1)[1], justify="right")
    table.add_column("seed", justify="right")
    for t in trials[:limit]:
        table.add_row(
            str(t.index), t.id, *(short_text(t.params.get(c, "-")) for c in columns), str(t.seed)
        )
    console = Console(file=out, width=max(100, shutil.get_terminal_size((160, 24)).columns))
    console.print(table)
    if len(trials) > limit:
        console.print(f"… {len(trials) - limit} more; use --limit, or --format csv|jsonl")


@click.command()
@click.argument("spec", type=click.Path(dir_okay=False))
def validate(spec: str) -> None:
    """Check a sweep spec: exit 0 if it is valid, or 2 with one line per problem.

    A ``dataset.path`` must name a file in this host's datasets folder, as for `run`.
    """
    loaded = load_spec(spec, local_files=True)
    count = loaded.search.trials or 0 if loaded.search.adaptive else len(_expand(loaded))
    dims = len(loaded.dimensions)
    click.echo(
        f"ok: {loaded.name}: {count:,} trials over {dims} "
        f"dimension{'s' if dims != 1 else ''} ({loaded.search.algorithm} search)"
    )


@click.command()
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--count", "count_only", is_flag=True, help="Print only the number of trials.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "jsonl", "csv"]),
    default="table",
    show_default=True,
    help="Output format.",
)
@click.option(
    "--out",
    "out_path",
    type=click.Path(dir_okay=False, writable=True),
    help="Write to this file instead of standard output.",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=50,
    show_default=True,
    help="Rows shown by --format table.",
)
@click.option(
    "--with-config",
    is_flag=True,
    help="jsonl: add each trial's full resolved config (what a worker trains).",
)
def generate(
    spec: str, count_only: bool, fmt: str, out_path: str | None, limit: int, with_config: bool
) -> None:
    """Print the trials a spec expands to, with their stable ids and params.

    An adaptive search (tpe, cmaes, gp, qmc) asks its points as results come back: its
    trials cannot be listed in advance, so only --count answers (its `search.trials`), and
    the other forms exit 2 saying so.
    """
    loaded = load_spec(spec)
    if loaded.search.adaptive:
        if count_only:
            click.echo(f"{loaded.search.trials}")
            return
        fail_spec(
            SpecError(
                [
                    Problem(
                        "search.algorithm",
                        f"{loaded.search.algorithm} asks its points as results come back, so "
                        "its trials cannot be listed in advance; --count gives their number",
                    )
                ]
            )
        )
    trials = _expand(loaded, with_config=with_config and fmt == "jsonl" and not count_only)
    buffer = io.StringIO()
    if count_only:
        buffer.write(f"{len(trials)}\n")
    elif fmt == "jsonl":
        write_jsonl(trials, buffer)
    elif fmt == "csv":
        write_csv(trials, buffer)
    else:
        write_table(trials, buffer, limit, f"{loaded.name}: {len(trials):,} trials")
    if out_path:
        Path(out_path).write_text(buffer.getvalue(), encoding="utf-8")
        click.echo(f"wrote {len(trials):,} trials to {out_path}", err=True)
    else:
        click.echo(buffer.getvalue(), nl=False)
