"""``sweepstack pause``, ``resume`` and ``extend`` on the real store: what each prints, the
history it leaves, and bad input that exits 2 naming the field (1 for a missing sweep)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from cli.main import main
from core.spec.sweep import load_spec
from core.store.store import Store
from tests.core import open_store


@pytest.fixture
def store(secantus_url: str, db_name: str) -> Iterator[Store]:
    yield from open_store(secantus_url, db_name)


SPEC = {
    "name": "cli-changes",
    "dataset": {"name": "iris"},
    "model": {"hidden_units": {"choice": [8, 16]}, "activation": ["relu", "tanh"]},
    "training": {"epochs": 1, "lr": {"loguniform": [0.001, 0.1]}},
    "objective": {"metric": "val_accuracy", "direction": "maximize"},
    "search": {"algorithm": "tpe", "trials": 4, "parallelism": 2},
}


def test_pause_resume_and_extend_a_sweep(store: Store, secantus_url: str, db_name: str) -> None:
    store.ensure_indexes()
    # Stored with its four trials planned, none created yet (no scheduler runs here).
    sweep_id = store.admin.create_sweep(load_spec(SPEC), [], owner="alice", total=4)
    env = {"SWEEPSTACK_MONGO_URL": secantus_url, "SWEEPSTACK_MONGO_DB": db_name}
    runner = CliRunner()

    def run(*args: str) -> tuple[int, str, str]:
        done = runner.invoke(main, list(args), env=env)
        return done.exit_code, done.stdout, done.stderr

    assert run("pause", sweep_id) == (0, f"sweep {sweep_id} paused\n", "")
    code, out, _ = run("status", sweep_id)
    assert code == 0 and "paused since" in out and f"resume {sweep_id}" in out
    assert run("pause", sweep_id)[1] == f"sweep {sweep_id} was already paused\n"
    assert run("resume", sweep_id)[1] == f"sweep {sweep_id} resumed\n"
    code, out, _ = run("extend", sweep_id, "--trials", "6", "--add", "model.hidden_units=32,64",
                       "--narrow", "training.lr=0.005,0.05")  # fmt: skip
    assert code == 0, out
    assert out == (
        f"sweep {sweep_id} changed: search.trials 4 -> 6; model.hidden_units + [32, 64]; "
        "training.lr [0.001, 0.1] -> [0.005, 0.05]\n"
    )
    sweep = store.reads.get_sweep(sweep_id)
    assert sweep["spec"]["search"]["trials"] == 6 and sweep["spec_rev"] == 1
    assert [c["kind"] for c in sweep["changes"]] == ["pause", "resume", "change"]
    code, out, _ = run("status", sweep_id)
    assert code == 0 and "paused since" not in out
    assert "search.trials 4 -> 6; model.hidden_units + [32, 64]" in out and "resume by" in out
    listed = json.loads(run("status", sweep_id, "--json")[1])
    assert [c["kind"] for c in listed["changes"]] == ["pause", "resume", "change"]

    code, _, err = run("extend", sweep_id, "--trials", "5")
    assert code == 2 and err.startswith("error: trials: must be more than")
    assert "Traceback" not in err
    code, _, err = run("extend", sweep_id, "--narrow", "training.lr=0.0001,0.01")
    assert code == 2 and "narrow.training.lr: must lie inside [0.005, 0.05]" in err
    code, _, err = run("extend", sweep_id, "--add", "nothing")
    assert code == 2 and "PATH=VALUES" in err
    code, _, err = run("extend", sweep_id)
    assert code == 2 and "give --trials, --add or --narrow" in err
    code, _, err = run("pause", "0123456789ab")
    assert code == 1 and "no sweep 0123456789ab" in err
    assert store.reads.get_sweep(sweep_id)["spec_rev"] == 1  # the refusals changed nothing
    helped = runner.invoke(main, ["extend", "--help"], env=env).stdout
    assert "--trials" in helped and "--add PATH=VALUES" in helped and "--narrow" in helped
