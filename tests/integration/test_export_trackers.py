"""`sweepstack export --format mlflow | tensorboard` of a sweep that `sweepstack run` finished,
read back with the trackers' own readers: MLflow's client against a real `mlflow server`
process started here (SQLite store, artifacts in a folder of the test's), and TensorBoard's
event accumulator, event multiplexer and HParams plugin backend (what its HParams tab
lists). Both must show the trials, parameters, per-epoch curves, final metrics and tags the
store keeps. MLflow and TensorBoard are imported at the top: without them this module fails
to collect, never skips.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymongo
import pytest
from click.testing import CliRunner, Result
from mlflow.tracking import MlflowClient
from tensorboard import context as tb_context
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.backend.event_processing import plugin_event_multiplexer as multiplexer
from tensorboard.backend.event_processing.data_provider import MultiplexerDataProvider
from tensorboard.plugins import base_plugin
from tensorboard.plugins.hparams import (
    api_pb2,
    backend_context,
    get_experiment,
    list_session_groups,
    metadata,
)

from cli.main import main
from core.spec.values import value_text
from core.store.records import flatten_params
from core.store.trackers import RECORD_METRICS
from tests.integration.stack import ROOT
from tests.integration.test_run import SWEEPSTACK, clean_env
from tests.services import SecantusProcess, free_port
from workers.training.checkpoints import read_model_file

pytestmark = pytest.mark.integration

#: 8 trials of 3 epochs on iris; lr 100 makes the loss blow up in some, which then fail.
SPEC = """\
name: trackers
description: Width x activation x learning rate on iris, some of it diverging.
dataset: {name: iris}
execution: {device: cpu}
model: {hidden_layers: 1, hidden_units: [4, 8], activation: [relu, tanh]}
training: {optimizer: sgd, lr: [0.05, 100.0], epochs: 3, batch_size: 16, seed: 0}
objective: {metric: val_accuracy, direction: max}
"""
TRIALS = 8
#: A trial's state -> its MLflow run's status, and its HParams session's.
MLFLOW_STATUS = {"complete": "FINISHED", "failed": "FAILED"}
TB_STATUS = {"complete": api_pb2.STATUS_SUCCESS, "failed": api_pb2.STATUS_FAILURE}


class MlflowServer:
    """`mlflow server` on a free port of 127.0.0.1, in its own process group, started at
    once; `url` waits until it answers."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.log_path = folder / "mlflow-server.log"
        self.log = open(self.log_path, "w")  # noqa: SIM115
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # no GenAI jobs
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1",
             "--port", str(self.port), "--workers", "1",
             "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}",
             "--default-artifact-root", str(folder / "artifacts")],
            env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        self._ready = False

    @property
    def url(self) -> str:
        address = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 90
        while not self._ready:
            if self.proc.poll() is not None:
                raise AssertionError(f"mlflow server exited: {self.log_path.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"mlflow server not up: {self.log_path.read_text()[-3000:]}")
            with (contextlib.suppress(OSError),
                  urllib.request.urlopen(f"{address}/health", timeout=1) as answer):
                self._ready = answer.status == 200
            time.sleep(0.2)
        return address

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    server = MlflowServer(tmp_path_factory.mktemp("mlflow"))
    try:
        yield server
    finally:
        server.stop()


@dataclass(frozen=True)
class Finished:
    """A sweep `sweepstack run` finished in a data folder, and what its store keeps."""

    env: dict[str, str]
    data: Path
    sweep: dict[str, Any]
    trials: dict[str, dict[str, Any]]  # by id
    curves: dict[str, dict[int, dict[str, Any]]]  # id -> epoch -> metrics (final attempt)

    def export(self, *args: str) -> subprocess.CompletedProcess:
        """`sweepstack export SWEEP --data DIR ARGS` in a process of its own."""
        return subprocess.run(
            [*SWEEPSTACK, "export", self.sweep["_id"], "--data", str(self.data), *args],
            env=self.env, cwd=ROOT, capture_output=True, text=True, timeout=120,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip

    def invoke(self, *args: str) -> Result:
        """The same in this process (no interpreter start and imports to pay for)."""
        unset: dict[str, str | None] = {k: None for k in os.environ if k.startswith("SWEEPSTACK_")}
        argv = ["export", self.sweep["_id"], "--data", str(self.data), *args]
        return CliRunner().invoke(main, argv, env={**unset, "HOME": self.env["HOME"]})


def read_store(data: Path) -> tuple[dict[str, Any], dict[str, dict], dict[str, dict]]:
    """The folder's sweep, its trials and their final attempts' curves, read with a
    SecantusDB of the test's own."""
    server = SecantusProcess(data / "db")
    try:
        client = pymongo.MongoClient(server.url, serverSelectionTimeoutMS=10000)
        db = client["sweepstack"]
        (sweep,) = db["sweeps"].find()
        trials = {d["_id"]: d for d in db["trials"].find({"sweep_id": sweep["_id"]})}
        curves: dict[str, dict[int, dict]] = {tid: {} for tid in trials}
        for row in db["metrics"].find({"sweep_id": sweep["_id"]}):
            if row["attempt"] == trials[row["trial_id"]]["attempt"]:
                # The record's figures (train_seconds: the trial's) are final metrics, not
                # curves, though each epoch row carries the seconds trained so far.
                curves[row["trial_id"]][row["epoch"]] = {
                    k: v for k, v in row["metrics"].items() if k not in RECORD_METRICS
                }
        client.close()
        return sweep, trials, curves
    finally:
        server.stop()


@pytest.fixture(scope="module")
def finished(mlflow_server: MlflowServer, tmp_path_factory: pytest.TempPathFactory) -> Finished:
    """`sweepstack run` of `SPEC` (while the MLflow server starts), with nothing set in the
    environment but its data folder."""
    base = tmp_path_factory.mktemp("trackers")
    spec, data, env = base / "trackers.yaml", base / "data", clean_env(base)
    spec.write_text(SPEC)
    out = subprocess.run(
        [*SWEEPSTACK, "run", str(spec), "--data", str(data), "--no-dashboard", "--workers", "2",
         "--json"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    sweep, trials, curves = read_store(data)
    states = {t["state"] for t in trials.values()}
    assert len(trials) == TRIALS and states == {"complete", "failed"}, states
    return Finished(env, data, sweep, trials, curves)


def numbers(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items()
            if k != "epoch" and isinstance(v, int | float) and not isinstance(v, bool)}  # fmt: skip


def final_metrics(trial: dict[str, Any]) -> dict[str, float]:
    """What a trial's run ends with: its last epoch's metrics, objective, seconds, size."""
    final = numbers((trial.get("result") or {}).get("final") or {})
    for name in ("objective", "train_seconds", "param_count"):
        if isinstance(trial.get(name), int | float):
            final[name] = float(trial[name])
    return final


def test_mlflow_export_reads_back_with_the_trials_curves_and_tags(
    finished: Finished, mlflow_server: MlflowServer
) -> None:
    url, sweep = mlflow_server.url, finished.sweep
    out = finished.export("--format", "mlflow", "--tracking-uri", url)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout == ""  # MLflow's "View run" links are kept off standard output
    assert f"exported {TRIALS} trials of sweep {sweep['_id']} to MLflow experiment " \
           f"'trackers' at {url}: run " in out.stderr  # fmt: skip

    client = MlflowClient(url)
    experiment = client.get_experiment_by_name("trackers")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    (parent,) = [r for r in runs if r.data.tags.get("sweepstack.role") == "sweep"]
    assert parent.info.run_name == "trackers" and parent.info.status == "FINISHED"
    assert parent.info.run_id in out.stderr
    params = parent.data.params
    assert params["objective.metric"] == "val_accuracy"
    assert params["objective.direction"] == "maximize"
    assert params["search.algorithm"] == "grid" and params["pruning.algorithm"] == "none"
    assert params["trials"] == str(TRIALS)
    for state, n in sweep["counts"].items():
        assert params[f"counts.{state}"] == str(n)
    complete = [t for t in finished.trials.values() if t["state"] == "complete"]
    best = max(complete, key=lambda t: (t["objective"], -t["index"]))
    assert parent.data.metrics["objective"] == pytest.approx(best["objective"])
    assert parent.data.tags["sweepstack.best_trial"] == best["_id"]
    assert parent.data.tags["sweepstack.export"] == "done"
    assert parent.data.tags["mlflow.note.content"] == sweep["description"]

    children = {r.data.tags["sweepstack.trial_id"]: r for r in runs if r is not parent}
    assert sorted(children) == sorted(finished.trials)
    for trial_id, run in children.items():
        trial, tags = finished.trials[trial_id], run.data.tags
        assert tags["mlflow.parentRunId"] == parent.info.run_id
        assert run.info.run_name == f"trial {trial['index']}"
        assert run.info.status == MLFLOW_STATUS[trial["state"]]
        expected = {k: value_text(v) for k, v in flatten_params(trial["params"]).items()}
        assert run.data.params == expected
        assert tags["sweepstack.state"] == trial["state"]
        assert tags["sweepstack.seed"] == str(trial["seed"])
        assert tags["sweepstack.index"] == str(trial["index"])
        assert tags["sweepstack.attempt"] == str(trial["attempt"])
        assert tags["sweepstack.sweep_id"] == sweep["_id"]
        for package, version in trial["versions"].items():
            assert tags[f"sweepstack.versions.{package}"] == version
        assert tags["sweepstack.versions.code"] == trial["versions"]["code"]
        if trial["state"] == "complete":
            assert tags["sweepstack.dataset_fingerprint"] == trial["dataset_fingerprint"]
            assert "sweepstack.error" not in tags
            # Kept (the default keeps the 10 best): its weights are the run's model artifact.
            with tempfile.TemporaryDirectory() as folder:
                path = client.download_artifacts(run.info.run_id, "model/model.safetensors",
                                                 folder)  # fmt: skip
                _, meta = read_model_file(Path(path).read_bytes())
            assert meta["trial_id"] == trial_id and meta["objective"] == trial["objective"]
        else:
            assert tags["sweepstack.error"] == trial["error"]
            assert not client.list_artifacts(run.info.run_id)
        curve = finished.curves[trial_id]
        assert curve, trial_id  # every trial reported at least its first epoch
        for metric in numbers(curve[min(curve)]):
            history = client.get_metric_history(run.info.run_id, metric)
            got = sorted((m.step, m.value) for m in history)
            want = [(epoch, float(curve[epoch][metric])) for epoch in sorted(curve)]
            assert [step for step, _ in got] == [step for step, _ in want], (trial_id, metric)
            for (_, value), (_, wanted) in zip(got, want, strict=True):
                assert value == pytest.approx(wanted, rel=1e-12), (trial_id, metric)
        last = numbers(curve[max(curve)])
        expected_final = {**last, **final_metrics(trial)}
        assert run.data.metrics.keys() == expected_final.keys(), trial_id
        for name, value in expected_final.items():
            assert run.data.metrics[name] == pytest.approx(value, rel=1e-12), (trial_id, name)

    # Exported again: refused, naming the parent run, and nothing is added.
    again = finished.invoke("--format", "mlflow", "--tracking-uri", url)
    assert again.exit_code == 1, again.output
    assert f"sweep {sweep['_id']} is in MLflow experiment 'trackers' already: its run " \
           f"{parent.info.run_id}" in again.stderr  # fmt: skip
    assert len(client.search_runs([experiment.experiment_id], max_results=1000)) == TRIALS + 1
    # Into another experiment, it goes.
    other = finished.invoke("--format", "mlflow", "--tracking-uri", url, "--experiment", "copy")
    assert other.exit_code == 0, other.output
    copy = client.get_experiment_by_name("copy")
    assert copy is not None
    assert len(client.search_runs([copy.experiment_id], max_results=1000)) == TRIALS + 1


def hparams_backend(root: Path) -> tuple[Any, Any]:
    """What TensorBoard's HParams plugin serves for `root`: the experiment and the session
    groups its tab lists (every status, every column)."""
    events = multiplexer.EventMultiplexer()
    events.AddRunsFromDirectory(str(root))
    events.Reload()
    provider = MultiplexerDataProvider(events, str(root))
    tb = base_plugin.TBContext(logdir=str(root), multiplexer=events, data_provider=provider)
    backend, request = backend_context.Context(tb), tb_context.RequestContext()
    experiment = get_experiment.Handler(request, backend, "", api_pb2.GetExperimentRequest()).run()
    listing = api_pb2.ListSessionGroupsRequest(
        start_index=0, slice_size=1000, aggregation_type=api_pb2.AGGREGATION_AVG,
        allowed_statuses=[api_pb2.STATUS_UNKNOWN, api_pb2.STATUS_SUCCESS,
                          api_pb2.STATUS_FAILURE, api_pb2.STATUS_RUNNING],
    )  # fmt: skip
    for info in experiment.hparam_infos:
        listing.col_params.add(hparam=info.name)
    for metric in experiment.metric_infos:
        listing.col_params.add(metric=metric.name)
    groups = list_session_groups.Handler(request, backend, "", listing).run()
    return experiment, groups


def f32(value: float) -> Any:
    """A value as TensorBoard's scalar events keep it (float32)."""
    return pytest.approx(value, rel=1e-6, abs=1e-30) if math.isfinite(value) else value


def test_tensorboard_export_reads_back_with_its_own_readers(
    finished: Finished, tmp_path: Path
) -> None:
    root = tmp_path / "tb"
    out = finished.export("--format", "tensorboard", "-o", str(root))
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"wrote {TRIALS} trials of sweep {finished.sweep['_id']} to {root}" in out.stderr
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == sorted(finished.trials)

    # The scalars, trial by trial, with the plain event reader.
    for trial_id, trial in finished.trials.items():
        events = event_accumulator.EventAccumulator(str(root / trial_id))
        events.Reload()
        curve = finished.curves[trial_id]
        last = max(curve)
        for metric in numbers(curve[last]):
            got = [(s.step, s.value) for s in events.Scalars(metric)]
            assert got == [(e, f32(float(curve[e][metric]))) for e in sorted(curve)], metric
        for name, value in final_metrics(trial).items():
            (*_, at_end) = events.Scalars(name)
            assert (at_end.step, at_end.value) == (last, f32(value)), (trial_id, name)

    # What the HParams tab lists: one session per trial with its parameters, status, metrics.
    experiment, groups = hparams_backend(root)
    paths = {p for t in finished.trials.values() for p in flatten_params(t["params"])}
    assert {h.name for h in experiment.hparam_infos} == paths
    kinds = {h.name: h.type for h in experiment.hparam_infos}
    assert kinds["model.activation"] == api_pb2.DATA_TYPE_STRING
    assert kinds["training.lr"] == api_pb2.DATA_TYPE_FLOAT64
    lr = next(h for h in experiment.hparam_infos if h.name == "training.lr")
    assert [v.number_value for v in lr.domain_discrete.values] == [0.05, 100.0]
    metrics = [m.name.tag for m in experiment.metric_infos]
    assert metrics[:2] == ["objective", "val_accuracy"]  # the columns the tab shows unasked
    assert {"val_loss", "train_loss", "train_seconds", "param_count"} <= set(metrics)
    assert groups.total_size == TRIALS
    for group in groups.session_groups:
        trial = finished.trials[group.name]
        (session,) = group.sessions
        assert session.name == group.name and session.status == TB_STATUS[trial["state"]]
        shown = {k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind"))
                 for k, v in group.hparams.items()}  # fmt: skip
        params = flatten_params(trial["params"])
        assert shown == {k: float(v) if isinstance(v, int | float) else v
                         for k, v in params.items()}  # fmt: skip
        values = {m.name.tag: m.value for m in group.metric_values}
        curve = finished.curves[group.name]
        for name, value in {**numbers(curve[max(curve)]), **final_metrics(trial)}.items():
            assert values[name] == f32(value), (group.name, name)

    # The plugin's data as the event multiplexer reads it: the experiment at the root only.
    events = multiplexer.EventMultiplexer()
    events.AddRunsFromDirectory(str(root))
    events.Reload()
    content = events.PluginRunToTagToContent(metadata.PLUGIN_NAME)
    assert set(content["."]) == {metadata.EXPERIMENT_TAG}
    for trial_id in finished.trials:
        assert set(content[trial_id]) == {metadata.SESSION_START_INFO_TAG,
                                          metadata.SESSION_END_INFO_TAG}  # fmt: skip
        start = metadata.parse_session_start_info_plugin_data(
            content[trial_id][metadata.SESSION_START_INFO_TAG])
        assert start.group_name == trial_id

    # A second export into the same folder is refused: each trial would show twice.
    again = finished.invoke("--format", "tensorboard", "-o", str(root))
    assert again.exit_code == 1 and "the folder is not empty" in again.stderr, again.output


def test_a_missing_tracker_package_is_named_with_its_extra(finished: Finished,
                                                           tmp_path: Path) -> None:  # fmt: skip
    """Without MLflow or TensorBoard importable, the export says which extra to install."""
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    for name in ("mlflow", "tensorboard"):  # packages that fail to import, first on the path
        (blocked / name).mkdir()
        (blocked / name / "__init__.py").write_text(f"raise ImportError('no {name} here')\n")
    env = {**finished.env, "PYTHONPATH": f"{blocked}{os.pathsep}{finished.env['PYTHONPATH']}"}
    for args, extra in (
        (["--format", "mlflow", "--tracking-uri", "http://127.0.0.1:9"], "mlflow"),
        (["--format", "tensorboard", "-o", str(tmp_path / "tb")], "tensorboard"),
    ):
        out = subprocess.run(
            [*SWEEPSTACK, "export", finished.sweep["_id"], "--data", str(finished.data), *args],
            env=env, cwd=ROOT, capture_output=True, text=True, timeout=120,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert out.returncode == 1, out.stderr[-2000:]
        assert f"pip install 'sweepstack[{extra}]'" in out.stderr, out.stderr[-2000:]
    assert not (tmp_path / "tb").exists()
