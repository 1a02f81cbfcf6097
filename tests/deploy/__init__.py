"""The container images and docker-compose.yml, checked without a Docker engine.

No engine runs here, so what a real `docker compose up` relies on is checked statically:
Debian's docker-compose parses and interpolates the files, hadolint lints the Dockerfiles,
and the tests hold what the deployment promises. Shared here: paths and file readers.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
EXPOSE = ROOT / "docker" / "expose-backends.yml"
ENV_EXAMPLE = ROOT / "configs" / ".env.example"
DOCKERFILES = sorted((ROOT / "docker").glob("Dockerfile.*"))
HEALTHCHECK = ROOT / "docker" / "healthcheck.py"

PUBLISHED = {"api", "flower", "dashboard"}
APP_SERVICES = {"api", "dashboard", "scheduler", "worker", "worker-gpu"}
SECRET_NAME = re.compile(r"(PASS|PASSWORD|TOKEN|SECRET|USER)", re.IGNORECASE)
VAR = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<op>:?[-?+])?(?P<arg>[^}]*)\}")
LOCAL_BIND = ("${BIND_ADDRESS:-127.0.0.1}:", "127.0.0.1:")


def load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def code(path: Path) -> str:
    """A YAML file's text without its comment lines."""
    return "\n".join(
        line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")
    )


def strings(node: Any) -> Iterator[str]:
    """Every string value (and mapping key) in a parsed YAML tree."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield str(key)
            yield from strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from strings(item)


def env_of(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def dockerfile_of(service: dict[str, Any]) -> Path | None:
    build = service.get("build")
    if build is None:
        return None
    if isinstance(build, str):
        return ROOT / build / "Dockerfile"
    return ROOT / build.get("context", ".") / build.get("dockerfile", "Dockerfile")


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line.startswith("#") or not (line or pending):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        keyword, _, args = full.partition(" ")
        out.append((keyword.upper(), args.strip()))
    return out


def has_healthcheck(service: dict[str, Any]) -> bool:
    check = service.get("healthcheck")
    if check is not None:
        return not check.get("disable", False) and check.get("test") not in (["NONE"], "NONE")
    dockerfile = dockerfile_of(service)
    return dockerfile is not None and any(
        kw == "HEALTHCHECK" and not args.upper().startswith("NONE")
        for kw, args in instructions(dockerfile)
    )


def tool(name: str, source: str) -> str:
    """The tool's path; a missing one fails the test (no skip): `make test` installs it."""
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail(f"{name} is not installed: `make test` installs it ({source})", pytrace=False)
    return found
