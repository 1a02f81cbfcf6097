"""docker-compose.yml, checked without a Docker engine: healthchecks, no default credentials,
Mongo auth, ports on 127.0.0.1, GPUs reserved; Debian's docker-compose parses and renders it;
the deployment docs name what the files hold."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from core.settings import Settings
from tests.deploy import (
    APP_SERVICES,
    COMPOSE,
    DOCKERFILES,
    ENV_EXAMPLE,
    EXPOSE,
    LOCAL_BIND,
    PUBLISHED,
    ROOT,
    SECRET_NAME,
    VAR,
    code,
    dockerfile_of,
    env_of,
    has_healthcheck,
    load,
    strings,
    tool,
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
            assert has_healthcheck(services[target]), f"{name}: {target} has no healthcheck"
        assert has_healthcheck(service) or depends, f"{name}: no healthcheck and no dependency"


def test_no_guest_credentials_anywhere() -> None:
    for path in [COMPOSE, EXPOSE, ENV_EXAMPLE, *DOCKERFILES]:
        text = path.read_text()
        assert not re.search(r"guest", text, re.IGNORECASE), f"{path.name} mentions guest"


def test_credentials_have_no_defaults() -> None:
    """Each credential is ${VAR:?message}: compose refuses to start until .env sets it."""
    for path in (COMPOSE, EXPOSE):
        for match in VAR.finditer(code(path)):
            if SECRET_NAME.search(match["name"]):
                assert match["op"] == ":?", (
                    f"{path.name}: ${{{match['name']}}} must be ${{{match['name']}:?...}}, "
                    f"got {match.group(0)!r}"
                )
    for text in strings(load(COMPOSE)):
        for url in re.findall(r"[a-z]+://[^\s\"']+@", text):
            userinfo = url.split("://", 1)[1][:-1]
            assert re.fullmatch(r"\$\{[^}]+\}:\$\{[^}]+\}", userinfo), (
                f"credentials in {url!r} must come from variables"
            )


def test_env_example_leaves_compose_passwords_blank() -> None:
    values = dict(
        line.split("=", 1)
        for line in ENV_EXAMPLE.read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    for name in (
        "RABBITMQ_PASSWORD",
        "MONGO_ROOT_PASSWORD",
        "MONGO_APP_PASSWORD",
        "FLOWER_PASSWORD",
    ):
        assert values.get(name) == "", f"configs/.env.example must leave {name}= blank"


def test_every_compose_variable_is_documented() -> None:
    documented = set(re.findall(r"^([A-Z_][A-Z0-9_]*)=", ENV_EXAMPLE.read_text(), re.MULTILINE))
    for path in (COMPOSE, EXPOSE):
        used = {m["name"] for m in VAR.finditer(code(path))}
        assert used <= documented, f"{path.name}: not in .env.example: {used - documented}"


def test_rabbitmq_has_its_own_user_vhost_and_long_ack_timeout(
    services: dict[str, dict[str, Any]],
) -> None:
    rabbit = services["rabbitmq"]
    assert re.fullmatch(r"rabbitmq:[\w.]+-management", rabbit["image"])
    env = env_of(rabbit)
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
    env = env_of(mongo)
    assert ":?" in env["MONGO_INITDB_ROOT_USERNAME"] and ":?" in env["MONGO_INITDB_ROOT_PASSWORD"]
    assert "--auth" in mongo["command"]
    assert any(v.endswith(":/data/db") for v in mongo["volumes"]), "data on a volume"
    for name in APP_SERVICES:
        url = env_of(services[name])["SWEEPSTACK_MONGO_URL"]
        assert re.match(r"mongodb://\$\{[^}]+\}:\$\{[^}]+\}@", url), f"{name}: {url}"
        assert "authSource=admin" in url, f"{name}: {url}"


def test_app_services_get_every_setting(services: dict[str, dict[str, Any]]) -> None:
    wanted = {f"SWEEPSTACK_{f.upper()}" for f in Settings.__dataclass_fields__} - {
        "SWEEPSTACK_DATA_DIR",  # embedded mode only
        "SWEEPSTACK_BIND_HOST",  # set by the sweepstack launchers; compose binds 0.0.0.0
    }
    for name in APP_SERVICES:
        missing = wanted - set(env_of(services[name]))
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
    for name, service in load(EXPOSE)["services"].items():
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
        dockerfile = dockerfile_of(service)
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
    binary = tool("docker-compose", "Debian package docker-compose, by scripts/services.sh")
    clean = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    return subprocess.run(
        [binary, "--env-file", str(env_file), "-f", str(COMPOSE), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
        env=clean,
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


# --- the documentation ----------------------------------------------------------------------


def test_deployment_docs_match_the_files(compose: dict[str, Any]) -> None:
    docs = "\n".join(
        p.read_text() for p in (ROOT / "docs" / "deployment.md", ROOT / "README.md") if p.exists()
    )
    for volume in compose["volumes"].values():
        assert volume["name"] in docs, f"docs do not name volume {volume['name']}"
    for needle in (
        "--profile gpu",
        "--scale worker=",
        "docker/expose-backends.yml",
        "mongodump",
        "BROKER_HOST",
        "MONGO_HOST",
        "ssh -N -L",
        "--no-deps",
    ):
        assert needle in docs, f"docs do not mention {needle}"
    for name in compose["services"]:
        assert f"`{name}`" in docs, f"docs do not describe the {name} service"
