"""``sweepstack export SWEEP --format tensorboard -o DIR``: a sweep as TensorBoard event files,
so that ``tensorboard --logdir DIR`` shows its curves and its HParams tab shows the sweep.

``DIR/<trial id>/`` per trial: its final attempt's curve as scalars (one step per epoch,
each metric under its own name), its final metrics the curve does not end with (the
objective, training seconds, parameter count) at the last step, and the HParams plugin's
session start (the trial's parameters, group name its id) and end (status: complete and
pruned SUCCESS, failed FAILURE, cancelled UNKNOWN, queued and running RUNNING). ``DIR``
itself gets the HParams experiment summary: every parameter with its type and the values the
sweep tried, every metric (the objective and its metric first: the tab shows the first few
unasked). What each trial holds is `core.store.trackers`.

Written with TensorBoard's own event writer and HParams protos, with neither TensorFlow nor
torch: the package is the ``tensorboard`` extra (``pip install 'sweepstack[tensorboard]'``),
imported only when this format is asked for.

``DIR`` is the user's choice and must be new or empty (a second export beside a first would
show each trial twice); the folders in it are named by trial ids, which must be plain names
(letters, digits, ``._-``) whose folder lies inside ``DIR``, or nothing more is written.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from core.spec.values import value_text
from core.store.trackers import SweepRun, TrialRun

if TYPE_CHECKING:
    from tensorboard.compat.proto.summary_pb2 import Summary

#: The install that brings TensorBoard (the one named in the error when it is missing).
EXTRA = "pip install 'sweepstack[tensorboard]'"
#: What a trial's folder name may be: a trial id as the store makes them, and no path.
FOLDER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
#: A trial's state -> its session's status in the HParams plugin (api_pb2.Status names).
STATUS = {
    "complete": "STATUS_SUCCESS",
    "pruned": "STATUS_SUCCESS",
    "failed": "STATUS_FAILURE",
    "cancelled": "STATUS_UNKNOWN",
    "queued": "STATUS_RUNNING",
    "running": "STATUS_RUNNING",
}
#: A numeric parameter with at most this many values is listed value by value, else as a range.
MAX_DISCRETE = 30


def check_installed() -> None:
    """A clear error naming the extra when TensorBoard is not installed."""
    try:
        import tensorboard.plugins.hparams.plugin_data_pb2
        import tensorboard.summary.writer.event_file_writer  # noqa: F401
    except ImportError as exc:
        raise click.ClickException(
            f"--format tensorboard needs TensorBoard, which is not installed ({exc}): {EXTRA}"
        ) from exc


def prepare(root: Path) -> None:
    """Make `root`, refusing one that holds anything already."""
    if root.exists() and not root.is_dir():
        raise click.ClickException(f"-o {root}: is a file; give a new or empty folder")
    if root.is_dir() and any(root.iterdir()):
        raise click.ClickException(
            f"-o {root}: the folder is not empty; give a new or empty one (an export beside "
            "another would show each trial twice)"
        )
    root.mkdir(parents=True, exist_ok=True)


def trial_folder(root: Path, trial_id: str) -> Path:
    """The folder of a trial's events, `root`/`trial_id`: refused unless the id is a plain
    name whose folder lies right inside `root`."""
    folder = root / trial_id
    if not FOLDER_NAME.match(trial_id) or folder.resolve().parent != root.resolve():
        raise click.ClickException(
            f"trial id {trial_id!r} is not a plain folder name (letters, digits, '._-'): "
            f"nothing of it is written under {root}"
        )
    return folder


def hparam_value(value: Any) -> bool | float | str:
    """A parameter as the HParams plugin keeps one: a boolean, a number or a text (a list of
    widths as the platform spells it, ``[64,32]``)."""
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int | float):
        return float(value)
    return value_text(value)


def _summary(tag: str, plugin_data: Any) -> Summary:
    """A summary holding one piece of the HParams plugin's data under `tag`."""
    from tensorboard.compat.proto import summary_pb2
    from tensorboard.plugins.hparams import metadata

    summary = summary_pb2.Summary()
    summary.value.add(tag=tag, metadata=metadata.create_summary_metadata(plugin_data),
                      tensor=metadata.NULL_TENSOR)  # fmt: skip
    return summary


def session_start(trial: TrialRun, params: dict[str, bool | float | str]) -> Summary:
    from tensorboard.plugins.hparams import metadata, plugin_data_pb2

    info = plugin_data_pb2.SessionStartInfo(
        group_name=trial.trial_id, start_time_secs=(trial.start_ms or 0) / 1000
    )
    for name, value in sorted(params.items()):
        if isinstance(value, bool):
            info.hparams[name].bool_value = value
        elif isinstance(value, float):
            info.hparams[name].number_value = value
        else:
            info.hparams[name].string_value = value
    return _summary(metadata.SESSION_START_INFO_TAG,
                    plugin_data_pb2.HParamsPluginData(session_start_info=info))  # fmt: skip


def session_end(trial: TrialRun) -> Summary:
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

    status = api_pb2.Status.Value(STATUS.get(trial.state, "STATUS_UNKNOWN"))
    info = plugin_data_pb2.SessionEndInfo(status=status, end_time_secs=(trial.end_ms or 0) / 1000)
    return _summary(metadata.SESSION_END_INFO_TAG,
                    plugin_data_pb2.HParamsPluginData(session_end_info=info))  # fmt: skip


class Experiment:
    """The HParams experiment summary, gathered as the trials are written: each parameter's
    values and each metric's name."""

    def __init__(self) -> None:
        self.values: dict[str, dict[Any, bool | float | str]] = {}
        self.metrics: list[str] = []

    def add(self, params: dict[str, bool | float | str], metrics: Iterable[str]) -> None:
        for name, value in params.items():
            self.values.setdefault(name, {})[(type(value), value)] = value
        self.metrics += [m for m in metrics if m not in self.metrics]

    def summary(self, created_secs: float, first: Iterable[str] = ()) -> Summary:
        """The summary, its metrics led by `first` (those the HParams tab shows unasked:
        the objective)."""
        from google.protobuf import struct_pb2
        from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

        infos = []
        for name, seen in self.values.items():
            values = list(seen.values())
            kinds = {type(v) for v in values}
            info = api_pb2.HParamInfo(name=name)
            if kinds == {float} and len(values) > MAX_DISCRETE:
                info.type = api_pb2.DATA_TYPE_FLOAT64
                info.domain_interval.min_value = min(values)  # type: ignore[type-var]
                info.domain_interval.max_value = max(values)  # type: ignore[type-var]
            elif len(kinds) == 1:
                kind = kinds.pop()
                info.type = {bool: api_pb2.DATA_TYPE_BOOL, float: api_pb2.DATA_TYPE_FLOAT64,
                             str: api_pb2.DATA_TYPE_STRING}[kind]  # fmt: skip
                listed = struct_pb2.ListValue()
                listed.extend(sorted(values))  # type: ignore[type-var]
                info.domain_discrete.CopyFrom(listed)
            infos.append(info)  # values of several types: the plugin reads their type itself
        order = [m for m in first if m in self.metrics]
        order += [m for m in self.metrics if m not in order]
        metrics = [api_pb2.MetricInfo(name=api_pb2.MetricName(tag=m)) for m in order]
        experiment = api_pb2.Experiment(hparam_infos=infos, metric_infos=metrics,
                                        time_created_secs=created_secs)  # fmt: skip
        return _summary(metadata.EXPERIMENT_TAG,
                        plugin_data_pb2.HParamsPluginData(experiment=experiment))  # fmt: skip


def _write(folder: Path, events: list[tuple[float, int, Summary]]) -> None:
    """One event file in `folder` with these (wall time, step, summary) events."""
    from tensorboard.compat.proto import event_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    writer = EventFileWriter(str(folder))
    try:
        for wall_time, step, summary in events:
            writer.add_event(event_pb2.Event(wall_time=wall_time, step=step, summary=summary))
    finally:
        writer.close()


def write_trial(root: Path, trial: TrialRun, experiment: Experiment) -> None:
    """A trial's event folder: session start, its scalars by step, session end."""
    from tensorboard.compat.proto import summary_pb2

    folder = trial_folder(root, trial.trial_id)
    params = {name: hparam_value(value) for name, value in trial.params.items()}
    start = (trial.start_ms or trial.end_ms or time.time() * 1000) / 1000
    end = (trial.end_ms / 1000) if trial.end_ms else start
    events = [(start, 0, session_start(trial, params))]
    for step, row in trial.curve:
        scalars = summary_pb2.Summary()
        for name, value in row.items():
            scalars.value.add(tag=name, simple_value=value)
        events.append((end, step, scalars))
    if trial.final_only:
        scalars = summary_pb2.Summary()
        for name, value in trial.final_only.items():
            scalars.value.add(tag=name, simple_value=value)
        events.append((end, trial.last_step, scalars))
    events.append((end, trial.last_step, session_end(trial)))
    folder.mkdir()
    _write(folder, events)
    experiment.add(params, trial.metric_names)


def export(
    root: Path,
    sweep: SweepRun,
    trials: Iterable[TrialRun],
    advance: Callable[[], Any] = lambda: None,
) -> int:
    """Write the sweep's trials under `root` (new or empty), then the experiment summary in
    it; `advance` is called as each trial is written. The trials written."""
    prepare(root)
    experiment = Experiment()
    written = 0
    for trial in trials:
        write_trial(root, trial, experiment)
        written += 1
        advance()
    created = (sweep.start_ms or time.time() * 1000) / 1000
    first = ("objective", sweep.objective.get("metric", ""))
    _write(root, [(created, 0, experiment.summary(created, first))])
    return written
