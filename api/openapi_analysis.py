"""The OpenAPI schema of a sweep's analysis (``GET /api/v1/sweeps/{id}/analysis``), kept
beside `api.openapi`, which puts it in the document: the value `core.analysis` computes."""

from __future__ import annotations

from typing import Any

_STR = {"type": "string"}
_INT = {"type": "integer"}
_NUM = {"type": "number"}
_BOOL = {"type": "boolean"}
_OBJ = {"type": "object"}
_NUM_OR_NULL = {"type": ["number", "null"]}


def _obj(props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": props,
            "required": list(props) if required is None else required}  # fmt: skip


def _array(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


_POINT = _obj({"value": _NUM, "n": _INT, "mean": _NUM, "std": _NUM, "min": _NUM, "max": _NUM,
               "best": _NUM})  # fmt: skip
_RETURNS = _obj(
    {"param": _STR, "name": _STR, "status": {"enum": ["plateau", "improving", "flat"]},
     "at": _NUM_OR_NULL, "gain": _NUM, "rise": _NUM, "threshold": _NUM, "curve": _array(_POINT),
     "text": _STR},
)  # fmt: skip
_LAW = _obj(
    {"target": {"enum": ["train_seconds", "seconds_per_epoch", "param_count"]},
     "against": {"enum": ["hidden_layers", "hidden_units", "param_count"]},
     "chosen": {"enum": ["linear", "power"]}, "r2": _NUM, "linear": _OBJ,
     "power": {"type": ["object", "null"]}, "trials": _INT, "text": _STR},
)  # fmt: skip

#: The analysis: every key `core.analysis.report.analyse` always sets.
ANALYSIS = _obj(
    {
        "version": _STR,
        "sweep": _obj({"id": _STR, "name": _STR, "metric": _STR, "direction": _STR,
                       "trial_count": _INT, "counts": _OBJ, "analysed": _INT, "live": _BOOL}),
        "scale": _obj({"fraction": _BOOL, "min_gain": _NUM, "unit": _STR}),
        "parameters": _array(_obj({"path": _STR, "kind": {"enum": ["numeric", "categorical"]},
                                   "log": _BOOL, "seed": _BOOL})),
        "noise": _obj({"std": _NUM_OR_NULL, "configs": _INT, "trials": _INT}),
        "states": {"type": "object", "additionalProperties": _INT},
        "returns": _array(_RETURNS),
        "costs": _obj({"workers": _OBJ, "laws": _array(_LAW), "fused": _INT}),
        "importance": _obj({"available": _BOOL, "fanova": _OBJ, "ped_anova": _OBJ,
                            "note": _STR}, required=["available"]),
        "front": _obj({"tolerance": _NUM, "text": _array(_STR)}),
        "findings": _array(_STR),
    },
    required=None,
)  # fmt: skip
ANALYSIS["description"] = (
    "What the sweep found, from its complete trials: the seed noise; per numeric parameter "
    "the objective's curve and where it plateaus; cost laws (train time, time per epoch and "
    "parameter count against depth, width and parameter count; linear or power law, R²) "
    "after worker-speed normalisation; Optuna's fANOVA and PED-ANOVA importances; the "
    "accuracy-cost fronts; and the findings in sentences."
)
