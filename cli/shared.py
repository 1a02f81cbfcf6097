"""What every `sweepstack` command shares: the exit codes, the spec as it is read, the
settings, and how the running command names itself in hints.

Exit codes: 0 success; `EXIT_PROBLEM` (2) a spec or usage problem, one line per problem on
stderr, each naming its path and rule; `EXIT_NO_RESULT` (1) a sweep that `run` ran to its end
with no trial complete (the failures' reasons printed above); 1 anything else
(`cli.main.run`). Settings come from
the environment here, at the entry point, and are passed down (DESIGN.md); bad ones are a
usage error.

It imports no other module of `cli`, so that every command module (and `cli.main`, which
assembles them) can import it.
"""

from __future__ import annotations

import logging
import shutil
import sys
from pathlib import Path
from typing import NoReturn

import click

from core.errors import ConfigError, SpecError, SweepstackError
from core.settings import Settings
from core.spec.limits import dataset_file_problems, spec_limit_problems
from core.spec.sweep import SweepSpec, load_spec_file

log = logging.getLogger(__name__)

#: The exit code of a spec or usage problem (click's own usage errors exit 2 as well).
EXIT_PROBLEM = 2
#: The exit code of `sweepstack run` when its sweep ended with no complete trial.
EXIT_NO_RESULT = 1


#: The most problem lines a command prints (the rest are counted in one more line).
MAX_PROBLEM_LINES = 100


def fail_spec(exc: SpecError) -> NoReturn:
    """Print one ``error:`` line per problem of `exc` on stderr (the first
    `MAX_PROBLEM_LINES`, then how many more) and exit `EXIT_PROBLEM`."""
    for problem in exc.problems[:MAX_PROBLEM_LINES]:
        click.echo(f"error: {problem}", err=True)
    if len(exc.problems) > MAX_PROBLEM_LINES:
        click.echo(f"error: … and {len(exc.problems) - MAX_PROBLEM_LINES:,} more problems",
                   err=True)  # fmt: skip
    sys.exit(EXIT_PROBLEM)


def read_settings() -> Settings:
    """This deployment's settings, from the environment; bad ones are a usage error."""
    try:
        return Settings.from_env()
    except SweepstackError as exc:
        raise click.UsageError(str(exc)) from exc


def check_trial_queue(settings: Settings) -> None:
    """Declare the trials queue as the settings say (`core.broker.check_queue`): a queue of
    another type on the broker is a usage error naming SWEEPSTACK_QUEUE_TYPE. A broker that
    does not answer is left to the caller, which waits for it."""
    from kombu.exceptions import OperationalError

    from core.broker import check_queue

    try:
        check_queue(settings)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    except (OSError, OperationalError) as exc:
        log.warning("cannot check the trials queue on the broker yet: %s", exc)


def need(value: str | None, variable: str) -> str:
    """`value`, the setting of `variable`; a usage error naming the variable if it is unset."""
    if not value:
        raise click.UsageError(
            f"{variable} is not set; point it at your "
            f"{'RabbitMQ' if 'BROKER' in variable else 'MongoDB'}"
        )
    return value


def load_spec(spec_path: str, *, local_files: bool = False) -> SweepSpec:
    """The spec of `spec_path`, valid and within this deployment's limits (`core.spec.limits`,
    the API's too), or its problems and exit `EXIT_PROBLEM`; with `local_files`, every
    ``dataset.path`` must also name a file on this host."""
    limits = read_settings()
    try:
        try:
            spec, problems = load_spec_file(spec_path), []
        except SpecError as exc:
            # A spec whose own rules failed but that could be built still meets the checks
            # below, so that one run lists every problem.
            if not isinstance(exc.spec, SweepSpec):
                raise
            spec, problems = exc.spec, list(exc.problems)
        problems += spec_limit_problems(spec, limits)
        if local_files:
            problems += dataset_file_problems(spec, limits)
        if problems:
            raise SpecError(list(dict.fromkeys(problems)))
        return spec
    except SpecError as exc:
        fail_spec(exc)


def program() -> str:
    """How the user can type the `sweepstack` command that is running now: ``sweepstack``
    if that name on PATH is this program (or it was started as a module), else the path it
    was started by (``.venv/bin/sweepstack`` after `make demo`)."""
    argv0 = sys.argv[0] if sys.argv else ""
    if Path(argv0).name != "sweepstack":
        return "sweepstack"
    found = shutil.which("sweepstack")
    if found and Path(found).resolve() == Path(argv0).resolve():
        return "sweepstack"
    return argv0


#: Whether the command that ran asked its process to end without the interpreter's
#: teardown (`skip_teardown`); read by the console entry point, `cli.main.run`.
_SKIP_TEARDOWN = [False]


def skip_teardown() -> None:
    """Let the process end, once this command has succeeded, without the interpreter's
    teardown: its exit handlers joined the threads of pymongo's closed clients (up to
    0.5 s, a tenth of a small `sweepstack run`) and collected every object the imported
    libraries made. For a command that has closed what it opened and written its output;
    only the console entry point acts on it (a command run in-process, by click's test
    runner, returns as usual)."""
    _SKIP_TEARDOWN[0] = True


def teardown_skipped() -> bool:
    """Whether the command asked for `skip_teardown`."""
    return _SKIP_TEARDOWN[0]
