"""The `sweepstack` command line.

Exit codes: 0 success; 2 a spec or usage problem (one line per problem on stderr, each
naming its path and rule); 1 anything else.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import sys
from pathlib import Path
from typing import TextIO

import click
from rich.console import Console
from rich.table import Table

from core.errors import Problem, SpecError, SweepstackError
from core.settings import Settings
from core.spec.limits import dataset_file_problems, spec_limit_problems
from core.spec.sweep import SweepSpec, load_spec_file
from core.spec.values import short_text
from scheduler.expand import TrialPoint, expand

EXIT_PROBLEM = 2


def _fail_spec(exc: SpecError) -> None:
    for problem in exc.problems:
        click.echo(f"error: {problem}", err=True)
    sys.exit(EXIT_PROBLEM)


def _load(spec_path: str, *, local_files: bool = False) -> SweepSpec:
    """The spec, valid and within this deployment's limits (`core.spec.limits`, the API's too);
    with `local_files`, every ``dataset.path`` must also name a file on this host."""
    try:
        settings = Settings.from_env()
    except SweepstackError as exc:
        raise click.UsageError(str(exc)) from exc
    try:
        spec = load_spec_file(spec_path)
        problems = spec_limit_problems(spec, settings)
        if local_files:
            problems += dataset_file_problems(spec, settings)
        if problems:
            raise SpecError(problems)
        return spec
    except SpecError as exc:
        _fail_spec(exc)
        raise  # unreachable; keeps type checkers content


def _expand(spec: SweepSpec, with_config: bool = False) -> list[TrialPoint]:
    try:
        return expand(spec, with_config=with_config)
    except SpecError as exc:
        _fail_spec(exc)
        raise


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
            json.dumps(t.params[c]) if isinstance(t.params.get(c), list) else t.params.get(c, "")
            for c in columns
        ]
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


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="sweepstack")
def main() -> None:
    """Sweepstack: run sweeps of neural-network configurations on RabbitMQ, Celery,
    PyTorch and MongoDB.

    Start with `sweepstack validate SPEC`, look at the trials with
    `sweepstack generate SPEC`, run them here with `sweepstack run SPEC`; then
    `sweepstack ls`, `status`, `export` and `open` reach the results it kept.
    """


@main.command()
@click.argument("spec", type=click.Path(dir_okay=False))
def validate(spec: str) -> None:
    """Check a sweep spec: exit 0 if it is valid, or 2 with one line per problem.

    A ``dataset.path`` must name a file in this host's datasets folder, as for `run`.
    """
    loaded = _load(spec, local_files=True)
    count = loaded.search.trials or 0 if loaded.search.adaptive else len(_expand(loaded))
    dims = len(loaded.dimensions)
    click.echo(
        f"ok: {loaded.name}: {count:,} trials over {dims} "
        f"dimension{'s' if dims != 1 else ''} ({loaded.search.algorithm} search)"
    )


@main.command()
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
    loaded = _load(spec)
    if loaded.search.adaptive:
        if count_only:
            click.echo(f"{loaded.search.trials}")
            return
        _fail_spec(
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


def _register() -> None:
    from cli import commands
    from cli import results as cli_results
    from cli.api_server import api
    from cli.dashboard_server import dashboard
    from cli.open_dashboard import open_command
    from cli.report import report
    from cli.run import run as run_command

    for command in (commands.submit, cli_results.status, commands.worker, commands.scheduler,
                    run_command, api, dashboard, cli_results.ls, cli_results.export,
                    open_command, report):
        main.add_command(command)


_register()


def run() -> None:
    """Console entry point that turns unexpected Sweepstack errors into exit code 1."""
    try:
        main(standalone_mode=True)
    except SweepstackError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    run()
