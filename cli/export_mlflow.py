"""``sweepstack export SWEEP --format mlflow``: a sweep into an MLflow tracking server.

One parent run per sweep (named as the sweep; its objective, search, pruning and counts as
parameters, the best objective as a metric) and one child run per trial (``mlflow.parentRunId``
the parent's id): the trial's parameters, its final attempt's curve as steps (one per epoch),
its final metrics at the last step, and its tags; what each holds is `core.store.trackers`.
A trial's run ends as its trial did: complete FINISHED, failed FAILED, pruned and cancelled
KILLED; a running trial's run stays RUNNING and a queued one's SCHEDULED.

Written with `MlflowClient`: a run's parameters, tags and metrics go in as few ``log_batch``
calls as MLflow's limits allow (100 parameters, 100 tags, 1,000 entries a call), so a trial
costs about four calls whatever its length, and `WORKERS` trials are written at once. A
1,000-trial sweep of 20 epochs and 5 metrics (100,000 values) took 64 s into a local
``mlflow server`` on SQLite on the 2-core test machine (2026-12-06), the server's time
most of it; a call per value would take about half an hour.

A sweep is exported to an experiment once: when the experiment holds a run of the sweep
already (a parent or a trial's, finished or from an export that stopped part-way), the
export is refused, naming that run, and writes nothing; delete those runs in MLflow, or give
another ``--experiment``, to export it again. MLflow is imported only here, when asked for:
it is the ``mlflow`` extra (``pip install 'sweepstack[mlflow]'``).
"""

from __future__ import annotations

import posixpath
import re
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from core.store.trackers import TAG, SweepRun, TrialRun, param_text

if TYPE_CHECKING:
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.tracking import MlflowClient

#: The install that brings MLflow's client (the one named in the error when it is missing).
EXTRA = "pip install 'sweepstack[mlflow]'"
#: Trials written at once: the calls of one trial wait on each other, a remote server's
#: round trips on several trials at a time need not.
WORKERS = 4
#: MLflow's limits on one ``log_batch`` call and on keys and values (mlflow.utils.validation).
MAX_PARAMS, MAX_TAGS, MAX_ENTRIES = 100, 100, 1000
MAX_KEY, MAX_PARAM_VALUE, MAX_TAG_VALUE = 250, 6000, 8000
#: A trial's state -> the status of its MLflow run (None: the run is left RUNNING).
STATUS = {
    "complete": "FINISHED",
    "failed": "FAILED",
    "pruned": "KILLED",
    "cancelled": "KILLED",
    "running": None,
    "queued": "SCHEDULED",
}
#: The tag that says whether an export got to its end (`DONE`) or stopped part-way.
EXPORT_TAG, DONE, PARTIAL = f"{TAG}export", "done", "partial"
_BAD_KEY = re.compile(r"[^/\w.\- :]")


def mlflow_client(tracking_uri: str) -> MlflowClient:
    """MLflow's client for `tracking_uri`; a clear error naming the extra when MLflow is not
    installed."""
    try:
        from mlflow.tracking import MlflowClient
    except ImportError as exc:
        raise click.ClickException(
            f"--format mlflow needs MLflow's client, which is not installed ({exc}): {EXTRA}"
        ) from exc
    return MlflowClient(tracking_uri=tracking_uri)


def key(name: str) -> str:
    """`name` as an MLflow parameter, metric or tag key: characters MLflow refuses become
    ``_``, and so does a ``/`` in a name that would read as another path."""
    out = _BAD_KEY.sub("_", name)[:MAX_KEY]
    if posixpath.normpath(out) != out or out.startswith(("/", "..")):
        out = out.replace("/", "_")
    return out or "_"


def batches(
    metrics: list[Metric], params: list[Param], tags: list[RunTag]
) -> Iterator[tuple[list[Metric], list[Param], list[RunTag]]]:
    """The entries of one run in ``log_batch`` calls within MLflow's limits, fewest first."""
    m = p = t = 0
    while m < len(metrics) or p < len(params) or t < len(tags):
        some_params = params[p : p + MAX_PARAMS]
        some_tags = tags[t : t + MAX_TAGS]
        room = MAX_ENTRIES - len(some_params) - len(some_tags)
        some_metrics = metrics[m : m + room]
        yield some_metrics, some_params, some_tags
        m, p, t = m + len(some_metrics), p + len(some_params), t + len(some_tags)


class Export:
    """One sweep's export into one MLflow experiment, through `client`."""

    def __init__(
        self,
        client: MlflowClient,
        experiment: str,
        model: Callable[[str], bytes | None] = lambda trial_id: None,
    ) -> None:
        self.client = client
        self.experiment = experiment
        self.experiment_id = ""
        self.model = model

    def prepare(self, sweep: SweepRun) -> None:
        """Find or create the experiment; refuse (`click.ClickException`) when it holds a run of
        this sweep already."""
        found = self.client.get_experiment_by_name(self.experiment)
        if found is None:
            self.experiment_id = self.client.create_experiment(self.experiment)
            return
        if found.lifecycle_stage != "active":
            raise click.ClickException(
                f"MLflow experiment {self.experiment!r} is deleted: restore it "
                "(mlflow experiments restore) or give another --experiment"
            )
        self.experiment_id = found.experiment_id
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.`{TAG}sweep_id` = '{sweep.sweep_id}'",
            max_results=50,
        )
        if runs:
            parents = [r for r in runs if r.data.tags.get(f"{TAG}role") == "sweep"]
            run = (parents or runs)[0]
            what = ("its run" if parents else
                    f"the run of its trial {run.data.tags.get(f'{TAG}trial_id')}")  # fmt: skip
            partial = run.data.tags.get(EXPORT_TAG) == PARTIAL
            raise click.ClickException(
                f"sweep {sweep.sweep_id} is in MLflow experiment {self.experiment!r} already: "
                f"{what} {run.info.run_id} ({run.info.run_name!r}"
                + (", from an export that stopped part-way" if partial else "")
                + "). Delete the sweep's runs in MLflow to export it again, or give another "
                "--experiment"
            )

    def start(self, sweep: SweepRun) -> str:
        """Create the sweep's run, with its parameters and tags; its id."""
        from mlflow.entities import Param

        tags = {**sweep.tags, EXPORT_TAG: PARTIAL}
        if sweep.description:
            tags["mlflow.note.content"] = sweep.description
        run = self.client.create_run(
            self.experiment_id, start_time=sweep.start_ms, tags=tags, run_name=sweep.name
        )
        params = [Param(key(k), v[:MAX_PARAM_VALUE]) for k, v in sweep.params.items()]
        for _, some, _ in batches([], params, []):
            self.client.log_batch(run.info.run_id, params=some, synchronous=True)
        return str(run.info.run_id)

    def trial(self, parent: str, trial: TrialRun) -> str:
        """Write one trial's run under `parent`; its id."""
        from mlflow.entities import Metric, Param, RunTag

        run = self.client.create_run(
            self.experiment_id,
            start_time=trial.start_ms,
            tags={"mlflow.parentRunId": parent, f"{TAG}trial_id": trial.trial_id},
            run_name=f"trial {trial.index}",
        )
        run_id = run.info.run_id
        when = trial.end_ms or trial.start_ms or int(time.time() * 1000)
        metrics = [Metric(key(name), value, when, step)
                   for step, row in trial.curve for name, value in row.items()]  # fmt: skip
        metrics += [Metric(key(name), value, when, trial.last_step)
                    for name, value in trial.final_only.items()]  # fmt: skip
        params = [Param(key(k), param_text(v)[:MAX_PARAM_VALUE]) for k, v in trial.params.items()]
        tags = [RunTag(key(k), v[:MAX_TAG_VALUE]) for k, v in trial.tags.items()
                if k != f"{TAG}trial_id"]  # fmt: skip
        for some_metrics, some_params, some_tags in batches(metrics, params, tags):
            self.client.log_batch(run_id, some_metrics, some_params, some_tags, synchronous=True)
        weights = self.model(trial.trial_id)
        if weights is not None:  # the trial's kept model, as the artifact model/model.safetensors
            with tempfile.TemporaryDirectory() as folder:
                path = Path(folder) / "model.safetensors"
                path.write_bytes(weights)
                self.client.log_artifact(run_id, str(path), artifact_path="model")
        status = STATUS.get(trial.state)
        if status == "SCHEDULED":
            self.client.update_run(run_id, status=status)
        elif status is not None:
            self.client.set_terminated(run_id, status, end_time=trial.end_ms or when)
        return str(run_id)

    def finish(self, parent: str, sweep: SweepRun) -> None:
        """The sweep's metrics, its export marked done, and its run ended when the sweep
        has (a sweep with trials left keeps its run RUNNING)."""
        from mlflow.entities import Metric, RunTag

        when = sweep.end_ms or int(time.time() * 1000)
        metrics = [Metric(key(k), v, when, 0) for k, v in sweep.metrics.items()]
        self.client.log_batch(parent, metrics, tags=[RunTag(EXPORT_TAG, DONE)], synchronous=True)
        if sweep.finished:
            self.client.set_terminated(parent, "FINISHED", end_time=when)


def export(
    client: MlflowClient,
    experiment: str,
    sweep: SweepRun,
    trials: Iterable[TrialRun],
    advance: Callable[[], Any] = lambda: None,
    model: Callable[[str], bytes | None] = lambda trial_id: None,
) -> tuple[str, int]:
    """Write the sweep and its trials into `experiment` (`Export`), `WORKERS` trials at a time
    and `advance` called as each is written, with each trial's kept model (`model` gives its
    bytes, or None) as an artifact; the parent run's id and the trials written. Refused,
    writing nothing, when the experiment has a run of the sweep already."""
    job = Export(client, experiment, model)
    job.prepare(sweep)
    parent = job.start(sweep)
    written = 0
    with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="mlflow-export") as pool:
        pending: set[Future[str]] = set()
        try:
            for trial in trials:
                if len(pending) >= 2 * WORKERS:  # reading stays a few pages ahead, no more
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for future in done:
                        future.result()
                        written += 1
                        advance()
                pending.add(pool.submit(job.trial, parent, trial))
            for future in pending:
                future.result()
                written += 1
                advance()
        except BaseException:
            for future in pending:
                future.cancel()
            raise
    job.finish(parent, sweep)
    return parent, written
