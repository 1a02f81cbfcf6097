from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from core.errors import ConfigError
from core.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
ENV_EXAMPLE = ROOT / "configs" / ".env.example"
#: The platform's code: every SWEEPSTACK_ name it reads is a setting a user may put in .env.
PLATFORM = ("core/", "api/", "scheduler/", "workers/", "web/", "dashboard/", "docker/")
#: A whole variable name (a name followed by `_*` or `{...}` is a prefix, not a variable).
VARIABLE = re.compile(r"\bSWEEPSTACK_[A-Z0-9_]*[A-Z0-9]\b")


def test_defaults_without_environment() -> None:
    settings = Settings.from_env({})
    assert settings.broker_url is None and settings.mongo_url is None
    assert settings.mongo_db == "sweepstack"
    assert settings.api_tokens == {}
    assert settings.max_attempts == 3


ALICE, BOB = "0123456789abcdef" * 2, "fedcba9876543210" * 2


def test_values_are_parsed() -> None:
    settings = Settings.from_env(
        {
            "SWEEPSTACK_BROKER_URL": "amqp://u:p@h//",
            "SWEEPSTACK_API_TOKENS": f"alice:{ALICE}, bob:{BOB}",
            "SWEEPSTACK_DATA_DIR": "/tmp/x",
            "SWEEPSTACK_HEARTBEAT_SECONDS": "2.5",
        }
    )
    assert settings.broker_url == "amqp://u:p@h//"
    assert settings.api_tokens == {ALICE: "alice", BOB: "bob"}
    assert settings.data_dir == Path("/tmp/x")
    assert settings.heartbeat_seconds == 2.5


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("SWEEPSTACK_API_TOKENS", "alice", "SWEEPSTACK_API_TOKENS item 0: must be name:token"),
        ("SWEEPSTACK_HEARTBEAT_SECONDS", "soon", "must be a number, got 'soon'"),
        ("SWEEPSTACK_STALE_AFTER_SECONDS", "-1", "must be > 0, got -1"),
        ("SWEEPSTACK_MAX_ATTEMPTS", "0", "SWEEPSTACK_MAX_ATTEMPTS: must be > 0, got 0"),
        ("SWEEPSTACK_MAX_ATTEMPTS", "three", "must be an integer, got 'three'"),
        ("SWEEPSTACK_TASK_EVENTS", "maybe", "SWEEPSTACK_TASK_EVENTS: must be true or false"),
        ("SWEEPSTACK_WRITE_CONCERN", "w=0", "w must be majority, a tag or >= 1, got '0'"),
        ("SWEEPSTACK_WRITE_CONCERN", "journal=yes", "journal must be true or false"),
        ("SWEEPSTACK_WRITE_CONCERN", "fsync=true", "each item must be w=..., journal=..."),
        ("SWEEPSTACK_WRITE_CONCERN", "w=1,w=2", "SWEEPSTACK_WRITE_CONCERN: w is given twice"),
        ("SWEEPSTACK_WRITE_CONCERN", "wtimeoutMS=-5", "wtimeoutMS must be an integer >= 0"),
    ],
)
def test_malformed_values_name_the_variable(name: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Settings.from_env({name: value})


def test_write_concern_majority_and_journal_by_default_as_the_url_spells_it() -> None:
    assert Settings.from_env({}).write_concern == {"w": "majority", "j": True}
    given = Settings.from_env({"SWEEPSTACK_WRITE_CONCERN": "w=2, Journal=false,wtimeoutMS=500"})
    assert given.write_concern == {"w": 2, "j": False, "wtimeout": 500}
    assert given.store_options()["write_concern"] == given.write_concern
    tagged = Settings.from_env({"SWEEPSTACK_WRITE_CONCERN": "w=two-racks"})
    assert tagged.write_concern == {"w": "two-racks"}


def test_task_events_off_by_default_and_on_when_asked() -> None:
    from core.broker import celery_config

    off = Settings.from_env({"SWEEPSTACK_BROKER_URL": "amqp://h//"})
    on = Settings.from_env(
        {"SWEEPSTACK_BROKER_URL": "amqp://h//", "SWEEPSTACK_TASK_EVENTS": "True"}
    )
    assert off.task_events is False and on.task_events is True
    assert celery_config(off)["worker_send_task_events"] is False
    assert celery_config(on)["worker_send_task_events"] is True


def test_env_example_lists_every_setting() -> None:
    text = ENV_EXAMPLE.read_text()
    for field in Settings.__dataclass_fields__:
        assert f"SWEEPSTACK_{field.upper()}=" in text


def _variables_by_file() -> dict[str, set[str]]:
    """The SWEEPSTACK_ names in each tracked file of code (not the docs, not test bodies)."""
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    out: dict[str, set[str]] = {}
    for name in listed:
        path = Path(name)
        code = path.suffix in (".py", ".sh", ".yml", ".js") or path.name.startswith(
            ("Dockerfile", "Makefile")
        )
        if not code or path.name.startswith("test_") or not (ROOT / path).is_file():
            continue
        found = set(VARIABLE.findall((ROOT / path).read_text(errors="replace")))
        if found:
            out[name] = found
    return out


def test_env_example_lists_every_variable_the_code_reads() -> None:
    """Platform variables as settings (`NAME=default`), the tests' and benchmarks' own at
    least commented out (`# NAME=`), so .env.example is the one list of them all."""
    text = ENV_EXAMPLE.read_text()
    settings = set(re.findall(r"^(SWEEPSTACK_[A-Z0-9_]+)=", text, re.MULTILINE))
    commented = set(re.findall(r"^# (SWEEPSTACK_[A-Z0-9_]+)=", text, re.MULTILINE))
    by_file = _variables_by_file()
    platform = {
        n
        for f, names in by_file.items()
        if f.startswith(PLATFORM) or f == "docker-compose.yml"
        for n in names
    }
    everything = set().union(*by_file.values())
    assert {"SWEEPSTACK_HEALTHCHECK_TIMEOUT", "SWEEPSTACK_TORCH_THREADS"} <= platform
    assert sorted(platform - settings) == [], "read by the platform, not set in .env.example"
    assert sorted(everything - settings - commented) == [], "not in .env.example at all"
