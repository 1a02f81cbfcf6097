"""The OpenAPI 3.1 document of the API, served at ``/api/v1/openapi.json`` and ``/openapi.json``.

Written by hand, next to the views it describes, and built per app so the limits in it
(page size) are the server's. `tests/api/test_schemathesis.py` checks that it is a valid
OpenAPI document and that the server's answers conform to it.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Flask, current_app

from api.openapi_analysis import ANALYSIS
from api.params import accept
from api.serialize import PREFIX
from core.settings import Settings
from core.spec.config import SECTIONS
from core.spec.fields import leaf_fields
from core.spec.search import ALGORITHMS, PRUNERS
from core.spec.sweep import METRICS
from core.spec.trainable import KEY_PATTERN, NAME_PATTERN
from core.states import ALL_STATES
from core.store.query import TOP_LEVEL_SORTS
from web.context import context

blueprint = Blueprint("openapi", __name__, url_prefix=PREFIX)

STATES = [s.value for s in ALL_STATES]
PARAM_PATHS = list(leaf_fields())  # section.key and section.sub.key (execution.parallel.tau)
_PATHS_RE = "|".join(p.replace(".", r"\.") for p in PARAM_PATHS)
_NAME_RE = r"[A-Za-z_][A-Za-z0-9_]{0,63}"
_PARAM_RE = rf"^({_PATHS_RE}):(?!\s*[\[{{$]).*$"  # section.key:value, no object, list or $


def ref(name: str) -> dict[str, str]:
    """A reference to a component schema."""
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` or null."""
    if "type" in schema and len(schema) == 1:
        return {"type": [schema["type"], "null"]}
    return {"anyOf": [schema, {"type": "null"}]}


def obj(props: dict[str, Any], required: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    """An object schema; every property is required unless `required` says otherwise."""
    return {
        "type": "object",
        "properties": props,
        "required": list(props) if required is None else required,
        **extra,
    }


STR = {"type": "string"}
INT = {"type": "integer"}
NUM = {"type": "number"}
TIME = {"type": "string", "format": "date-time"}
ANY_OBJ = {"type": "object"}


def _schemas(settings: Settings) -> dict[str, Any]:
    counts = obj({state: {"type": "integer", "minimum": 0} for state in STATES})
    trial = obj(
        {
            "id": STR, "sweep_id": STR, "key": STR, "index": INT,
            "state": {"type": "string", "enum": STATES}, "attempt": INT, "seed": INT,
            "params": ANY_OBJ, "objective": nullable(NUM), "result": nullable(ANY_OBJ),
            "error": nullable(STR), "progress": nullable(ANY_OBJ), "worker": nullable(ANY_OBJ),
            "stop_requested": {"type": "boolean"}, "queued_at": nullable(TIME),
            "started_at": nullable(TIME), "heartbeat_at": nullable(TIME),
            "finished_at": nullable(TIME), "updated_at": nullable(TIME),
            "train_seconds": nullable(NUM), "param_count": nullable(INT),
            "device": nullable(STR), "dtype": nullable(STR),
            "pruned_epoch": nullable(INT),  # a pruned trial's last epoch trained
            "objectives": nullable({"type": "array", "items": nullable(NUM)}),
            "constraints": nullable({"type": "array", "items": nullable(NUM)}),
            "feasible": nullable({"type": "boolean"}), "macs": nullable(INT),
        },
        required=["id", "sweep_id", "index", "state", "attempt", "params"],
    )  # fmt: skip
    metric_row = obj({"attempt": INT, "epoch": INT, "metrics": ANY_OBJ, "reported_at": TIME})
    sweep = obj(
        {
            "id": STR, "name": STR, "description": STR, "owner": nullable(STR),
            "status": {"type": "string",
                       "enum": ["queued", "running", "paused", "finished", "cancelled"]},
            "objective": obj({"metric": STR, "direction": STR}), "trial_count": INT,
            "objectives": {"type": "array", "items": obj({"metric": STR, "direction": STR})},
            "constraints": {"type": "array", "items": STR},
            "search": ref("SearchSettings"), "pruning": ref("PruningSettings"),
            "counts": ref("Counts"), "created_at": TIME, "updated_at": TIME,
            "cancelled_at": nullable(TIME), "paused_at": nullable(TIME), "links": ANY_OBJ,
        }
    )  # fmt: skip
    change = obj(
        {"at": TIME, "kind": {"enum": ["pause", "resume", "change"]}, "summary": STR,
         "by": nullable(STR), "rev": nullable(INT)},
        description="One pause, resume or change of the sweep's spec, in its history",
    )  # fmt: skip
    throughput = obj(
        {"per_minute": nullable(NUM), "window_seconds": NUM, "remaining": INT,
         "eta_seconds": nullable(NUM)}
    )  # fmt: skip
    part = obj({"ok": {"type": "boolean"}, "latency_ms": NUM}, required=["ok", "latency_ms"])
    task = obj(
        {"task": nullable(STR), "trial_ids": {"type": "array", "items": STR},
         "task_id": nullable(STR), "started_at": nullable(TIME), "pid": nullable(INT)}
    )  # fmt: skip
    worker = obj(
        {"name": STR, "device": nullable(STR), "pid": nullable(INT),
         "concurrency": nullable(INT), "queues": {"type": "array", "items": STR},
         "active": {"type": "array", "items": task}}
    )  # fmt: skip
    search = obj(
        {"algorithm": {"enum": list(ALGORITHMS)}, "trials": nullable(INT),
         "parallelism": nullable(INT), "seed": INT, "options": ANY_OBJ},
        description="grid for sweeps older than search algorithms; trials null for a grid "
        "(trial_count), parallelism null when the scheduler chooses; options by Optuna's names",
    )  # fmt: skip
    pruning = obj(
        {"algorithm": {"enum": list(PRUNERS)}, "metric": nullable(STR), "options": ANY_OBJ},
        description="none without a pruning section; metric: the one judged (the objective's "
        "unless named)",
    )  # fmt: skip
    return {
        "Error": obj({"code": STR, "message": STR, "details": ANY_OBJ}),
        "SearchSettings": search,
        "PruningSettings": pruning,
        "Counts": counts,
        "Trial": trial,
        "TrialDetail": {
            "allOf": [
                ref("Trial"),
                obj(
                    {
                        "config": ANY_OBJ,
                        "history": {"type": "array"},
                        "metrics": {"type": "array", "items": metric_row},
                    }
                ),
            ]
        },
        "TrialPage": _page("Trial"),
        "Sweep": sweep,
        "SweepDetail": {
            "allOf": [
                ref("Sweep"),
                obj(
                    {
                        "spec": ANY_OBJ,
                        "spec_rev": INT,
                        "changes": {"type": "array", "items": change},
                        "best": nullable(ref("Trial")),
                        "throughput": throughput,
                    }
                ),
            ]
        },
        "SweepPage": _page("Sweep"),
        "SweepCreated": obj({"id": STR, "name": STR, "trials": INT, "links": ANY_OBJ}),
        "Cancelled": obj({"cancelled": INT, "stopping": INT, "sweep": ref("Sweep")}),
        "Paused": obj(
            {"changed": {"type": "boolean"}, "sweep": ref("Sweep")},
            description="changed: false when it already was (or was not) paused",
        ),
        "SweepChange": obj(
            {
                "trials": INT,
                "add": {"type": "object", "additionalProperties": {"type": "array"}},
                "narrow": {
                    "type": "object",
                    "additionalProperties": {
                        "type": "array",
                        "items": NUM,
                        "minItems": 2,
                        "maxItems": 2,
                    },
                },
            },
            description="At least one: trials raises search.trials (random and adaptive "
            "searches); add gives values to a grid list or choice dimension, by its dotted "
            "path; narrow gives a uniform, loguniform or int dimension [low, high] inside its "
            "range. Existing trials keep their ids and results; no point is asked twice.",
        ),
        "SweepChanged": obj({"summary": STR, "spec_rev": INT, "sweep": ref("Sweep")}),
        "Retried": obj({"retried": INT, "requeued_stale": INT, "sweep": ref("Sweep")}),
        "Deleted": obj({"id": STR, "deleted": {"const": True}, "trials": INT, "metrics": INT,
                           "texts": INT, "artifacts": INT}),
        "Health": obj({"status": {"const": "ok"}, "store": part, "broker": part}),
        "Workers": obj({"queue": STR, "workers": {"type": "array", "items": worker}}),
        "KeptModel": obj(
            {
                "trial_id": STR,
                "objective": nullable(NUM),
                "metric": nullable(STR),
                "size": INT,
                "sha256": STR,
                "created_at": TIME,
                "links": obj({"download": STR}),
            },
            description="a trial's kept model (the sweep's artifacts: policy keeps them)",
        ),
        "KeptModels": obj(
            {
                "items": {
                    "type": "array",
                    "items": ref("KeptModel"),
                    "description": "best objective first, at most 1,000",
                },
                "total": INT,
            },
        ),
        "Analysis": ANALYSIS,
        "Front": obj(
            {
                "sweep_id": STR,
                "version": INT,
                "objectives": {"type": "array", "items": obj({"metric": STR, "direction": STR})},
                "constraints": {"type": "array", "items": STR},
                "complete": INT,
                "feasible": INT,
                "size": INT,
                "trials": {
                    "type": "array",
                    "items": obj(
                        {
                            "id": STR,
                            "index": INT,
                            "values": {"type": "array", "items": NUM},
                            "params": ANY_OBJ,
                        }
                    ),
                },
                "reference": nullable({"type": "array", "items": NUM}),
                "hypervolume": nullable(NUM),
            },
            description="the feasible complete trials no other one dominates, by the first "
            "objective, and the hypervolume they dominate up to the reference point",
        ),
        "SweepSpec": _spec_schema(settings),
    }


def _page(item: str) -> dict[str, Any]:
    return obj(
        {
            "items": {"type": "array", "items": ref(item)},
            "next_cursor": nullable(STR),
            "links": obj({"next": nullable(STR)}),
        }
    )


#: A string without NUL (refused anywhere in a spec).
_NO_NUL = "^[^\\u0000]*$"


def _limits_text(settings: Settings) -> str:
    """The rules across fields and the server's ceilings, which JSON Schema cannot state."""
    return (
        "The outline of a sweep spec; the server checks the full rules and answers 422 with "
        "every problem. Beyond the outline: dataset is required unless trainable names an "
        "installed training function (one that is not installed is refused); exactly one "
        "of dataset.name or dataset.path; "
        "dataset.path inside the server's datasets folder (relative, or absolute inside it; "
        "no ~, no .., no symlink out): a .npz, .csv or .parquet file, or for a Caffe net an "
        ".npz file or a folder of PNG/JPEG files by class; every integer within 64 bits, "
        "every number finite, no string holding NUL, no key given twice (400); at most "
        f"{settings.api_max_trials:,} trials (and limits.max_trials); training.epochs at "
        f"most {settings.api_max_epochs:,}; execution.parallel.world_size at most "
        f"{settings.max_world_size}; at most {settings.max_model_parameters:,} estimated "
        "model parameters; a synthetic set's samples x features at most "
        f"{settings.max_dataset_elements:,}; epochs x the dataset's rows at most "
        f"{settings.max_epoch_samples:,}; a description of at most "
        f"{settings.max_description_bytes:,} UTF-8 bytes; a Caffe net's and solver's texts "
        f"at most {settings.max_prototxt_bytes:,} bytes each, every distinct net built "
        "(422 naming the layer)."
    )


def _spec_schema(settings: Settings) -> dict[str, Any]:
    """The outline of a sweep spec; the full rules are checked by the server (422)."""
    return obj(
        {
            "name": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": _NO_NUL},
            "description": {"type": "string", "maxLength": settings.max_description_bytes,
                            "pattern": _NO_NUL},
            **{section: {"type": ["object", "null"]} for section in SECTIONS},
            "trainable": {"type": "string", "pattern": NAME_PATTERN,
                          "description": "an installed training function (the "
                          "sweepstack.trainables entry point); then params is its settings, "
                          "dataset is optional, model does not apply"},
            "params": {"type": ["object", "null"]},
            "caffe": obj(
                {"net_text": {"type": "string", "description": "the net's prototxt text (the "
                              "CLI reads a caffe.net path into it; the API reads no files), "
                              f"at most {settings.max_prototxt_bytes:,} UTF-8 bytes"},
                 "solver_text": {"type": "string", "description": "the solver.prototxt "
                                 f"text, at most {settings.max_prototxt_bytes:,} UTF-8 bytes"},
                 "net_source": {"type": "string", "maxLength": 300},
                 "solver_source": {"type": "string", "maxLength": 300},
                 "resize": {"type": "array", "items": {"type": "integer", "minimum": 1,
                                                       "maximum": 4096},
                            "minItems": 2, "maxItems": 2},
                 "layers": {"type": "object", "description": "dimensions by layer name "
                            "(caffe.layers.<layer>.<field>)"},
                 "solver_params": {"type": "object", "description": "dimensions over "
                                   "solver fields (caffe.solver_params.<field>)"}},
                required=["net_text", "solver_text"], additionalProperties=False,
                description="a Caffe net and its solver (then model does not apply, "
                "dataset is required)",
            ),
            "objective": obj(
                {"metric": {"type": "string", "pattern": KEY_PATTERN,
                            "description": "one of " + ", ".join(METRICS)
                            + "; for a trainable, any metric it reports"},
                 "direction": {"enum": ["minimize", "maximize", "min", "max"]}},
                required=[], additionalProperties=False,
            ),
            "search": obj(
                {"algorithm": {"enum": ["grid", "random"]},
                 "trials": {"type": ["integer", "null"], "minimum": 1,
                            "maximum": settings.api_max_trials},
                 "seed": {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}},
                required=[], additionalProperties=False,
            ),
            "limits": obj(
                {"max_trials": {"type": "integer", "minimum": 1, "maximum": 1_000_000}},
                required=[], additionalProperties=False,
            ),
        },
        required=["name"],
        additionalProperties=False,
        description=_limits_text(settings),
        **{"x-limits": {
            "body_bytes": settings.api_max_body_bytes,
            "trials": settings.api_max_trials,
            "epochs": settings.api_max_epochs,
            "world_size": settings.max_world_size,
            "model_parameters": settings.max_model_parameters,
            "dataset_elements": settings.max_dataset_elements,
            "epoch_samples": settings.max_epoch_samples,
            "description_bytes": settings.max_description_bytes,
            "prototxt_bytes": settings.max_prototxt_bytes,
        }},
    )  # fmt: skip


EXAMPLE_SPEC = {
    "name": "example",
    "dataset": {"name": "iris"},
    "model": {"hidden_units": [16, 32], "activation": ["relu", "tanh"]},
    "training": {"epochs": 5},
    "objective": {"metric": "val_accuracy", "direction": "maximize"},
}

ERRORS = {
    "400": "A query parameter, path value or body key is unknown, malformed or an operator; "
    "a body that is not plain JSON or YAML (a key given twice, NUL, a 4,300-digit number)",
    "401": "No bearer token, or one the server does not know",
    "403": "Not allowed: priority high without an admin's allowance, or an admin's route",
    "404": "No such sweep or trial, or it belongs to someone else; for a trial's model, also "
    "a trial of the caller's with no kept model (details.reason: not_complete, not_kept, gone)",
    "409": "The sweep's state forbids it (active trials, or cancelled)",
    "413": "The body is over the size limit, with a Content-Length or chunked",
    "415": "The body is neither JSON nor YAML",
    "422": "The spec breaks its rules, expands past the trial limit, or asks for more than "
    "this server allows (see the SweepSpec schema's description and x-limits)",
    "429": "Too many failed authentications from this address (retry after Retry-After "
    "seconds), or a submit over one of the user's quotas (details: quota, limit, used)",
    "503": "The store or the broker did not answer",
}


def _errors(*statuses: str) -> dict[str, Any]:
    return {status: {"$ref": f"#/components/responses/E{status}"} for status in statuses}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _query(name: str, schema: dict[str, Any], description: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema,
            "description": description, **extra}  # fmt: skip


def _parameters(settings: Settings) -> dict[str, Any]:
    sort_re = "|".join([*TOP_LEVEL_SORTS, _PATHS_RE, rf"result\.{_NAME_RE}"])
    return {
        "SweepId": {"name": "sweep_id", "in": "path", "required": True, "schema": STR},
        "TrialId": {"name": "trial_id", "in": "path", "required": True, "schema": STR},
        "UserName": {"name": "name", "in": "path", "required": True, "schema": STR},
        "Limit": _query(
            "limit",
            {"type": "integer", "minimum": 1, "maximum": settings.api_max_page_size},
            f"Page size (default {settings.api_page_size}).",
        ),
        "Cursor": _query("cursor", STR, "The next_cursor of the previous page."),
        "State": _query(
            "state", {"type": "array", "items": {"enum": STATES}},
            "Only trials in these states (repeat, or comma-separate).",
            style="form", explode=True,
        ),
        "Param": _query(
            "param",
            {"type": "array", "items": {"type": "string", "pattern": _PARAM_RE}},
            "section.key:value (section.sub.key:value in a sub-section, e.g. "
            "execution.parallel.tau:5); numbers, true, false and null are read as such, "
            "the rest as text.",
            style="form", explode=True,
        ),
        "Sort": _query("sort", {"type": "string", "pattern": f"^({sort_re})$"},
                       "index (default), objective, result.<metric>, a parameter, ..."),
        "Order": _query("order", {"enum": ["asc", "desc"]}, "Sort order (default asc)."),
        "Format": _query("format", {"enum": ["csv", "jsonl"]}, "Export format (default csv)."),
        "Reference": _query(
            "reference", STR, "The hypervolume's reference point, one number per objective, "
            "comma-separated, in the objectives' units (default: the feasible trials' worst "
            "values moved out by a tenth of their range)."),
        "Front": _query("front", {"enum": ["true", "false"]},
                        "true: only the trials on the Pareto front (one page, by the first "
                        "objective)."),
    }  # fmt: skip


def _op(summary: str, ok: dict[str, Any], errors: tuple[str, ...], **extra: Any) -> dict:
    if "401" in errors:  # a wrong token counts towards the address's throttle (web.auth)
        errors = (*errors, "429")
    op = {"summary": summary, "responses": {**ok, **_errors(*errors)}, **extra}
    if "401" in errors:
        op["security"] = [{"bearer": []}]
    return op


def _params(*names: str) -> list[dict[str, str]]:
    return [{"$ref": f"#/components/parameters/{name}"} for name in names]


def _paths() -> dict[str, Any]:
    sweep = _params("SweepId")
    common = ("400", "401", "404", "503")
    spec_body = {
        "required": True,
        "content": {
            media: {"schema": ref("SweepSpec"), "example": EXAMPLE_SPEC}
            for media in ("application/json", "application/yaml", "application/x-yaml", "text/yaml")
        },
    }
    export = {
        "description": "One row per trial, streamed",
        "content": {"text/csv": {"schema": STR}, "application/x-ndjson": {"schema": STR}},
    }
    model_file = {
        "description": "The model's weights and its trial's config (safetensors; "
        "sweepstack.load_model reads it), streamed",
        "headers": {
            "ETag": {"schema": STR, "description": "the file's SHA-256, quoted"},
            "Content-Disposition": {"schema": STR,
                                    "description": "attachment; filename=<trial>.safetensors"},
        },
        "content": {"application/octet-stream": {"schema": {
            "type": "string", "contentMediaType": "application/octet-stream"}}},
    }  # fmt: skip
    return {
        f"{PREFIX}/sweeps": {
            "post": _op(
                "Submit a sweep spec; its trials are stored and enqueued",
                {"201": _json(ref("SweepCreated"), "The sweep was stored and enqueued")},
                ("400", "401", "403", "413", "415", "422", "503"), requestBody=spec_body,
            ),
            "get": _op(
                "The caller's sweeps, newest first", {"200": _json(ref("SweepPage"), "A page")},
                ("400", "401", "503"), parameters=_params("Limit", "Cursor"),
            ),
        },
        f"{PREFIX}/sweeps/{{sweep_id}}": {
            "get": _op("A sweep with counts, best trial, throughput and ETA",
                       {"200": _json(ref("SweepDetail"), "The sweep")}, common, parameters=sweep),
            "delete": _op("Delete a sweep, its trials, metrics and artifacts",
                          {"200": _json(ref("Deleted"), "Deleted")}, (*common, "409"),
                          parameters=sweep),
        },
        f"{PREFIX}/shares": {
            "get": _op("The caller's active sweeps (an admin's: all) with their fair share of "
                       "the workers now, place in line, priority and weight",
                       {"200": _json(ANY_OBJ, "The shares")}, ("400", "401", "503")),
        },
        f"{PREFIX}/users/{{name}}": {
            "get": _op("A user's weight, allowance of high priority, quotas and use (the "
                       "user or an admin)", {"200": _json(ANY_OBJ, "The user")}, common,
                       parameters=_params("UserName")),
            "put": _op("Set a user's weight, high_priority or quotas (admins)",
                       {"200": _json(ANY_OBJ, "The user")}, (*common, "403", "422"),
                       parameters=_params("UserName"),
                       requestBody={"required": True, "content": {"application/json": {
                           "schema": ANY_OBJ}}}),
        },
        f"{PREFIX}/sweeps/{{sweep_id}}/weight": {
            "put": _op("Set a sweep's weight among its owner's sweeps (admins)",
                       {"200": _json(ANY_OBJ, "The weight")}, (*common, "403", "422"),
                       parameters=sweep,
                       requestBody={"required": True, "content": {"application/json": {
                           "schema": ANY_OBJ}}}),
        },
        f"{PREFIX}/sweeps/{{sweep_id}}/cancel": {
            "post": _op("Cancel queued trials, ask running ones to stop",
                        {"200": _json(ref("Cancelled"), "Cancelled")}, common, parameters=sweep),
        },
        f"{PREFIX}/sweeps/{{sweep_id}}/pause": {
            "post": _op("Pause: nothing new starts, running trials finish",
                        {"200": _json(ref("Paused"), "Paused")}, (*common, "409"),
                        parameters=sweep),
        },
        f"{PREFIX}/sweeps/{{sweep_id}}/resume": {
            "post": _op("Resume a paused sweep",
                        {"200": _json(ref("Paused"), "Resumed")}, common, parameters=sweep),
        },
        f"{PREFIX}/sweeps/{{sweep_id}}/change": {
            "post": _op("Change a sweep's spec: more trials, values added, a range narrowed",
                        {"200": _json(ref("SweepChanged"), "Changed; the scheduler feeds the "
                                      "new spec from its next pass")},
                        (*common, "409", "422"), parameters=sweep,
                        requestBody={"required": True, "content": {"application/json": {
                            "schema": ref("SweepChange"),
                            "example": {"trials": 60, "add": {"model.hidden_units": [512]}}}}}),
        },
        f"{PREFIX}/sweeps/{{sweep_id}}/retry": {
            "post": _op("Queue failed and stale trials again",
                        {"200": _json(ref("Retried"), "Queued again")}, (*common, "409"),
                        parameters=sweep),
        },
        f"{PREFIX}/sweeps/{{sweep_id}}/trials": {
            "get": _op("A page of the sweep's trials", {"200": _json(ref("TrialPage"), "A page")},
                       common,
                       parameters=sweep + _params("State", "Param", "Sort", "Order", "Limit",
                                                  "Cursor", "Front")),
        },
        f"{PREFIX}/sweeps/{{sweep_id}}/export": {
            "get": _op("Every trial as CSV or JSON Lines", {"200": export}, common,
                       parameters=sweep + _params("Format")),
        },
        f"{PREFIX}/sweeps/{{sweep_id}}/analysis": {
            "get": _op("What the sweep found: plateaus, cost laws, importance, the front",
                       {"200": _json(ref("Analysis"), "The analysis")}, common, parameters=sweep),
        },
        f"{PREFIX}/sweeps/{{sweep_id}}/front": {
            "get": _op("The Pareto front of the sweep's objectives, and its hypervolume",
                       {"200": _json(ref("Front"), "The front")}, common,
                       parameters=sweep + _params("Reference")),
        },
        f"{PREFIX}/sweeps/{{sweep_id}}/models": {
            "get": _op("The sweep's kept models, best first",
                       {"200": _json(ref("KeptModels"), "The kept models")}, common,
                       parameters=sweep),
        },
        f"{PREFIX}/trials/{{trial_id}}/model": {
            "get": _op("The trial's kept model: a safetensors file, streamed",
                       {"200": model_file, "304": {"description": "If-None-Match named the "
                                                   "file's ETag: unchanged"}},
                       common, parameters=_params("TrialId")),
        },
        f"{PREFIX}/trials/{{trial_id}}": {
            "get": _op("A trial's record and per-epoch metrics",
                       {"200": _json(ref("TrialDetail"), "The trial")}, common,
                       parameters=_params("TrialId")),
        },
        f"{PREFIX}/workers": {
            "get": _op("Online workers, their device and running trials",
                       {"200": _json(ref("Workers"), "The workers")}, ("401", "503")),
        },
        f"{PREFIX}/health": {
            "get": _op("Store and broker reachability and latency",
                       {"200": _json(ref("Health"), "Both answer")}, ("503",), security=[]),
        },
        f"{PREFIX}/openapi.json": {
            "get": _op("This document", {"200": _json(ANY_OBJ, "OpenAPI 3.1")}, (), security=[]),
        },
    }  # fmt: skip


def document(settings: Settings) -> dict[str, Any]:
    """The whole OpenAPI document, with this server's limits."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Sweepstack",
            "version": "1",
            "description": "Submit, watch, cancel, retry and export hyperparameter sweeps. "
            "Every error has the body {code, message, details}.",
        },
        "paths": _paths(),
        "components": {
            "schemas": _schemas(settings),
            "parameters": _parameters(settings),
            "responses": {f"E{s}": _json(ref("Error"), text) for s, text in ERRORS.items()},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


@blueprint.get("/openapi.json")
def served() -> dict[str, Any]:
    """The document, at /api/v1/openapi.json."""
    accept(())
    return document(context().settings)


def register_root(app: Flask) -> None:
    """Serve the document at /openapi.json as well."""

    def root() -> dict[str, Any]:
        accept(())
        return document(current_app.extensions["sweepstack"].settings)

    app.add_url_rule("/openapi.json", "openapi_root", root, methods=["GET"])
