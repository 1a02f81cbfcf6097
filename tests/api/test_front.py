"""The front of a sweep's objectives through the API and the CLI (#31): a finish stores every
objective and the constraints' verdict; ``GET /api/v1/sweeps/{id}/front`` serves the front
to the owner only (anyone else: the 404 of a missing sweep) and is in the OpenAPI
document; ``trials?front=true`` lists its trials; ``sweepstack front`` prints it."""

from __future__ import annotations

import json
from typing import Any

from click.testing import CliRunner
from flask.testing import FlaskClient

from cli.main import main
from core.settings import Settings
from core.states import TrialState
from core.store.store import Store
from tests.api import ALICE, BOB, small_spec, submit
from tests.core import finish, run

SPEC = small_spec(
    objective=None,
    objectives=[{"metric": "val_accuracy", "direction": "maximize"},
                {"metric": "param_count", "direction": "minimize"}],
    constraints=["param_count <= 500"],
)  # fmt: skip
del SPEC["objective"]
#: (accuracy, parameters) of the first four trials: the third is dominated by the second,
#: the fourth is the most accurate but breaks the constraint.
RESULTS = [(0.9, 300), (0.8, 100), (0.7, 200), (0.99, 900)]


def _sweep(client: FlaskClient, store: Store) -> tuple[str, list[dict[str, Any]]]:
    sweep_id = submit(client, SPEC)
    docs = store.reads.trials(sweep_id, limit=6)[0]
    for doc, (accuracy, params) in zip(docs, RESULTS, strict=False):
        attempt = run(store, doc["_id"])["attempt"]
        result = {"objective": accuracy, "values": {"val_accuracy": accuracy}}
        finish(store, doc["_id"], attempt, TrialState.COMPLETE, result=result,
               extra={"param_count": params, "train_seconds": 1.0})  # fmt: skip
    return sweep_id, docs


def test_a_finish_stores_every_objective_and_the_verdict(client: FlaskClient, store: Store) -> None:
    sweep_id, docs = _sweep(client, store)
    stored = [store.reads.get_trial(d["_id"]) for d in docs[:4]]
    assert [t["objectives"] for t in stored] == [[a, float(p)] for a, p in RESULTS]
    assert [t["feasible"] for t in stored] == [True, True, True, False]
    assert stored[3]["constraints"] == [400.0]
    sweep = client.get(f"/api/v1/sweeps/{sweep_id}", headers=ALICE).json
    assert sweep["objectives"] == SPEC["objectives"]
    assert sweep["constraints"] == ["param_count <= 500"]


def test_the_owner_gets_the_front(client: FlaskClient, store: Store) -> None:
    sweep_id, docs = _sweep(client, store)
    response = client.get(f"/api/v1/sweeps/{sweep_id}/front", headers=ALICE)
    assert response.status_code == 200
    front = response.json
    assert [t["id"] for t in front["trials"]] == [docs[0]["_id"], docs[1]["_id"]]
    assert front["trials"][0]["values"] == [0.9, 300.0]
    assert (front["complete"], front["feasible"], front["size"]) == (4, 3, 2)
    given = client.get(f"/api/v1/sweeps/{sweep_id}/front?reference=0.5,400", headers=ALICE)
    assert given.json["hypervolume"] == 0.3 * 300 + 0.1 * 100
    assert given.json["reference"] == [0.5, 400]
    bad = client.get(f"/api/v1/sweeps/{sweep_id}/front?reference=0.5", headers=ALICE)
    assert bad.status_code == 400 and bad.json["details"]["parameter"] == "reference"
    listed = client.get(f"/api/v1/sweeps/{sweep_id}/trials?front=true", headers=ALICE).json
    assert [t["id"] for t in listed["items"]] == [docs[0]["_id"], docs[1]["_id"]]
    assert listed["items"][0]["feasible"] is True and listed["next_cursor"] is None


def test_another_owner_gets_the_404_of_a_missing_sweep(client: FlaskClient, store: Store) -> None:
    sweep_id, _ = _sweep(client, store)
    theirs = client.get(f"/api/v1/sweeps/{sweep_id}/front", headers=BOB)
    missing = client.get("/api/v1/sweeps/000000000000/front", headers=BOB)
    assert theirs.status_code == missing.status_code == 404
    assert client.get(f"/api/v1/sweeps/{sweep_id}/trials?front=true",
                      headers=BOB).status_code == 404  # fmt: skip


def test_the_front_is_in_the_openapi_document(client: FlaskClient) -> None:
    document = client.get("/api/v1/openapi.json").json
    operation = document["paths"]["/api/v1/sweeps/{sweep_id}/front"]["get"]
    assert operation["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Front"
    }
    assert "404" in operation["responses"]


def test_a_spec_with_a_malformed_constraint_is_a_422(client: FlaskClient) -> None:
    response = client.post("/api/v1/sweeps", json={**SPEC, "constraints": ["param_count =< 5"]},
                           headers=ALICE)  # fmt: skip
    assert response.status_code == 422
    assert "constraints[0]" in json.dumps(response.json)


def test_sweepstack_front_prints_it(client: FlaskClient, store: Store, settings: Settings) -> None:
    sweep_id, docs = _sweep(client, store)
    env = {"SWEEPSTACK_MONGO_URL": settings.mongo_url, "SWEEPSTACK_MONGO_DB": settings.mongo_db,
           "COLUMNS": "250"}  # fmt: skip
    shown = CliRunner().invoke(main, ["front", sweep_id, "--json"], env=env)
    assert shown.exit_code == 0, shown.output
    value = json.loads(shown.output)
    assert [t["id"] for t in value["trials"]] == [docs[0]["_id"], docs[1]["_id"]]
    table = CliRunner().invoke(main, ["front", sweep_id, "--reference", "0.5,400"], env=env)
    assert table.exit_code == 0, table.output
    assert docs[1]["_id"] in table.output and "val_accuracy" in table.output
    assert "hypervolume 100" in table.output
    wrong = CliRunner().invoke(main, ["front", sweep_id, "--reference", "x"], env=env)
    assert wrong.exit_code == 2 and "--reference" in wrong.output
