"""Fused training is faithful: each fused model's epochs equal its unfused `train()`'s.

Model by model, in float64 on the CPU, within 1e-5 (they agree to ~1e-15 in practice):
every optimiser, padded widths, per-model hyperparameters, schedules, dropout, batch
norm, init schemes, regression. Failures and stops stay per model.
"""

from __future__ import annotations

from typing import Any

import pytest

from core.errors import TrainingError
from core.spec.config import TrialConfig
from tests.workers.training.test_loop import CLASSIFICATION_KEYS
from workers.training import TrainResult, fused_plan, train
from workers.training import fused as fused_module
from workers.training.fused import FusedEpoch, check_compatible, train_fused
from workers.training.fused_optim import KINDS

TOLERANCE = 1e-5
REGRESSION = {"name": "synthetic_regression", "samples": 300, "features": 8}


def _config(**sections: dict[str, Any]) -> TrialConfig:
    """A quick float64 digits trial; each keyword updates one section."""
    data: dict[str, dict[str, Any]] = {
        "dataset": {"name": "digits"},
        "model": {"hidden_layers": 2, "hidden_units": 32},
        "training": {"optimizer": "adam", "lr": 0.003, "batch_size": 64, "epochs": 2, "seed": 0},
        "execution": {"device": "cpu", "dtype": "float64"},
    }
    for name, values in sections.items():
        if name == "dataset":
            data[name] = values
        else:
            data[name].update(values)
    return TrialConfig.from_dict(data)


def _assert_same(outcome: TrainResult | TrainingError, config: TrialConfig) -> None:
    """`outcome` agrees with `train(config)` row by row, within TOLERANCE."""
    alone = train(config)
    assert isinstance(outcome, TrainResult), outcome
    assert len(outcome.metrics) == len(alone.metrics) == config.training.epochs
    for mine, theirs in zip(outcome.metrics, alone.metrics, strict=True):
        assert set(mine) == set(theirs)
        for key, value in theirs.items():
            if key not in ("epoch_seconds", "train_seconds"):
                assert mine[key] == pytest.approx(value, abs=TOLERANCE, rel=0), key
    assert outcome.param_count == alone.param_count
    assert outcome.seed == alone.seed
    assert outcome.dataset_fingerprint == alone.dataset_fingerprint
    assert outcome.best == pytest.approx(alone.best, abs=TOLERANCE)


def _assert_faithful(configs: list[TrialConfig]) -> list[TrainResult]:
    """Train fused and alone; every model's rows agree, and on_epoch saw each row once."""
    reported: dict[int, list[tuple[int, dict[str, float]]]] = {}
    fused = train_fused(
        configs, on_epoch=lambda k, epoch, row: reported.setdefault(k, []).append((epoch, row))
    )
    for k, (config, outcome) in enumerate(zip(configs, fused, strict=True)):
        _assert_same(outcome, config)
        assert isinstance(outcome, TrainResult)
        assert [row for _, row in reported[k]] == outcome.metrics
        assert [epoch for epoch, _ in reported[k]] == list(range(1, config.training.epochs + 1))
    return fused  # type: ignore[return-value]


@pytest.mark.parametrize("optimizer", KINDS)
def test_every_optimizer_with_padded_widths_matches_unfused(optimizer: str) -> None:
    # Widths 20, 32 and 64 in one group: the first two are padded to 64 and masked.
    configs = [
        _config(
            model={"hidden_units": width},
            training={
                "optimizer": optimizer,
                "lr": lr,
                "seed": seed,
                "weight_decay": decay,
                "momentum": momentum,
                "beta1": beta1,
                "beta2": beta2,
            },
        )
        for width, lr, seed, decay, momentum, beta1, beta2 in (
            (20, 0.01, 0, 0.0, 0.9, 0.9, 0.999),
            (32, 0.003, 1, 0.01, 0.5, 0.8, 0.99),
            (64, 0.03, 2, 0.001, 0.7, 0.95, 0.9),
        )
    ]
    results = _assert_faithful(configs)
    assert all(set(r.final) == CLASSIFICATION_KEYS for r in results)


def test_per_layer_widths_sigmoid_and_schedules_match_unfused() -> None:
    # sigmoid(0) = 0.5: padding is exact only because the mask comes after the activation.
    configs = [
        _config(
            model={"hidden_layers": 3, "hidden_units": widths, "activation": "sigmoid"},
            training={"seed": seed, "epochs": 3, **schedule},
        )
        for seed, widths, schedule in (
            (3, [64, 16, 8], {"lr_schedule": "step", "lr_step_size": 1, "lr_gamma": 0.5}),
            (4, [10, 40, 30], {"lr_schedule": "cosine"}),
            (5, [64, 40, 30], {}),
        )
    ]
    results = _assert_faithful(configs)
    assert [row["lr"] for row in results[0].metrics] == pytest.approx([3e-3, 1.5e-3, 7.5e-4])


def test_dropout_batch_norm_and_init_schemes_match_unfused() -> None:
    configs = [
        _config(
            model={"batch_norm": True, "dropout": dropout, "init": init, "hidden_units": width},
            training={"seed": seed, "optimizer": "momentum", "lr": 0.05},
        )
        for seed, dropout, init, width in (
            (0, 0.0, "default", 32),
            (1, 0.3, "xavier_uniform", 24),
            (2, 0.1, "kaiming_normal", 32),
            (3, 0.5, "orthogonal", 16),
        )
    ]
    _assert_faithful(configs)


def test_regression_and_a_linear_model_match_unfused() -> None:
    _assert_faithful(
        [
            _config(dataset=REGRESSION, model={"hidden_layers": 0}, training={"seed": 0}),
            _config(dataset=REGRESSION, model={"hidden_layers": 0}, training={"seed": 1}),
        ]
    )
    _assert_faithful(
        [
            _config(dataset=REGRESSION, model={"activation": act}, training={"seed": seed})
            for seed, act in ((0, "tanh"), (1, "tanh"))
        ]
    )


def test_float32_stays_close_to_unfused() -> None:
    configs = [_config(execution={"dtype": "float32"}, training={"seed": s}) for s in (0, 1)]
    for config, outcome in zip(configs, train_fused(configs), strict=True):
        alone = train(config)
        assert isinstance(outcome, TrainResult)
        for mine, theirs in zip(outcome.metrics, alone.metrics, strict=True):
            assert mine["val_loss"] == pytest.approx(theirs["val_loss"], abs=1e-4)


def test_diverging_models_fail_alone_with_the_unfused_reasons() -> None:
    configs = [
        _config(
            dataset=REGRESSION,
            model={"activation": "relu"},
            training={"optimizer": "sgd", "lr": lr, "seed": seed, "epochs": 5},
        )
        for seed, lr in ((0, 0.01), (1, 50.0), (2, 100.0), (3, 0.02))
    ]
    ended: list[int] = []
    outcomes = train_fused(configs, on_done=lambda k, _: ended.append(k))
    for k, expected in ((1, "loss became inf at epoch 4"), (2, "validation loss became inf")):
        with pytest.raises(TrainingError) as alone:
            train(configs[k])
        failed = outcomes[k]
        assert isinstance(failed, TrainingError)
        assert failed.reason == alone.value.reason and failed.reason.startswith(expected)
    assert ended[:2] == [2, 1]  # each recorded as soon as it failed, before the others ended
    _assert_same(outcomes[0], configs[0])
    _assert_same(outcomes[3], configs[3])


def test_a_bad_member_fails_alone_and_a_stopped_one_ends_early() -> None:
    configs = [
        _config(training={"optimizer": "nesterov", "momentum": m, "seed": s, "epochs": 4})
        for s, m in ((0, 0.0), (1, 0.9), (2, 0.5))
    ]
    seen: list[tuple[int, int]] = []
    outcomes = train_fused(
        configs,
        on_epoch=lambda k, epoch, _: seen.append((k, epoch)),
        should_stop=lambda k: k == 2 and (2, 2) in seen,
    )
    assert isinstance(outcomes[0], TrainingError)
    assert "training.momentum must be > 0 for the nesterov optimizer" in outcomes[0].reason
    _assert_same(outcomes[1], configs[1])
    stopped = outcomes[2]
    assert isinstance(stopped, TrainResult) and stopped.stopped_early
    assert stopped.epochs_completed == 2 and stopped.final == stopped.metrics[-1]


def test_a_member_stopped_at_an_epoch_end_leaves_and_the_group_computes_less() -> None:
    configs = [
        _config(training={"seed": s, "epochs": 5}, model={"hidden_units": 64}) for s in range(3)
    ]
    ends: list[FusedEpoch] = []
    outcomes = train_fused(
        configs,
        should_stop=lambda k: k == 1 and len(ends) >= 2,  # asked at the end of epoch 2
        on_epoch_end=ends.append,
    )
    assert [e.epoch for e in ends] == [1, 2, 3, 4, 5]
    assert [e.members for e in ends] == [(0, 1, 2)] * 2 + [(0, 2)] * 3
    assert ends[2].parameters == ends[1].parameters * 2 // 3  # one model fewer to compute
    stopped = outcomes[1]
    assert isinstance(stopped, TrainResult) and stopped.stopped_early
    assert [row["epoch"] for row in stopped.metrics] == [1, 2]
    _assert_same(outcomes[0], configs[0])
    _assert_same(outcomes[2], configs[2])


def test_zero_epochs_evaluates_each_untrained_model() -> None:
    configs = [_config(training={"epochs": 0, "seed": s}) for s in (0, 1)]
    for config, outcome in zip(configs, train_fused(configs), strict=True):
        alone = train(config)
        assert isinstance(outcome, TrainResult) and outcome.metrics == []
        assert outcome.final["val_loss"] == pytest.approx(alone.final["val_loss"], abs=TOLERANCE)
        assert set(outcome.final) == set(alone.final)


def test_a_group_too_big_for_memory_trains_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    configs = [_config(training={"seed": s, "epochs": 1}) for s in range(5)]
    monkeypatch.setattr(fused_module, "fit_count", lambda _configs, _shared: 2)
    chunks: list[int] = []
    original = fused_module.FusedMLP

    def recording(*args: Any, **kwargs: Any) -> Any:
        model = original(*args, **kwargs)
        chunks.append(model.count)
        return model

    monkeypatch.setattr(fused_module, "FusedMLP", recording)
    _assert_faithful(configs)
    assert sorted(chunks) == [1, 2, 2]


def test_fit_count_follows_free_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    configs = [_config(training={"seed": s}) for s in range(4)]
    shared = fused_plan.GroupData(configs[0], None)
    monkeypatch.setattr(fused_plan, "available_memory", lambda _device: 1 << 40)
    assert fused_plan.fit_count(configs, shared) == 4
    monkeypatch.setattr(fused_plan, "available_memory", lambda _device: 1 << 20)
    assert fused_plan.fit_count(configs, shared) == 1
    assert fused_plan.chunks(5, 2) == [[0, 1], [2], [3, 4]]
    assert fused_plan.chunks(4, 4) == [[0, 1, 2, 3]]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"model": {"activation": "tanh"}}, "model.activation"),
        ({"model": {"hidden_layers": 3}}, "model.hidden_layers"),
        ({"training": {"optimizer": "sgd"}}, "training.optimizer"),
        ({"training": {"batch_size": 32}}, "training.batch_size"),
        ({"training": {"epochs": 3}}, "training.epochs"),
        ({"dataset": {"name": "iris"}}, "dataset"),
    ],
)
def test_incompatible_trials_are_refused_naming_the_field(
    change: dict[str, dict[str, Any]], field: str
) -> None:
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        check_compatible([_config(), _config(**change)])


def test_float16_is_never_fused() -> None:
    with pytest.raises(ValueError, match="float16"):
        check_compatible([_config(execution={"dtype": "float16"})])
