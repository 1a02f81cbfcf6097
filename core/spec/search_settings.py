"""A stored sweep's search and pruning settings as readers show them (API, dashboard).

The spec a sweep keeps (``sweep["spec"]``) is the document as submitted, so its ``search``
and ``pruning`` sections hold only what the user wrote (`core.spec.search`: options flat beside
``algorithm``), and sweeps stored before those sections existed have neither. These
functions read them defensively and fill in what a reader needs to know: the algorithm
(``grid`` / ``none`` when absent), the budget, parallelism and seed, the pruned metric
(the objective's when left out) and the options given, by Optuna's names. Pure functions
of a document: nothing here reads the store or imports Optuna.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The search keys that are settings of every algorithm, not a sampler's options (the
#: warm start and first points are in the spec, shown with it).
_SEARCH_KEYS = ("algorithm", "trials", "parallelism", "seed", "warm_start", "first")
_PRUNING_KEYS = ("algorithm", "metric")
#: How the header names each algorithm (Optuna's own capitalisation).
_NAMES = {
    "grid": "Grid", "random": "Random", "tpe": "TPE", "cmaes": "CMA-ES", "gp": "GP",
    "qmc": "QMC", "median": "median", "percentile": "percentile", "asha": "ASHA",
    "hyperband": "Hyperband", "threshold": "threshold", "patient": "patient",
}  # fmt: skip


def _section(spec: Mapping[str, Any] | None, name: str) -> Mapping[str, Any]:
    section = (spec or {}).get(name)
    return section if isinstance(section, Mapping) else {}


def _options(section: Mapping[str, Any], settings: tuple[str, ...]) -> dict[str, Any]:
    """Every other key given (not None), and those of a nested ``options`` mapping."""
    nested = section.get("options")
    out = dict(nested) if isinstance(nested, Mapping) else {}
    out.update(
        {k: v for k, v in section.items() if k not in (*settings, "options") and v is not None}
    )
    return dict(sorted(out.items()))


def search_settings(sweep: Mapping[str, Any]) -> dict[str, Any]:
    """``{algorithm, trials, parallelism, seed, options}`` of a sweep document.

    ``trials`` is the budget (None for a grid: its size is the sweep's ``trial_count``);
    ``parallelism`` None means the scheduler chooses from the workers online.
    """
    section = _section(sweep.get("spec"), "search")
    algorithm = section.get("algorithm")
    return {
        "algorithm": algorithm if isinstance(algorithm, str) and algorithm else "grid",
        "trials": section.get("trials"),
        "parallelism": section.get("parallelism"),
        "seed": section.get("seed", 0),
        "options": _options(section, _SEARCH_KEYS),
    }


def pruning_settings(sweep: Mapping[str, Any]) -> dict[str, Any]:
    """``{algorithm, metric, options}`` of a sweep document: ``none`` when it has no
    pruning section; ``metric`` the objective's metric when the section names none."""
    section = _section(sweep.get("spec"), "pruning")
    algorithm = section.get("algorithm")
    metric = section.get("metric") or (sweep.get("objective") or {}).get("metric")
    return {
        "algorithm": algorithm if isinstance(algorithm, str) and algorithm else "none",
        "metric": metric,
        "options": _options(section, _PRUNING_KEYS),
    }


def describe(search: Mapping[str, Any], pruning: Mapping[str, Any], trial_count: int) -> str:
    """One line for a sweep's header: ``TPE · 40 trials · parallelism 4 · pruner ASHA``."""
    algorithm = search["algorithm"]
    trials = search.get("trials") or trial_count
    parts = [_NAMES.get(algorithm, algorithm), f"{trials:,} trial{'s' if trials != 1 else ''}"]
    if search.get("parallelism"):
        parts.append(f"parallelism {search['parallelism']}")
    if pruning["algorithm"] == "none":
        parts.append("no pruning")
    else:
        parts.append(f"pruner {_NAMES.get(pruning['algorithm'], pruning['algorithm'])}")
    return " · ".join(parts)
