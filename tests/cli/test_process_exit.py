"""How `sweepstack run` ends its processes once its sweep is over: its workers and
dashboard killed without a grace (`cli.embedded.Processes.stop(at_once=...)`), and its own
process ended without the interpreter's teardown when the command asked for it
(`cli.shared.skip_teardown`, acted on by the console entry point `cli.main.run` only)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from cli.embedded import Processes

ROOT = Path(__file__).resolve().parents[2]

# A child that exits 0 on SIGTERM (as a warm shut-down would) and sleeps meanwhile.
TERM_EXITS_CLEANLY = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
    "print('up', flush=True)\n"
    "time.sleep(60)\n"
)


def _start(procs: Processes, name: str) -> subprocess.Popen:
    proc = procs.start(name, [sys.executable, "-c", TERM_EXITS_CLEANLY], dict(os.environ))
    log = procs.logs / f"{name}.log"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        if b"up" in log.read_bytes():  # its handler is installed once it printed
            return proc
        time.sleep(0.01)
    raise AssertionError(f"{name} did not start: {log.read_text(errors='replace')}")


def test_stop_kills_the_children_named_at_once_and_terms_the_others(tmp_path: Path) -> None:
    procs = Processes(tmp_path)
    graceful = _start(procs, "store")
    at_once = _start(procs, "worker")
    procs.stop(at_once=("worker",))
    assert graceful.returncode == 0  # SIGTERM: its handler ran and it exited cleanly
    assert at_once.returncode == -signal.SIGKILL  # no SIGTERM first: killed outright
    assert procs.children == []


def test_stop_without_at_once_gives_every_child_its_sigterm(tmp_path: Path) -> None:
    procs = Processes(tmp_path)
    children = [_start(procs, "worker"), _start(procs, "dashboard")]
    procs.stop()
    assert [c.returncode for c in children] == [0, 0]


def _console(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    """Run a `quick` command through the console entry point, with an exit handler that
    says whether the interpreter's teardown ran."""
    script = tmp_path / "entry.py"
    script.write_text(
        textwrap.dedent(
            """
            import atexit, sys
            import click
            from cli import main, shared
            atexit.register(lambda: print("teardown ran", flush=True))

            @click.command("quick")
            def quick():
                click.echo("the output")
            {body}
            main.COMMANDS["quick"] = "__main__:quick"
            sys.argv = ["sweepstack", "quick"]
            main.run()
            """
        ).format(body=body)  # `body`: the command's last lines, indented in it
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60
    )


def test_a_command_that_skips_the_teardown_ends_at_once_with_its_output(tmp_path: Path) -> None:
    out = _console(tmp_path, "    shared.skip_teardown()")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "the output\n"  # flushed; the exit handler never ran


def test_the_teardown_runs_for_a_command_that_did_not_ask(tmp_path: Path) -> None:
    out = _console(tmp_path, "    pass")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "the output\nteardown ran\n"


def test_a_failing_command_keeps_its_exit_code_and_its_teardown(tmp_path: Path) -> None:
    out = _console(tmp_path, "    shared.skip_teardown()\n    raise click.ClickException('no')")
    assert out.returncode == 1
    assert "Error: no" in out.stderr
    assert out.stdout == "the output\nteardown ran\n"
