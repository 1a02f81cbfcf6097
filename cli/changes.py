"""``sweepstack pause``, ``resume`` and ``extend``: change a running sweep, as W&B's
``wandb sweep --pause/--resume`` and Optuna's more ``n_trials`` do, on the store of
``SWEEPSTACK_MONGO_URL`` (or a data folder's, ``--data``).

The scheduler that feeds the sweep does the rest (`scheduler.feed`): a paused sweep starts
nothing new while its running trials finish; an extended one is fed from the stored trials
on its new spec, every trial keeping its id and result, no point asked twice, an adaptive
search keeping all it learned. Each change is kept in the sweep's history (`sweepstack
status`, the dashboard's sweep page, ``GET /api/v1/sweeps/ID``).
"""

from __future__ import annotations

import getpass
from typing import Any

import click
import yaml

from cli.local import find_sweep, open_store, with_data_dir
from cli.options import data_option
from cli.shared import fail_spec, read_settings
from core.errors import SpecError


def _who() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name known to this process
        return None


def _value(text: str) -> Any:
    """One value as YAML reads it: ``256`` a number, ``relu`` a string, ``[64, 32]`` a list."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise click.BadParameter(f"{text!r} is not a YAML value: {exc}") from None


def _pairs(items: tuple[str, ...], option: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        path, sep, values = item.partition("=")
        if not sep or not path.strip() or not values.strip():
            raise click.BadParameter(f"give PATH=VALUES, got {item!r}", param_hint=option)
        out[path.strip()] = values.strip()
    return out


def _values(text: str) -> list[Any]:
    """``256,512`` or ``[256, 512]`` (a YAML list, for values that are lists themselves)."""
    if text.startswith("["):
        parsed = _value(text)
        return parsed if isinstance(parsed, list) else [parsed]
    return [_value(part.strip()) for part in text.split(",")]


@click.command()
@click.argument("sweep_id")
@data_option
def pause(sweep_id: str, data_dir: str | None) -> None:
    """Pause a sweep: no new trial starts; running trials finish. `resume` goes on."""
    from core.store import changes

    store = open_store(with_data_dir(read_settings(), data_dir))
    find_sweep(store, sweep_id)
    done = changes.pause_sweep(store, sweep_id, owner=None, by=_who())
    click.echo(f"sweep {sweep_id} {'paused' if done['changed'] else 'was already paused'}")


@click.command()
@click.argument("sweep_id")
@data_option
def resume(sweep_id: str, data_dir: str | None) -> None:
    """Resume a paused sweep: its scheduler sends the trials held meanwhile, then more."""
    from core.store import changes

    store = open_store(with_data_dir(read_settings(), data_dir))
    find_sweep(store, sweep_id)
    done = changes.resume_sweep(store, sweep_id, owner=None, by=_who())
    click.echo(f"sweep {sweep_id} {'resumed' if done['changed'] else 'was not paused'}")


@click.command()
@click.argument("sweep_id")
@click.option(
    "--trials", type=click.IntRange(min=1), default=None,
    help="Raise search.trials to this many (random and adaptive searches).",
)  # fmt: skip
@click.option(
    "--add", "adds", multiple=True, metavar="PATH=VALUES",
    help="Add values to a grid list or choice dimension: model.hidden_units=256,512 "
    "(a YAML list for list values: 'model.widths=[[64, 32]]'). Repeatable.",
)  # fmt: skip
@click.option(
    "--narrow", "narrows", multiple=True, metavar="PATH=LOW,HIGH",
    help="Narrow a uniform, loguniform or int dimension inside its range: "
    "training.lr=0.001,0.01. Repeatable.",
)  # fmt: skip
@data_option
def extend(
    sweep_id: str,
    trials: int | None,
    adds: tuple[str, ...],
    narrows: tuple[str, ...],
    data_dir: str | None,
) -> None:
    """Change a running (or finished) sweep: more trials, more values, a narrower range.

    Its trials keep their ids and results; the new ones are fed by the sweep's scheduler
    (`sweepstack scheduler`, or the `sweepstack run` that runs it), and no point is run
    twice. For example: sweepstack extend SWEEP --trials 60 --add model.activation=elu
    """
    from core.store import changes
    from scheduler.expand import check_count

    change: dict[str, Any] = {}
    if trials is not None:
        change["trials"] = trials
    if adds:
        change["add"] = {p: _values(v) for p, v in _pairs(adds, "--add").items()}
    if narrows:
        change["narrow"] = {p: _values(v) for p, v in _pairs(narrows, "--narrow").items()}
    if not change:
        raise click.UsageError("give --trials, --add or --narrow")
    store = open_store(with_data_dir(read_settings(), data_dir))
    find_sweep(store, sweep_id)
    try:
        done = changes.change_sweep(
            store, sweep_id, change, owner=None, by=_who(),
            check=lambda spec: check_count(spec, spec.limits.max_trials),
        )  # fmt: skip
    except SpecError as exc:
        fail_spec(exc)
    click.echo(f"sweep {sweep_id} changed: {done['summary']}")
