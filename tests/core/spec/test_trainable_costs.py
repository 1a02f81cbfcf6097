"""A training function's declared cost against the server's ceilings
(`core.spec.trainable_costs`), through the shipped `digits_cnn` and `digits_sgd`."""

from __future__ import annotations

from core.settings import Settings
from core.spec.limits import spec_limit_problems
from core.spec.sweep import load_spec


def _problems(name: str, params: dict) -> dict[str, str]:
    """The problems by path, their messages joined."""
    spec = load_spec({"name": "t", "trainable": name, "dataset": {"name": "digits"},
                      "params": params})  # fmt: skip
    out: dict[str, str] = {}
    for problem in spec_limit_problems(spec, Settings()):
        out[problem.path] = out.get(problem.path, "") + problem.message + "\n"
    return out


def test_the_worst_combination_names_the_parameter_that_makes_it() -> None:
    problems = _problems("digits_cnn", {"hidden": [16, 1e8], "lr": [0.1, 0.01]})
    assert list(problems) == ["params.hidden"]
    assert "got 26,700,000,170 (as sweepstack_examples.digits_cnn declares it, when " in (
        problems["params.hidden"]
    )
    wide = _problems("digits_cnn", {"channels": {"int": [1, 100_000]}, "hidden": 64})
    assert list(wide) == ["params.channels"]


def test_the_shipped_examples_within_the_ceilings() -> None:
    assert _problems("digits_cnn", {"channels": [8, 16], "conv_layers": [1, 2]}) == {}
    assert _problems("digits_sgd", {"alpha": [1e-4, 1e-3]}) == {}
