"""The Kubernetes worker Deployment and its KEDA ScaledObject (deploy/), checked without a
cluster, as docker-compose.yml is: both parse, the ScaledObject scales that Deployment on the
queue the workers read, counting the trials being trained, and every grace period outlasts
the workers' shutdown grace (`workers.shutdown`), in Kubernetes and in compose."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from core.settings import Settings
from tests.deploy import COMPOSE, ROOT, code, env_of, load

WORKER = ROOT / "deploy" / "k8s" / "worker.yaml"
SCALER = ROOT / "deploy" / "keda" / "scaledobject.yaml"
DEFAULT = re.compile(r"^\$\{[A-Z_]+:-(?P<value>[^}]*)\}$")


def _documents(path: Path) -> dict[str, dict[str, Any]]:
    docs = [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
    for doc in docs:
        assert {"apiVersion", "kind", "metadata"} <= doc.keys(), f"{path.name}: {doc}"
    kinds = [doc["kind"] for doc in docs]
    assert len(kinds) == len(set(kinds)), f"{path.name}: {kinds}"
    return {doc["kind"]: doc for doc in docs}


def _deployment() -> dict[str, Any]:
    return _documents(WORKER)["Deployment"]


def _container() -> dict[str, Any]:
    (container,) = _deployment()["spec"]["template"]["spec"]["containers"]
    return container


def _env() -> dict[str, str]:
    return {item["name"]: item["value"] for item in _container().get("env", [])}


def _compose_default(value: str) -> str:
    match = DEFAULT.match(value)
    return match["value"] if match else value


def _seconds(duration: str) -> float:
    match = re.fullmatch(r"(\d+)(s|m)", duration)
    assert match, f"a compose duration like 45s, got {duration!r}"
    return int(match[1]) * (60 if match[2] == "m" else 1)


def test_the_scaled_object_scales_the_worker_deployment_on_the_trials_queue() -> None:
    scaler = _documents(SCALER)
    scaled = scaler["ScaledObject"]
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    deployment = _deployment()
    assert deployment["apiVersion"] == "apps/v1"
    assert scaled["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert scaled["spec"]["scaleTargetRef"].get("kind", "Deployment") == "Deployment"
    (trigger,) = scaled["spec"]["triggers"]
    meta = trigger["metadata"]
    assert trigger["type"] == "rabbitmq" and meta["mode"] == "QueueLength"
    # The queue the workers read: the Deployment's, the settings' default and compose's.
    queue = Settings().queue
    assert meta["queueName"] == _env()["SWEEPSTACK_QUEUE"] == queue
    assert _compose_default(env_of(load(COMPOSE)["services"]["worker"])["SWEEPSTACK_QUEUE"]) == (
        queue
    )
    # Over the management API the length counts unacknowledged messages: the trials being
    # trained (late acks), so a training worker is never scaled away for an empty queue.
    assert meta["protocol"] == "http" and meta.get("excludeUnacknowledged", "false") == "false"
    assert float(meta["value"]) >= 1
    assert 0 <= scaled["spec"]["minReplicaCount"] < scaled["spec"]["maxReplicaCount"]
    # The broker's address and password come from a Secret, never the file.
    assert "host" not in meta and "hostFromEnv" not in meta
    auth = scaler["TriggerAuthentication"]
    assert trigger["authenticationRef"]["name"] == auth["metadata"]["name"]
    assert [ref["parameter"] for ref in auth["spec"]["secretTargetRef"]] == ["host"]
    for path in (WORKER, SCALER):
        assert not re.search(r"://[^\s/@]*:[^\s/@]*@", code(path).replace("USER:PASSWORD", "")), (
            f"{path.name} holds a credential"
        )


def test_the_deployment_outlasts_the_workers_shutdown_grace() -> None:
    spec = _deployment()["spec"]["template"]["spec"]
    grace = float(_env()["SWEEPSTACK_SHUTDOWN_GRACE_SECONDS"])
    assert Settings.from_env({"SWEEPSTACK_SHUTDOWN_GRACE_SECONDS": str(grace)})
    assert spec["terminationGracePeriodSeconds"] > grace + 5, (
        "terminationGracePeriodSeconds must leave the worker its shutdown grace, and more"
    )


def test_the_deployment_runs_the_compose_files_worker() -> None:
    worker = load(COMPOSE)["services"]["worker"]
    container = _container()
    image = worker["image"].replace("${IMAGE_PREFIX:-sweepstack}", "sweepstack")
    assert container["image"] == image.replace("${IMAGE_TAG:-0.1.0}", "0.1.0")
    assert container["command"][:2] == worker["command"][:2] == ["sweepstack", "worker"]
    assert _env()["SWEEPSTACK_DATASETS_DIR"] == "/data"
    assert [m["mountPath"] for m in container["volumeMounts"]] == ["/data"]
    security = _deployment()["spec"]["template"]["spec"]["securityContext"]
    assert security["runAsNonRoot"] and security["runAsUser"] == 10001
    assert [ref["secretRef"]["name"] for ref in container["envFrom"]] == ["sweepstack"]


def test_compose_stops_workers_after_their_shutdown_grace() -> None:
    services = load(COMPOSE)["services"]
    for name in ("worker", "worker-gpu"):
        grace = float(_compose_default(env_of(services[name])["SWEEPSTACK_SHUTDOWN_GRACE_SECONDS"]))
        assert grace == Settings().shutdown_grace_seconds
        assert _seconds(services[name]["stop_grace_period"]) > grace + 5, name


def test_the_deployment_docs_show_the_recipe() -> None:
    text = (ROOT / "docs" / "deployment.md").read_text()
    for needed in (
        "kubectl apply -f deploy/k8s/worker.yaml",
        "kubectl apply -f deploy/keda/scaledobject.yaml",
        "SWEEPSTACK_SHUTDOWN_GRACE_SECONDS",
        "terminationGracePeriodSeconds",
        "stop_grace_period",
    ):
        assert needed in text, needed
