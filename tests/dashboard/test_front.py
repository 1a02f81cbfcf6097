"""The sweep page's Pareto front (#31): its rows (`dashboard.front.front_points`) against the
API's front on the same trials, its figures, its data route (owner only: another owner gets
the 404 of a missing sweep, for the route and the page), the polls that say when it moved,
and the trials table's "on the front" filter."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from core.analysis.pareto import front_rows
from core.analysis.sweep import sweep_front
from core.spec.objectives import Constraint, Goals
from core.spec.sweep import load_spec
from core.states import TrialState
from dashboard import payloads
from dashboard.front import front_figures, front_points, hypervolume_figure, pareto_figure
from tests.core import finish, make_sweep, run, trial_ids
from tests.dashboard.conftest import BOB_TOKEN, SPEC, Sweep, fresh_app, login

GOALS = Goals(
    (("val_accuracy", "maximize"), ("param_count", "minimize")),
    (Constraint("param_count", "<=", 500.0),),
)
#: (accuracy, parameters) of trials 0-3: #2 is dominated by #1, #3 is the most accurate
#: but breaks the constraint (as in tests/api/test_front.py).
RESULTS = [(0.9, 300), (0.8, 100), (0.7, 200), (0.99, 900)]


def _row(index: int, accuracy: float, params: int, state: str = "complete") -> dict[str, Any]:
    done = state == "complete"
    return {
        "id": f"t{index}", "index": index, "state": state, "finished_at": 1000 + index,
        "objective": accuracy if done else None,
        "objectives": [accuracy, float(params)] if done else None,
        "feasible": params <= 500 if done else None,
    }  # fmt: skip


def _rows() -> list[dict[str, Any]]:
    rows = [_row(i, a, p) for i, (a, p) in enumerate(RESULTS)]
    rows.append(_row(4, 0, 0, state="failed"))
    rows.append({**_row(5, 0, 0, state="running"), "finished_at": None})
    return rows


# -- rows ------------------------------------------------------------------------------


def test_the_rows_hold_the_apis_front_and_hypervolume() -> None:
    rows = _rows()
    front = front_points(rows, GOALS)
    docs = [{**r, "_id": r["id"]} for r in rows]
    api = front_rows(docs, GOALS)
    assert front["front"] == [t["index"] for t in api["trials"]] == [0, 1]
    assert front["hypervolume"] == api["hypervolume"]
    assert front["reference"] == api["reference"]
    assert (front["complete"], front["feasible"]) == (4, 3)
    by_index = {p["index"]: p for p in front["points"]}
    assert sorted(by_index) == [0, 1, 2, 3]  # complete trials only
    assert [by_index[i]["front"] for i in range(4)] == [True, True, False, False]
    assert by_index[3]["feasible"] is False  # infeasible: never on the front


def test_the_hypervolume_rises_as_trials_finish_to_the_fronts() -> None:
    front = front_points(_rows(), GOALS)
    history = front["history"]
    assert history["trials"] == 5  # complete and failed, not the running one
    steps = history["steps"]
    assert [s["index"] for s in steps] == [0, 1]  # #2 is dominated, #3 infeasible
    assert [s["trials"] for s in steps] == [1, 2]
    # The reference is (0.68, 320): #0 alone dominates 0.22 x 20, with #1 also 0.12 x 200.
    assert steps[0]["hypervolume"] == pytest.approx(0.22 * 20)
    assert steps[-1]["hypervolume"] == pytest.approx(front["hypervolume"]) == pytest.approx(28.4)


def test_the_version_moves_with_what_the_figures_draw() -> None:
    rows = _rows()
    before = front_points(rows, GOALS)["version"]
    assert front_points(rows, GOALS)["version"] == before
    rows.append(_row(6, 0.95, 150))
    assert front_points(rows, GOALS)["version"] != before


def test_a_sweep_without_a_feasible_trial_has_no_front() -> None:
    front = front_points([_row(0, 0.99, 900)], GOALS)
    assert front["front"] == [] and front["hypervolume"] is None
    assert front["history"]["steps"] == []
    figure = hypervolume_figure(front)
    assert figure["layout"]["annotations"][0]["text"] == "no feasible complete trial yet"


# -- figures ---------------------------------------------------------------------------


def test_the_scatter_marks_the_front_the_feasible_and_the_infeasible() -> None:
    figure = pareto_figure(front_points(_rows(), GOALS), 0, 1, None)
    traces = {t["name"]: t for t in figure["data"]}
    assert traces["on the front"]["customdata"] == [0, 1]
    assert traces["feasible"]["customdata"] == [2]
    assert traces["infeasible (breaks a constraint)"]["customdata"] == [3]
    assert traces["feasible"]["type"] == "scattergl"  # the clouds in WebGL, circles only
    assert "symbol" not in traces["feasible"]["marker"]
    line = traces["front of these two"]
    # From the best accuracy along: the edge of what the front dominates.
    assert (line["x"], line["y"]) == ([0.9, 0.8], [300.0, 100.0])
    assert line["line"]["shape"] == "hv"
    assert figure["layout"]["xaxis"]["title"]["text"] == "val_accuracy ↑"
    assert figure["layout"]["meta"]["front"] == [0, 1]
    assert "param_count &lt;= 500" in figure["layout"]["title"]["subtitle"]["text"]


def test_two_of_three_objectives_draw_their_own_front_and_the_third_colours() -> None:
    goals = Goals((("val_accuracy", "maximize"), ("param_count", "minimize"),
                   ("train_seconds", "minimize")))  # fmt: skip
    values = [(0.9, 300, 5.0), (0.8, 100, 9.0), (0.85, 400, 1.0), (0.7, 500, 0.5)]
    rows = [{**_row(i, a, p), "objectives": [a, float(p), s], "feasible": None}
            for i, (a, p, s) in enumerate(values)]  # fmt: skip
    front = front_points(rows, goals)
    assert front["front"] == [0, 2, 1, 3]  # each is the best at something
    figure = pareto_figure(front, 0, 1, 2)
    traces = {t["name"]: t for t in figure["data"]}
    # On accuracy and parameters alone, #2 and #3 are beaten by #0 and #1.
    assert traces["front of these two"]["x"] == [0.9, 0.8]
    # The third objective colours in bands (no colour bar: its gradient is an inline style).
    colours = traces["on the front"]["marker"]["color"]
    assert len(colours) == 4 and colours[2] != colours[1]  # 1 s and 9 s: far apart
    assert traces["on the front"]["text"] == ["5", "9", "1", "0.5"]
    assert "train_seconds ↓" in traces["on the front"]["hovertemplate"]
    assert "coloraxis" not in figure["layout"]
    assert figure["layout"]["legend"]["title"]["text"] == "colour: train_seconds ↓"


def test_a_wide_positive_axis_is_logarithmic_and_an_empty_sweep_says_why() -> None:
    rows = [_row(0, 0.9, 100), {**_row(1, 0.95, 50_000), "feasible": True}]
    figure = pareto_figure(front_points(rows, GOALS), 0, 1, None)
    assert figure["layout"]["yaxis"]["type"] == "log"
    assert figure["layout"]["xaxis"].get("type") != "log"
    empty = front_figures(front_points([], GOALS), 0, 1, None)
    assert empty["pareto"]["layout"]["annotations"][0]["text"] == "no complete trials yet"


# -- routes ----------------------------------------------------------------------------

MULTI: dict[str, Any] = {
    **{k: v for k, v in SPEC.items() if k != "objective"},
    "name": "front-test",
    "objectives": [{"metric": "val_accuracy", "direction": "maximize"},
                   {"metric": "param_count", "direction": "minimize"}],
    "constraints": ["param_count <= 500"],
}  # fmt: skip


def finish_multi(store: Any, trial_id: str, accuracy: float, params: int) -> None:
    """Claim and finish a trial of `MULTI` with both its objectives measured."""
    attempt = run(store, trial_id)["attempt"]
    result = {"objective": accuracy, "values": {"val_accuracy": accuracy}}
    assert finish(store, trial_id, attempt, TrialState.COMPLETE, result=result,
                  extra={"param_count": params, "train_seconds": 1.0})  # fmt: skip


@pytest.fixture
def multi(sweep: Sweep) -> tuple[str, list[str]]:
    """A 16-trial sweep of `MULTI` by alice, with `RESULTS` as trials 0-3, and trial 4 failed."""
    sweep_id, points = make_sweep(sweep.store, load_spec(MULTI), owner="alice")
    ids = trial_ids(sweep_id, points)
    for trial_id, (accuracy, params) in zip(ids, RESULTS, strict=False):
        finish_multi(sweep.store, trial_id, accuracy, params)
    attempt = run(sweep.store, ids[4])["attempt"]
    assert finish(sweep.store, ids[4], attempt, TrialState.FAILED, error="boom")
    return sweep_id, ids


@pytest.fixture
def app(sweep: Sweep, secantus_url: str, db_name: str, monkeypatch: pytest.MonkeyPatch) -> Flask:
    monkeypatch.setattr(payloads, "PREPARED_SECONDS", 0)
    return fresh_app(sweep.store, secantus_url, db_name)


@pytest.fixture
def client(app: Flask) -> Iterator[FlaskClient]:
    with app.test_client() as client:
        yield login(client)


def test_the_owner_gets_the_front_and_its_figures(
    client: FlaskClient, sweep: Sweep, multi: tuple[str, list[str]]
) -> None:
    sweep_id, _ = multi
    answer = client.get(f"/dashboard/data/sweeps/{sweep_id}/front").json
    assert (answer["x"], answer["y"], answer["colour"]) == ("val_accuracy", "param_count", None)
    api = sweep_front(sweep.store.reads, sweep_id)  # what GET /api/v1/sweeps/ID/front answers
    assert answer["front"] == [t["index"] for t in api["trials"]] == [0, 1]
    assert (answer["hypervolume"], answer["reference"]) == (api["hypervolume"], api["reference"])
    assert set(answer["figures"]) == {"pareto", "hypervolume"}
    steps = answer["figures"]["hypervolume"]["data"][0]["x"]
    assert steps[-1] == 5  # carried on to the failed trial, the fifth to finish
    swapped = client.get(f"/dashboard/data/sweeps/{sweep_id}/front?x=param_count&y=val_accuracy"
                         "&colour=val_accuracy").json  # fmt: skip
    assert swapped["figures"]["pareto"]["layout"]["meta"] == {
        "x": 1, "y": 0, "colour": 0, "front": [0, 1]}  # fmt: skip
    for query, name in (("x=loss", "x"), ("colour=nope", "colour"), ("y=none", "y")):
        bad = client.get(f"/dashboard/data/sweeps/{sweep_id}/front?{query}")
        assert bad.status_code == 400 and bad.json["details"]["parameter"] == name, query


def test_the_page_shows_the_front_only_with_several_objectives(
    client: FlaskClient, sweep: Sweep, multi: tuple[str, list[str]]
) -> None:
    sweep_id, _ = multi
    page = client.get(f"/sweeps/{sweep_id}").get_data(as_text=True)
    assert 'id="fig-front"' in page and 'id="filter-front"' in page
    assert "constraints: param_count &lt;= 500" in page
    single = client.get(f"/sweeps/{sweep.sweep_id}").get_data(as_text=True)
    assert 'id="fig-front"' not in single and 'id="filter-front"' not in single
    assert '"frontUrl": null' in single


def test_polls_say_when_the_front_moved(
    client: FlaskClient, sweep: Sweep, multi: tuple[str, list[str]]
) -> None:
    sweep_id, ids = multi
    first = client.get(f"/dashboard/data/sweeps/{sweep_id}/front").json["version"]
    changes = client.get(f"/dashboard/data/sweeps/{sweep_id}/changes?since=0").json
    assert changes["front"] == first
    assert changes["sweep"]["objectives"][1] == {"metric": "param_count",
                                                 "direction": "minimize"}  # fmt: skip
    finish_multi(sweep.store, ids[5], 0.95, 50)  # dominates #0 and #1
    moved = client.get(f"/dashboard/data/sweeps/{sweep_id}/changes?since=0").json["front"]
    assert moved != first
    assert client.get(f"/dashboard/data/sweeps/{sweep_id}/front").json["front"] == [5]
    single = client.get(f"/dashboard/data/sweeps/{sweep.sweep_id}/changes?since=0").json
    assert "front" not in single


def test_the_trials_table_filters_the_trials_on_the_front(
    client: FlaskClient, multi: tuple[str, list[str]]
) -> None:
    sweep_id, _ = multi
    url = f"/dashboard/data/sweeps/{sweep_id}/table"
    on = client.get(f"{url}?front=true&sort=objective&order=desc").json
    assert [r["index"] for r in on["rows"]] == [0, 1] and on["front"] is True
    assert on["rows"][0]["objectives"] == [0.9, 300.0] and on["rows"][0]["feasible"] is True
    assert client.get(f"{url}?front=false").json["total"] == 16
    both = client.get(f"{url}?front=true&filter=objective:le:0.85").json
    assert [r["index"] for r in both["rows"]] == [1]
    bad = client.get(f"{url}?front=yes")
    assert bad.status_code == 400 and bad.json["details"]["parameter"] == "front"
    download = client.get(f"/dashboard/data/sweeps/{sweep_id}/download?format=jsonl&front=true")
    assert download.status_code == 200
    assert len(download.get_data(as_text=True).splitlines()) == 2
    assert "-filtered" in download.headers["Content-Disposition"]


def test_another_owner_gets_404_for_the_front_and_the_page(
    app: Flask, multi: tuple[str, list[str]]
) -> None:
    sweep_id, _ = multi
    with app.test_client() as bob:
        login(bob, BOB_TOKEN)
        for url in (f"/dashboard/data/sweeps/{sweep_id}/front", f"/sweeps/{sweep_id}",
                    f"/dashboard/data/sweeps/{sweep_id}/table?front=true"):  # fmt: skip
            response = bob.get(url)
            assert response.status_code == 404, url
            assert "val_accuracy" not in response.get_data(as_text=True)
        missing = bob.get("/dashboard/data/sweeps/000000000000/front")
        assert missing.status_code == 404
        assert missing.json["code"] == "not_found"
