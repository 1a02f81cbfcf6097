"""``/api/v1/sweeps/{id}/export``: one row per trial with params and final metrics."""

from __future__ import annotations

import csv
import io
import json

import pytest
from flask.testing import FlaskClient

from core.states import TrialState
from core.store import export
from core.store.store import Store
from tests.api import ALICE, small_spec, submit
from tests.core import WORKER, finish


def end_trial(store: Store, trial_id: str, accuracy: float) -> None:
    attempt = store.lifecycle.claim(trial_id, WORKER, stale_after=60)["attempt"]
    final = {"epoch": 1, "train_loss": 0.3, "val_loss": 0.4, "val_accuracy": accuracy}
    result = {"objective": accuracy, "final": final, "best": final, "epochs": 1}
    extra = {"train_seconds": 1.5, "param_count": 99, "device": "cpu"}
    finish(store, trial_id, attempt, TrialState.COMPLETE, result=result, extra=extra)


@pytest.fixture
def sweep_id(client: FlaskClient, store: Store) -> str:
    sweep_id = submit(client)
    first = store.reads.trials(sweep_id, limit=1)[0][0]["_id"]
    end_trial(store, first, 0.875)
    return sweep_id


def test_csv_has_a_row_per_trial_with_params_and_final_metrics(
    client: FlaskClient, sweep_id: str
) -> None:
    response = client.get(f"/api/v1/sweeps/{sweep_id}/export?format=csv", headers=ALICE)
    assert response.status_code == 200 and response.mimetype == "text/csv"
    assert response.is_streamed
    assert f'filename="sweep-{sweep_id}.csv"' in response.headers["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(response.get_data(as_text=True))))
    assert len(rows) == 6
    first = rows[0]
    assert first["state"] == "complete" and first["objective"] == "0.875"
    assert first["model.hidden_units"] == "8" and first["model.activation"] == "relu"
    assert first["val_accuracy"] == "0.875" and first["val_loss"] == "0.4"
    assert first["val_rmse"] == "" and first["epochs"] == "1" and first["device"] == "cpu"
    assert rows[1]["state"] == "queued" and rows[1]["val_accuracy"] == ""
    assert [r["index"] for r in rows] == [str(i) for i in range(6)]


def test_jsonl_is_the_same_rows_as_objects(client: FlaskClient, sweep_id: str) -> None:
    response = client.get(f"/api/v1/sweeps/{sweep_id}/export?format=jsonl", headers=ALICE)
    assert response.status_code == 200 and response.mimetype == "application/x-ndjson"
    rows = [json.loads(line) for line in response.get_data(as_text=True).splitlines()]
    assert len(rows) == 6
    assert rows[0]["params"] == {"model.hidden_units": 8, "model.activation": "relu"}
    assert rows[0]["final"]["val_accuracy"] == 0.875 and rows[0]["train_seconds"] == 1.5
    assert rows[5]["final"] == {} and rows[5]["objective"] is None


def test_export_reads_page_after_page(
    client: FlaskClient, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(export, "PAGE", 4)
    spec = small_spec(model={"hidden_units": list(range(1, 11))})
    sweep_id = submit(client, spec)
    text = client.get(f"/api/v1/sweeps/{sweep_id}/export", headers=ALICE).get_data(as_text=True)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [int(r["model.hidden_units"]) for r in rows] == list(range(1, 11))


def test_an_unknown_format_is_400(client: FlaskClient, sweep_id: str) -> None:
    response = client.get(f"/api/v1/sweeps/{sweep_id}/export?format=xlsx", headers=ALICE)
    assert response.status_code == 400 and response.json["details"]["parameter"] == "format"


def test_a_sub_section_leaf_is_a_column_a_filter_and_a_sort(
    client: FlaskClient, store: Store
) -> None:
    spec = small_spec(
        model={"hidden_units": 8},
        execution={"parallel": {"world_size": 2, "strategy": "local_sgd", "tau": [1, 5, 20]}},
    )
    sweep_id = submit(client, spec)
    docs = store.reads.trials(sweep_id, limit=3)[0]
    assert docs[1]["params"] == {"execution": {"parallel": {"tau": 5}}}
    end_trial(store, docs[1]["_id"], 0.5)
    base = f"/api/v1/sweeps/{sweep_id}"
    text = client.get(f"{base}/export?format=csv", headers=ALICE).get_data(as_text=True)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [r["execution.parallel.tau"] for r in rows] == ["1", "5", "20"]
    assert rows[1]["val_accuracy"] == "0.5"
    lines = client.get(f"{base}/export?format=jsonl", headers=ALICE).get_data(as_text=True)
    assert json.loads(lines.splitlines()[2])["params"] == {"execution.parallel.tau": 20}
    page = client.get(f"{base}/trials?param=execution.parallel.tau:5", headers=ALICE).json
    assert [t["params"] for t in page["items"]] == [{"execution.parallel.tau": 5}]
    page = client.get(f"{base}/trials?sort=execution.parallel.tau&order=desc", headers=ALICE).json
    assert [t["params"]["execution.parallel.tau"] for t in page["items"]] == [20, 5, 1]
    refused = client.get(f"{base}/trials?param=execution.parallel:5", headers=ALICE)
    assert refused.status_code == 400


FORMULAS = ["=1+2.npz", "@SUM(A1).npz", "-3.npz", "+4.npz", "\tfive.npz", "plain.npz"]


def test_cells_a_spreadsheet_would_run_as_formulas_are_quoted(
    client: FlaskClient, store: Store
) -> None:
    from core.spec.sweep import load_spec
    from core.spec.values import csv_safe
    from tests.core import make_sweep

    spec = load_spec({"name": "formulas", "dataset": {"path": FORMULAS},
                      "model": {"hidden_units": 8}})  # fmt: skip
    sweep_id, _ = make_sweep(store, spec, owner="alice")
    text = client.get(f"/api/v1/sweeps/{sweep_id}/export", headers=ALICE).get_data(as_text=True)
    paths = sorted(r["dataset.path"] for r in csv.DictReader(io.StringIO(text)))
    assert paths == sorted(["'=1+2.npz", "'@SUM(A1).npz", "'-3.npz", "'+4.npz", "'\tfive.npz",
                            "plain.npz"])  # fmt: skip
    # The dashboard's download and `sweepstack export` write the same rows (`export.csv_text`);
    # numbers keep their sign.
    assert csv_safe(-0.5) == -0.5 and csv_safe("-0.5") == "'-0.5" and csv_safe(None) is None
    rows = list(csv.DictReader(io.StringIO("".join(export.csv_text(
        store.reads, store.reads.get_sweep(sweep_id))))))  # fmt: skip
    assert sorted(r["dataset.path"] for r in rows) == paths
