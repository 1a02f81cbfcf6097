"""The commands of the README and of docs/*.md, run as a user types them after `make demo`.

Every fenced ```bash block of README.md and of each docs/*.md page is either run here, as
written, or marked in the page itself, on the line right before its fence, with
``<!-- readme-test: skip REASON -->`` (optionally ``: why``), REASON one of `SKIP_REASONS`.
A block with neither runs, so a new command block cannot slip past: it passes here or it
says in its page why it cannot.
A block marked ``<!-- readme-test: services -->`` runs too, against the services it names
at their default addresses (RabbitMQ on 5672, MongoDB on 27017: a SecantusDB started there
when nothing listens), with the ``export`` lines of the services blocks above it, as they
would be in the user's terminal. A block marked ``<!-- readme-test: serves -->`` serves
until Ctrl-C: it runs until the first ``http://`` URL it prints answers 200, and is then
stopped with SIGINT, as the user stops it.

The blocks run in reading order, each in its own ``bash -e``: the README's from the top,
then each page of docs/ in the order the README's list of documents (`DOCUMENTS`) names
them, all in one sandbox that stands for
a user's checkout after `make demo`: a copy of the checkout's tracked files with ``.venv``
linked to the project's virtualenv, ``HOME`` a fresh folder (so ``~/.sweepstack`` is new), no
``SWEEPSTACK_*`` variable, and a system ``PATH`` without the virtualenv, so a bare
``sweepstack`` or ``python -m`` line fails here as it fails for the user. What one block
leaves (the data folder, files it wrote) the next one finds, as in a terminal; shell
variables do not carry over, so a block that needs a sweep's id sets it itself.

Their relative links are followed in `tests/test_doc_links.py`.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from core.settings import Settings
from tests.doc_links import links
from tests.readme_blocks import (
    Block,
    check,
    parse,
    runnable,
)
from tests.services import SecantusProcess, reachable

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
#: The README's section that lists the documents of docs/, in the order a reader takes
#: them: the order their blocks run in.
DOCUMENTS = "Documentation"

#: A URL a serving block prints.
URL = re.compile(r"http://127\.0\.0\.1:\d+/\S*")
#: Where the pages' services blocks find them.
MONGO_PORT, RABBITMQ_URL = 27017, "amqp://guest:guest@127.0.0.1:5672//"
EXPORT = re.compile(r"^export [A-Z_][A-Z0-9_]*=.*$", re.MULTILINE)
#: A user's PATH on a Debian machine: the virtualenv is not on it.
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Below pytest-timeout's 300 s, so a hung block fails here, naming itself.
BLOCK_TIMEOUT = 240


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def _section(text: str, heading: str) -> str:
    """The lines under the ``## heading`` of a page, up to the next heading of its level."""
    lines = text.splitlines()
    start = lines.index(f"## {heading}") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith(("# ", "## "))),
               len(lines))  # fmt: skip
    return "\n".join(lines[start:end])


def pages() -> list[Path]:
    """README.md, then the pages of docs/ in the order the README's `DOCUMENTS` section links
    them; a page it does not list comes after those, by name (and fails
    `test_the_readme_lists_every_document`)."""
    listed: list[Path] = []
    for link in links(_section(README.read_text(), DOCUMENTS)):
        path = (ROOT / link.target.partition("#")[0]).resolve()
        if path.parent == DOCS.resolve() and path.suffix == ".md" and path not in listed:
            listed.append(path)
    rest = [p.resolve() for p in sorted(DOCS.glob("*.md")) if p.resolve() not in listed]
    return [README, *listed, *rest]


def _blocks(page: Path) -> list[Block]:
    blocks, problems = parse(page.read_text(), _name(page))
    assert not problems, "\n".join(problems)
    return blocks


@pytest.fixture(scope="module")
def readme() -> list[Block]:
    return _blocks(README)


@pytest.mark.parametrize("page", pages(), ids=_name)
def test_every_bash_block_is_run_or_marked_with_a_known_reason(page: Path) -> None:
    problems = check(_blocks(page))
    assert not problems, "\n".join(problems)


def test_the_readme_has_blocks_that_run(readme: list[Block]) -> None:
    assert runnable(readme), "no block of README.md would run"


def test_the_readme_lists_every_document() -> None:
    """A line per document of docs/ in the README's list, so each is found, and its blocks
    run in the order a reader takes them."""
    listed = {
        (ROOT / link.target.partition("#")[0]).resolve()
        for link in links(_section(README.read_text(), DOCUMENTS))
    }
    missing = [_name(p) for p in sorted(DOCS.glob("*.md")) if p.resolve() not in listed]
    assert not missing, f"README.md's {DOCUMENTS!r} does not link {', '.join(missing)}"


def test_the_checker_catches_what_would_escape_it() -> None:
    """The rules above, on a README that breaks each of them once."""
    text = "\n".join(
        [
            "# A",
            "<!-- readme-test: skip docker -->",
            "```bash",
            "docker compose up -d",
            "```",
            "<!-- readme-test: skip because -->",
            "```bash",
            "make demo",
            "```",
            "```sh",
            ".venv/bin/sweepstack ls",
            "```",
            "```",
            ".venv/bin/sweepstack ls",
            "```",
            "```bash",
            ".venv/bin/sweepstack open ID",
            "```",
            "<!-- readme-test: skip long -->",
            "",
            "```bash",
            "true &&",
            "  true",
            "```",
        ]
    )
    blocks, problems = parse(text)
    assert [b.line for b in blocks] == [3, 7, 10, 13, 16, 21]
    assert blocks[0].skip_reason == "docker" and blocks[0].heading == "A"
    assert problems == [
        "README.md:19: a readme-test marker must be the line right before a ```bash fence"
    ]
    found = check(blocks)
    assert len(found) == 5, found
    assert "marker 'skip because'" in found[0] and "```sh block" in found[1]
    assert "reads as commands" in found[2] and "reads as commands" in found[3]
    assert "keeps running" in found[4]
    assert [b.line for b in runnable(blocks)] == [16, 21]


# --- running them ---------------------------------------------------------------------------


def _venv() -> Path:
    """The project's virtualenv, the one `make demo` made (this test's own interpreter)."""
    prefix = Path(sys.prefix)
    venv = prefix if (prefix / "bin" / "sweepstack").exists() else ROOT / ".venv"
    if not (venv / "bin" / "sweepstack").exists():
        pytest.fail(f"no virtualenv with sweepstack at {venv}; run `make venv`", pytrace=False)
    return venv


def _copy_checkout(to: Path) -> None:
    """The checkout's tracked files, as they are in the working tree."""
    names = (
        subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, names):
        source, target = ROOT / name, to / name
        if not source.exists() and not source.is_symlink():
            continue  # deleted in the working tree, not yet committed
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, target)


@dataclass
class Sandbox:
    """The user's checkout after `make demo`, and what each block run in it did."""

    checkout: Path
    env: dict[str, str]
    #: (page, line): exit status, output, seconds
    ran: dict[tuple[str, int], tuple[int, str, float]] = field(default_factory=dict)

    exports: list[str] = field(default_factory=list)  # of the services blocks run so far

    def run(self, block: Block) -> tuple[int, str, float]:
        """Run `block` with ``bash -e``, once; its exit status, output and seconds. What it
        left running in its process group is killed after it. A services block starts with
        the ``export`` lines of those before it."""
        key = (block.doc, block.line)
        if key in self.ran:
            return self.ran[key]
        script = self.checkout.parent / f"block-{Path(block.doc).stem}-{block.line}.sh"
        script.write_text("".join(f"{line}\n" for line in self.exports) + block.text)
        if block.services:
            self.exports += EXPORT.findall(block.text)
        log = script.with_suffix(".log")
        started = time.monotonic()
        with log.open("w") as out:  # a file, not a pipe: what it left running holds a pipe open
            proc = subprocess.Popen(
                ["bash", "-e", str(script)],
                cwd=self.checkout,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                # As a user's shell starts it: Ctrl-C and Ctrl-\ as their defaults, even when
                # the tests themselves run where they are ignored (a job started with `&`).
                preexec_fn=_default_signals,
            )
            try:
                if block.serves:
                    code, killed = _serve(proc, log)
                else:
                    code, killed = proc.wait(timeout=BLOCK_TIMEOUT), ""
            except subprocess.TimeoutExpired:
                code, killed = -1, f"\n(killed after {BLOCK_TIMEOUT} s)"
            finally:
                with contextlib.suppress(ProcessLookupError):  # nothing of it is left
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        output = log.read_text(errors="replace") + killed
        self.ran[key] = (code, output, time.monotonic() - started)
        return self.ran[key]


def _default_signals() -> None:
    for number in (signal.SIGINT, signal.SIGQUIT):
        signal.signal(number, signal.SIG_DFL)


def _signals(proc: subprocess.Popen[bytes]) -> str:
    """The signal masks of the processes of `proc`'s group, for a failure's message."""
    lines = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
            if os.getpgid(int(status.parent.name)) != proc.pid:
                continue
        except (OSError, ValueError):
            continue
        fields = dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)
        keys = ("Name", "Pid", "State", "SigBlk", "SigIgn", "SigCgt")
        lines.append(" ".join(f"{k}={fields.get(k, '?').strip()}" for k in keys))
    return "".join(f"\n  {line}" for line in lines)


def _serve(proc: subprocess.Popen[bytes], log: Path) -> tuple[int, str]:
    """Wait until the first URL `proc` prints answers 200, then Ctrl-C it: (0, a note) if
    it served and stopped on SIGINT; (-1, why not) otherwise."""
    deadline = time.monotonic() + BLOCK_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return -1, f"\n(exited with {proc.returncode} before serving)"
        found = URL.search(log.read_text(errors="replace"))
        if found is not None:
            try:
                with urllib.request.urlopen(found.group(), timeout=10) as page:
                    served = page.status == 200
            except OSError:
                served = False
            if served:
                os.killpg(proc.pid, signal.SIGINT)
                try:
                    code = proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    why = f"\n(served {found.group()}, but did not stop on Ctrl-C)"
                    return -1, why + _signals(proc)
                note = f"\n(served {found.group()}; stopped by Ctrl-C, exit {code})"
                return (0 if code in (0, 130, -signal.SIGINT) else code), note
        time.sleep(0.2)
    raise subprocess.TimeoutExpired(proc.args, BLOCK_TIMEOUT)


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """RabbitMQ and a MongoDB server at the addresses the pages' services blocks export.

    RabbitMQ must be listening (`make test` starts it); a MongoDB already on 27017 is used
    as the pages' reader would use theirs, else a SecantusDB is started there. The
    default queue the blocks fill is purged before and after, so that no message of theirs
    outlives them.
    """
    from amqp.exceptions import NotFound
    from kombu import Connection

    if not reachable(RABBITMQ_URL):
        pytest.fail(f"RabbitMQ is not listening at {RABBITMQ_URL}; `make test` starts it")
    mongo = None
    if not reachable(f"mongodb://127.0.0.1:{MONGO_PORT}", timeout=0.5):
        data = tmp_path_factory.mktemp("readme-mongo") / "db"
        data.mkdir()
        mongo = SecantusProcess(data, port=MONGO_PORT)

    def purge() -> None:
        with Connection(RABBITMQ_URL) as conn, contextlib.suppress(NotFound):
            conn.default_channel.queue_purge(Settings().queue)  # never declared: nothing in it

    purge()
    yield
    purge()
    if mongo is not None:
        mongo.stop()


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory, services: None) -> Iterator[Sandbox]:
    base = tmp_path_factory.mktemp("readme")
    checkout, home = base / "checkout", base / "home"
    home.mkdir()
    _copy_checkout(checkout)
    (checkout / ".venv").symlink_to(_venv(), target_is_directory=True)
    env = {
        "PATH": SYSTEM_PATH,
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TMPDIR": str(base),
        # What the editable install of `make demo` does for the user's own checkout: the
        # copy's code is what `.venv/bin/sweepstack` imports.
        "PYTHONPATH": str(checkout),
    }
    assert shutil.which("sweepstack", path=SYSTEM_PATH) is None, "sweepstack is on the system PATH"
    imported = subprocess.run(
        [".venv/bin/python", "-c", "import scheduler; print(scheduler.__file__)"],
        cwd=checkout, env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert imported.startswith(str(checkout)), f"the sandbox imports {imported}"
    # `make demo` would otherwise reinstall into the linked virtualenv, editable from this
    # temporary copy, and leave the project's own virtualenv pointing at a deleted folder.
    stale = subprocess.run(["make", "-q", "venv"], cwd=checkout, env=env, capture_output=True)
    if stale.returncode != 0:
        pytest.fail(
            f"the virtualenv {_venv()} is older than the requirements: run `make venv` "
            "(`make test` does) before this test",
            pytrace=False,
        )
    box = Sandbox(checkout, env)
    yield box
    print("\nREADME and docs/ blocks run:")
    for (doc, line), (code, _, seconds) in box.ran.items():  # in the order they ran
        print(f"{seconds:6.1f} s  exit {code}  {doc}:{line}")


def _runnable_now() -> list[Block]:
    """The blocks to run, in reading order (`pages`), read when the tests are collected (a
    page the parser refuses fails `test_every_bash_block_is_run_or_marked_with_a_known_reason`)."""
    blocks: list[Block] = []
    for page in pages():
        blocks += runnable(parse(page.read_text(), _name(page))[0])
    return blocks


def _slug(block: Block) -> str:
    words = re.findall(r"[a-z0-9]+", block.heading.lower())
    return f"{Path(block.doc).stem}-L{block.line}-" + "-".join(words[:5])


@pytest.mark.integration
@pytest.mark.parametrize("block", _runnable_now(), ids=_slug)
def test_the_block_runs_as_written(block: Block, sandbox: Sandbox) -> None:
    """Each block after the ones before it in reading order, as a user reading down the
    pages runs them: a block selected alone (``-k``) first runs those, so it finds what they
    leave."""
    order = _runnable_now()
    earlier = order[: order.index(block)]
    for before in earlier:
        sandbox.run(before)
    failed_before = [b.where for b in earlier if sandbox.ran[(b.doc, b.line)][0] != 0]
    code, output, _ = sandbox.run(block)
    if code != 0:
        tail = "\n".join(output.splitlines()[-30:])
        note = f" (earlier blocks failed too: {', '.join(failed_before)})" if failed_before else ""
        pytest.fail(
            f"{block.where}: exit {code}{note}\n{block.text}--- output (tail):\n{tail}",
            pytrace=False,
        )


@pytest.mark.integration
def test_the_blocks_left_what_they_promise(sandbox: Sandbox) -> None:
    """A check that the runs above did their work, so an empty success cannot pass: the
    data folder of `run`, the CSV `export` writes and the models `model` writes."""
    for block in _runnable_now():
        sandbox.run(block)
    assert (Path(sandbox.env["HOME"]) / ".sweepstack" / "db").is_dir()
    assert (sandbox.checkout / "trials.csv").read_text().startswith("id,")
    for model in ("best.safetensors", "best.onnx", "best.pt"):
        assert (sandbox.checkout / model).stat().st_size > 1000, model
    api_csv = (sandbox.checkout / "results.csv").read_text().splitlines()
    # quickstart: 12 trials, created a window at a time (the sweep's fair share of the
    # workers a scheduler counted, docs/sharing.md): the export right after the submit
    # holds those created so far.
    assert api_csv[0].startswith("id,") and 2 <= len(api_csv) <= 13, api_csv[:3]
    demo = next(b for b in _runnable_now() if b.text.startswith("make demo"))
    assert re.search(r"48/48 .* best val_accuracy", sandbox.ran[(demo.doc, demo.line)][1])
    watched = next(b for b in _runnable_now() if "status $SWEEP_ID --json" in b.text)
    out = sandbox.ran[(watched.doc, watched.line)][1]
    assert '"complete": 12' in out, out[-500:]
