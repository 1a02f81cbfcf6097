"""Issue 16's reproducers for what a submitted spec may ask for, through the real API on the
real store and broker: the datasets folder, the ceilings, trial counting, numbers BSON
cannot store, NUL and duplicate keys, and clean-up of a partly written sweep (chunked
bodies through real HTTP servers: `test_body_limits`). Every refusal is a 4xx naming the
field and changes nothing."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from flask.testing import FlaskClient

from cli.app import create_app
from core.settings import Settings
from core.spec.sweep import load_spec
from core.store.store import Store
from scheduler.enqueue import sender_app
from scheduler.expand import TrialPoint, expand
from tests.api import ALICE, SWEEPS, YAML, queue_depth, small_spec
from tests.core.spec.caffe.test_image_folder import NET, SOLVER

JSON = {"Content-Type": "application/json"}


def refused(response: Any, status: int) -> dict[str, Any]:
    """The error body, after checking the status and the one error shape."""
    assert response.status_code == status, response.get_data()[:800]
    body = response.json
    assert set(body) == {"code", "message", "details"}
    assert "Traceback" not in json.dumps(body)
    return body


def post_json(client: FlaskClient, spec: dict[str, Any]) -> Any:
    """POST `spec` as JSON text written by Python's encoder (NaN and Infinity included)."""
    return client.post(SWEEPS, data=json.dumps(spec), headers={**ALICE, **JSON})


def problem_paths(body: dict[str, Any]) -> list[str]:
    return [p["path"] for p in body["details"].get("problems", [])]


def nothing_stored(client: FlaskClient, settings: Settings) -> None:
    assert client.get(SWEEPS, headers=ALICE).json["items"] == []
    assert queue_depth(settings) == 0


# -- 1. dataset.path inside the datasets folder ----------------------------------------------


@pytest.fixture
def datasets(tmp_path: Path) -> Path:
    root = tmp_path / "datasets"
    root.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "private.csv").write_text("root:x:0:0\n1,2\n")
    (root / "out.csv").symlink_to(tmp_path / "elsewhere" / "private.csv")
    (root / "ok.csv").write_text("a,target\n1,0\n2,1\n")
    return root


@pytest.fixture
def folder_client(
    settings: Settings, store: Store, datasets: Path
) -> Iterator[tuple[FlaskClient, Settings]]:
    confined = dataclasses.replace(settings, datasets_dir=datasets)
    app = create_app(confined, store=store, sender=sender_app(confined))
    yield app.test_client(), confined


@pytest.mark.parametrize(
    ("path", "rule"),
    [
        ("/etc/passwd.csv", "is outside the datasets folder"),
        ("~/secrets.csv", "must not start with ~"),
        ("../elsewhere/private.csv", "must not contain a .. part"),
        ("sub/../../elsewhere/private.csv", "must not contain a .. part"),
        ("out.csv", "leads outside (a symlink)"),
    ],
)
def test_dataset_paths_outside_the_folder_are_422(
    folder_client: tuple[FlaskClient, Settings], path: str, rule: str
) -> None:
    client, settings = folder_client
    spec = small_spec(dataset={"path": path}, objective={"metric": "val_loss"})
    body = refused(client.post(SWEEPS, json=spec, headers=ALICE), 422)
    assert problem_paths(body) == ["dataset.path"]
    assert rule in body["details"]["problems"][0]["message"]
    nothing_stored(client, settings)


def test_a_grid_of_paths_is_checked_value_by_value(
    folder_client: tuple[FlaskClient, Settings], datasets: Path
) -> None:
    client, _ = folder_client
    spec = small_spec(
        dataset={"path": ["ok.csv", str(datasets / "ok.csv"), "/tmp/x.csv"]},
        objective={"metric": "val_loss"},
    )
    body = refused(client.post(SWEEPS, json=spec, headers=ALICE), 422)
    assert problem_paths(body) == ["dataset.path"] and "'/tmp/x.csv'" in body["message"]
    spec["dataset"]["path"] = ["ok.csv", str(datasets / "ok.csv")]
    assert client.post(SWEEPS, json=spec, headers=ALICE).status_code == 201


def test_a_nul_in_the_path_is_refused_without_a_traceback(
    folder_client: tuple[FlaskClient, Settings],
) -> None:
    client, settings = folder_client
    spec = small_spec(dataset={"path": "ok\x00.csv"})
    body = refused(client.post(SWEEPS, json=spec, headers=ALICE), 400)
    assert body["details"]["parameter"] == "body.dataset.path"
    text = yaml.safe_dump(spec)  # "ok\0.csv", YAML's escape for NUL
    assert "\\0" in text
    body = refused(client.post(SWEEPS, data=text, headers={**ALICE, **YAML}), 400)
    assert body["details"]["parameter"] == "body.dataset.path"
    nothing_stored(client, settings)


def test_only_a_caffe_spec_names_a_folder_and_it_stays_inside_the_datasets_folder(
    folder_client: tuple[FlaskClient, Settings], datasets: Path, tmp_path: Path
) -> None:
    client, settings = folder_client
    (datasets / "shapes").mkdir()
    (datasets / "out").symlink_to(tmp_path / "elsewhere")
    mlp = small_spec(dataset={"path": "shapes"}, objective={"metric": "val_loss"})
    body = refused(client.post(SWEEPS, json=mlp, headers=ALICE), 422)
    assert problem_paths(body) == ["dataset.path"]
    assert "a folder of images by class is a data set for Caffe nets only" in body["message"]
    texts = {"net_text": NET.replace("KERNEL", "3"), "solver_text": SOLVER}
    caffe = {"name": "folder", "caffe": texts, "dataset": {"path": "out"}}
    body = refused(client.post(SWEEPS, json=caffe, headers=ALICE), 422)
    assert (
        problem_paths(body) == ["dataset.path"] and "leads outside (a symlink)" in body["message"]
    )
    nothing_stored(client, settings)
    caffe["dataset"] = {"path": "shapes"}  # its images are the workers' to read
    assert client.post(SWEEPS, json=caffe, headers=ALICE).status_code == 201


# -- 2. ceilings -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        (
            {"execution": {"parallel": {"world_size": 1024}}},
            "execution.parallel.world_size",
            "must be <= 8 on this server (SWEEPSTACK_MAX_WORLD_SIZE), got 1,024",
        ),
        (
            {"dataset": {"name": "synthetic_classification", "samples": 10**7,
                         "features": 10**5}},
            "dataset.samples",
            "must be <= 100,000,000 on this server (SWEEPSTACK_MAX_DATASET_ELEMENTS)",
        ),
        (
            {"model": {"hidden_layers": 128, "hidden_units": 1_000}},
            "model.hidden_units",
            "must be <= 100,000,000 on this server (SWEEPSTACK_MAX_MODEL_PARAMETERS)",
        ),
        (
            {"dataset": {"name": "synthetic_classification", "samples": 10**7, "features": 1},
             "training": {"epochs": 100}},
            "training.epochs",
            "must be <= 100,000,000 on this server (SWEEPSTACK_MAX_EPOCH_SAMPLES), got "
            "1,000,000,000",
        ),
        (
            {"description": "é" * 2049},
            "description",
            "its UTF-8 bytes must be <= 4,096 on this server (SWEEPSTACK_MAX_DESCRIPTION_BYTES)",
        ),
    ],
)  # fmt: skip
def test_ceilings_are_422_naming_the_field_and_the_limit(
    client: FlaskClient,
    settings: Settings,
    overrides: dict[str, Any],
    field: str,
    words: str,
) -> None:
    # The epochs x samples ceiling is lowered for the test; the others are the defaults.
    app = create_app(
        dataclasses.replace(settings, max_epoch_samples=10**8),
        store=client.application.extensions["sweepstack"].store,
        sender=sender_app(settings),
    )
    spec = small_spec(objective={"metric": "val_loss"}, **overrides)
    body = refused(app.test_client().post(SWEEPS, json=spec, headers=ALICE), 422)
    assert problem_paths(body) == [field]
    assert words in body["details"]["problems"][0]["message"]
    nothing_stored(client, settings)


def test_ceilings_come_from_the_settings(settings: Settings, store: Store) -> None:
    small = dataclasses.replace(settings, max_world_size=2, max_description_bytes=10)
    client = create_app(small, store=store, sender=sender_app(small)).test_client()
    spec = small_spec(execution={"parallel": {"world_size": [1, 2, 4]}}, description="x" * 11)
    body = refused(client.post(SWEEPS, json=spec, headers=ALICE), 422)
    assert problem_paths(body) == ["description", "execution.parallel.world_size"]
    spec = small_spec(execution={"parallel": {"world_size": [1, 2]}}, description="x" * 10)
    assert client.post(SWEEPS, json=spec, headers=ALICE).status_code == 201


def test_a_description_at_the_cap_is_stored(client: FlaskClient, settings: Settings) -> None:
    spec = small_spec(description="x" * settings.max_description_bytes)
    assert client.post(SWEEPS, json=spec, headers=ALICE).status_code == 201


# -- 3. counting in bounded time -------------------------------------------------------------

CONTROLLERS = {
    "training.lr": [round(0.001 * (i + 1), 4) for i in range(10)],
    "training.weight_decay": [round(0.01 * i, 3) for i in range(10)],
    "training.momentum": [round(0.05 * i, 3) for i in range(10)],
    "training.beta1": [round(0.05 * i, 3) for i in range(10)],
    "training.beta2": [round(0.05 * i, 3) for i in range(10)],
    "training.lr_gamma": [round(0.1 * (i + 1), 2) for i in range(10)],
    "training.batch_size": list(range(1, 11)),
    "model.dropout": [round(0.05 * i, 3) for i in range(10)],
    "dataset.validation_fraction": [round(0.05 * (i + 1), 3) for i in range(10)],
    "dataset.split_seed": list(range(10)),
}


def conditional_spec(dims: int) -> dict[str, Any]:
    """`dims` dimensions of 10 values, each named in another dimension's `when`: counting
    them used to walk all 10**dims combinations (7: 6.3 s; 10: past gunicorn's timeout)."""
    spec: dict[str, Any] = small_spec(model={"hidden_units": 8}, training={})
    spec["dataset"] = {"name": "iris"}
    chosen = list(CONTROLLERS)[:dims]
    for path in chosen:
        section, key = path.split(".")
        spec.setdefault(section, {})[key] = CONTROLLERS[path]
    when = {path: CONTROLLERS[path][0] for path in chosen}
    spec["training"]["epochs"] = {"choice": [1, 2], "when": when}
    return spec


@pytest.mark.parametrize("dims", [7, 10])
def test_conditional_dimensions_are_counted_without_walking_them(
    client: FlaskClient, settings: Settings, dims: int
) -> None:
    body = refused(client.post(SWEEPS, json=conditional_spec(dims), headers=ALICE), 422)
    assert body["code"] == "too_many_trials"
    assert body["details"]["limit"] == settings.api_max_trials
    assert body["details"]["count"] > settings.api_max_trials
    nothing_stored(client, settings)


# -- 4. numbers ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"training": {"seed": 2**63}}, "training.seed"),
        ({"training": {"seed": [1, 2**64 + 1]}}, "training.seed[1]"),
        ({"search": {"seed": 10**30}}, "search.seed"),
        ({"training": {"lr": {"range": [0.0, 1e308, 1e-308]}}}, "training.lr.range"),
        ({"training": {"weight_decay": float("inf")}}, "training.weight_decay"),
        ({"training": {"lr": [0.1, float("nan")]}}, "training.lr[1]"),
    ],
)
def test_numbers_bson_or_math_cannot_take_are_422(
    client: FlaskClient, settings: Settings, overrides: dict[str, Any], field: str
) -> None:
    body = refused(post_json(client, small_spec(**overrides)), 422)
    assert problem_paths(body) == [field]
    nothing_stored(client, settings)


def test_an_integer_of_more_than_4300_digits_is_400(
    client: FlaskClient, settings: Settings
) -> None:
    digits = "9" * 5000
    text = json.dumps(small_spec(training={"seed": 1})).replace('"seed": 1', f'"seed": {digits}')
    body = refused(client.post(SWEEPS, data=text, headers={**ALICE, **JSON}), 400)
    assert "more than 4,300 digits" in body["message"]
    text = f"name: big\ndataset: {{name: iris}}\ntraining: {{seed: {digits}}}\n"
    body = refused(client.post(SWEEPS, data=text, headers={**ALICE, **YAML}), 400)
    assert "more than 4,300 digits" in body["message"]
    nothing_stored(client, settings)


def test_nan_and_infinity_in_yaml_are_422(client: FlaskClient, settings: Settings) -> None:
    text = "name: n\ndataset: {name: iris}\ntraining: {weight_decay: .inf, lr: [.nan]}\n"
    body = refused(client.post(SWEEPS, data=text, headers={**ALICE, **YAML}), 422)
    assert problem_paths(body) == ["training.weight_decay", "training.lr[0]"]
    nothing_stored(client, settings)


# -- 5. NUL and duplicate keys ---------------------------------------------------------------


def test_a_nul_in_any_string_is_400_naming_the_field(
    client: FlaskClient, settings: Settings
) -> None:
    for spec, where in (
        (small_spec(name="a\x00b"), "body.name"),
        (small_spec(model={"activation": ["relu", "ta\x00nh"]}), "body.model.activation[1]"),
    ):
        body = refused(client.post(SWEEPS, json=spec, headers=ALICE), 400)
        assert body["details"]["parameter"] == where
    nothing_stored(client, settings)


def test_duplicate_keys_are_400_naming_the_key(client: FlaskClient, settings: Settings) -> None:
    text = '{"name": "first", "dataset": {"name": "iris"}, "name": "second"}'
    body = refused(client.post(SWEEPS, data=text, headers={**ALICE, **JSON}), 400)
    assert body["code"] == "malformed_body" and body["details"]["key"] == "name"
    text = "name: first\ndataset:\n  name: iris\n  name: digits\n"
    body = refused(client.post(SWEEPS, data=text, headers={**ALICE, **YAML}), 400)
    assert "duplicate key 'name' at line 4" in body["message"]
    nothing_stored(client, settings)


# -- 6. clean-up of every partial write ------------------------------------------------------


def test_a_failure_in_a_later_batch_leaves_no_trial_behind(store: Store) -> None:
    spec = load_spec(small_spec(model={"hidden_units": 8}, training={"seed": list(range(1500))}))
    trials = expand(spec, with_config=True)
    bad = trials[1200]
    # A value BSON cannot store in the second batch of 1,000 (what 2**64 did before the
    # spec rules refused it).
    trials[1200] = TrialPoint(bad.index, bad.id, {**bad.params, "training.seed": 2**64},
                              bad.seed, bad.config)  # fmt: skip
    with pytest.raises(OverflowError):
        store.admin.create_sweep(spec, trials, owner="alice")
    assert store.db["trials"].count_documents({}) == 0
    assert store.db["sweeps"].count_documents({}) == 0


# -- 3. inputs that used to answer 500 -----------------------------------------------------


@pytest.mark.parametrize(
    "number", ["9" * 5000, "0x" + "f" * 50_000], ids=["decimal-5000-digits", "hex-50000-digits"]
)
def test_a_prototxt_number_past_64_characters_is_422_naming_where(
    client: FlaskClient, settings: Settings, number: str
) -> None:
    net = NET.replace("KERNEL", number)
    spec = {"name": "long-number", "caffe": {"net_text": net, "solver_text": SOLVER}}
    body = refused(client.post(SWEEPS, json=spec, headers=ALICE), 422)
    assert "a number of" in body["message"] and "at most 64 are read" in body["message"]
    assert number[:80] not in body["message"]  # the text is not echoed back
    nothing_stored(client, settings)


def test_a_cursor_that_nests_deeper_than_python_reads_is_400(client: FlaskClient) -> None:
    import base64

    deep = base64.urlsafe_b64encode(b'{"i": 1, "q": "x", "v": ' + b"[" * 3000 + b"]" * 3000
                                    + b"}").decode().rstrip("=")  # fmt: skip
    assert len(deep) <= 8192
    for cursor in (deep[:4096], base64.urlsafe_b64encode(b"[" * 3000).decode()):
        response = client.get(f"{SWEEPS}?cursor={cursor}", headers=ALICE)
        assert response.status_code == 400, response.get_data(as_text=True)[:300]
        assert response.json["details"]["parameter"] == "cursor"


def test_a_spec_with_hundreds_of_problems_lists_the_first_hundred_and_counts_them(
    client: FlaskClient, settings: Settings, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from cli.main import main

    spec = small_spec(model={"hidden_units": [-i for i in range(1, 151)]})
    body = refused(client.post(SWEEPS, json=spec, headers=ALICE), 422)
    assert len(body["details"]["problems"]) == 100 and body["details"]["problems_total"] == 150
    assert body["message"].startswith("the spec has 150 problems; the first: model.hidden_units[0]")
    nothing_stored(client, settings)
    path = tmp_path / "many.yaml"
    path.write_text(yaml.safe_dump(spec))
    result = CliRunner().invoke(main, ["validate", str(path)])
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2 and len(lines) == 101
    assert lines[-1] == "error: … and 50 more problems"
