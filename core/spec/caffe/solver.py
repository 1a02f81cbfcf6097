"""Caffe's solver.prototxt: the fields a trial trains by, with Caffe's defaults and rules.

`parse_solver` reads a solver `Message` (from `core.spec.caffe.prototxt.parse`) into a frozen
`SolverConfig`, or raises `SpecError` with one `Problem("caffe.solver.<field>", ...)` per
broken rule, each naming the file, line and column, the rule and the value. `learning_rate`
gives the base rate of an iteration for every `lr_policy`, with Caffe's formulas (the
worker multiplies it by each blob's ``lr_mult``); `evaluation_iterations` the iterations
at which Caffe runs the TEST net.

Defaults are those of Caffe's ``SolverParameter`` (caffe.proto): ``type: "SGD"``,
``momentum2: 0.999``, ``delta: 1e-8``, ``rms_decay: 0.99``, ``regularization_type: "L2"``,
``iter_size: 1``, ``clip_gradients: -1`` (off), ``test_initialization: true``,
``random_seed: -1`` (the trial's own seed), ``momentum``/``weight_decay``/``test_interval``
0. Where Caffe has no default and would train on zeros or stop at run time, the field is
required here: ``base_lr``, ``max_iter``, ``lr_policy`` (Caffe aborts on an empty one),
``gamma`` for step/exp/inv/multistep/sigmoid, ``power`` for inv/poly, ``stepsize`` for
step and ``stepvalue`` for multistep. Fields a policy or solver type does not use are not
checked, so a sweep over ``lr_policy`` or ``type`` may set them all.

The solver type is ``type`` (``SGD``, ``Nesterov``, ``AdaGrad``, ``RMSProp``, ``AdaDelta``,
``Adam``) or the older enum ``solver_type`` (``SGD``, ``NESTEROV``, ``ADAGRAD``,
``RMSPROP``, ``ADADELTA``, ``ADAM``, or 0-5); not both, as Caffe's upgrade refuses.

Ignored on purpose (they steer Caffe's process, not the training): ``display``,
``snapshot``, ``snapshot_prefix``,
``snapshot_diff``, ``snapshot_format``, ``snapshot_after_train``, ``solver_mode`` and
``device_id`` (the platform places the trial), ``debug_info``, ``layer_wise_reduce``,
``test_compute_loss`` (test losses are always reported); ``average_loss`` is kept, for a
loop that smooths its train loss as Caffe's display does. ``train_state`` and ``test_state``
(a NetState: ``level``, ``stage``) select the layers of the TRAIN and the TEST net with the
net's own ``state`` (`core.spec.caffe.phases`). Refused: ``weights`` (no file is read on a
worker), more than one test net (``test_iter``, ``test_state``, ``test_net``), a state whose
``phase`` is the other net's, and any field Caffe does not have.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from core.errors import SpecError
from core.spec.caffe.field_reader import FieldReader
from core.spec.caffe.fields import check
from core.spec.caffe.prototxt import Message

SOLVER_TYPES = ("SGD", "Nesterov", "AdaGrad", "RMSProp", "AdaDelta", "Adam")
#: The older ``solver_type`` enum, by name and by number, as caffe.proto numbers it.
LEGACY_SOLVER_TYPES = {
    "SGD": "SGD",
    "NESTEROV": "Nesterov",
    "ADAGRAD": "AdaGrad",
    "RMSPROP": "RMSProp",
    "ADADELTA": "AdaDelta",
    "ADAM": "Adam",
}
LR_POLICIES = ("fixed", "step", "exp", "inv", "multistep", "poly", "sigmoid")
REGULARIZATION_TYPES = ("L2", "L1")

#: Ceilings: a trial trains at most this many iterations, accumulates at most this many
#: batches per iteration, evaluates at most this many times and batches per evaluation.
MAX_ITER_LIMIT = 1_000_000
MAX_ITER_SIZE = 1024
MAX_EVALUATIONS = 10_000
MAX_TEST_ITER = 100_000

_GAMMA_POLICIES = ("step", "exp", "inv", "multistep", "sigmoid")
_POWER_POLICIES = ("inv", "poly")
_PATH = "caffe.solver"

# Every field of Caffe's SolverParameter: its kind, and whether it may repeat.
_FIELDS: dict[str, tuple[str, bool]] = {
    "net": ("str", False),
    "net_param": ("message", False),
    "train_net": ("str", False),
    "test_net": ("str", True),
    "train_net_param": ("message", False),
    "test_net_param": ("message", True),
    "train_state": ("message", False),
    "test_state": ("message", True),
    "test_iter": ("int", True),
    "test_interval": ("int", False),
    "test_compute_loss": ("bool", False),
    "test_initialization": ("bool", False),
    "base_lr": ("float", False),
    "display": ("int", False),
    "average_loss": ("int", False),
    "max_iter": ("int", False),
    "iter_size": ("int", False),
    "lr_policy": ("str", False),
    "gamma": ("float", False),
    "power": ("float", False),
    "momentum": ("float", False),
    "weight_decay": ("float", False),
    "regularization_type": ("str", False),
    "stepsize": ("int", False),
    "stepvalue": ("int", True),
    "clip_gradients": ("float", False),
    "snapshot": ("int", False),
    "snapshot_prefix": ("str", False),
    "snapshot_diff": ("bool", False),
    "snapshot_format": ("enum", False),
    "solver_mode": ("enum", False),
    "device_id": ("int", False),
    "random_seed": ("int", False),
    "type": ("str", False),
    "debug_info": ("bool", False),
    "snapshot_after_train": ("bool", False),
    "layer_wise_reduce": ("bool", False),
    "weights": ("str", True),
    "delta": ("float", False),
    "momentum2": ("float", False),
    "rms_decay": ("float", False),
    "solver_type": ("enum", False),
}
_REFUSED = {
    "weights": "loading pretrained weights is not supported (a worker reads no model "
    "files); remove it",
}


@dataclass(frozen=True)
class SolverConfig:
    """A solver.prototxt's training settings, validated, with Caffe's defaults filled in.

    `net`/`train_net`/`test_net` are paths as the file writes them (the spec code resolves
    them relative to the solver file); `net_param`/`train_net_param`/`test_net_param` are
    inline nets. At most one train net is given (Caffe's rule); the spec may give it instead.
    `random_seed` -1 means: use the trial's seed. `test_iter` 0: no test net is run.
    """

    base_lr: float
    lr_policy: str
    max_iter: int
    type: str = "SGD"
    gamma: float = 0.0
    power: float = 0.0
    stepsize: int = 0
    stepvalue: tuple[int, ...] = ()
    momentum: float = 0.0
    momentum2: float = 0.999
    delta: float = 1e-8
    rms_decay: float = 0.99
    weight_decay: float = 0.0
    regularization_type: str = "L2"
    clip_gradients: float = -1.0
    iter_size: int = 1
    test_iter: int = 0
    test_interval: int = 0
    test_initialization: bool = True
    average_loss: int = 1
    random_seed: int = -1
    net: str | None = None
    train_net: str | None = None
    test_net: str | None = None
    net_param: Message | None = None
    train_net_param: Message | None = None
    test_net_param: Message | None = None
    #: the NetState messages the TRAIN and TEST nets are built with (None: the net's own).
    train_state: Message | None = None
    test_state: Message | None = None
    source: str = "solver"

    def hyperparameters(self) -> dict[str, object]:
        """The settings that shape training, as plain data for a trial's record."""
        keys = (
            "type", "base_lr", "lr_policy", "gamma", "power", "stepsize", "stepvalue",
            "momentum", "momentum2", "delta", "rms_decay", "weight_decay",
            "regularization_type", "clip_gradients", "iter_size", "max_iter", "test_iter",
            "test_interval", "test_initialization", "random_seed",
        )  # fmt: skip
        out = {key: getattr(self, key) for key in keys}
        out["stepvalue"] = list(self.stepvalue)
        return out


def learning_rate(config: SolverConfig, iteration: int) -> float:
    """The base learning rate at `iteration` (0 for the first update), as Caffe's
    ``SGDSolver::GetLearningRate`` computes it for ``config.lr_policy``.

    multistep counts the step values already reached (Caffe advances one step per iteration
    past each value; with strictly increasing values, which `parse_solver` requires, the
    two agree). An overflowing power gives ``inf``.
    """
    base, gamma, policy = config.base_lr, config.gamma, config.lr_policy
    try:
        if policy == "fixed":
            return base
        if policy == "step":
            return base * gamma ** (iteration // config.stepsize)
        if policy == "exp":
            return base * gamma**iteration
        if policy == "inv":
            return base * (1.0 + gamma * iteration) ** (-config.power)
        if policy == "multistep":
            reached = sum(1 for value in config.stepvalue if iteration >= value)
            return base * gamma**reached
        if policy == "poly":
            return base * (1.0 - iteration / config.max_iter) ** config.power
        if policy == "sigmoid":
            exponent = -gamma * (iteration - config.stepsize)
            return 0.0 if exponent > 700 else base / (1.0 + math.exp(exponent))
    except (OverflowError, ZeroDivisionError):
        return math.inf
    raise ValueError(f"lr_policy {policy!r} is not one of {', '.join(LR_POLICIES)}")


def evaluation_iterations(config: SolverConfig) -> list[int]:
    """The iterations at which Caffe's solver runs the TEST net, in order.

    Before the update of each iteration divisible by ``test_interval`` (iteration 0 only when
    ``test_initialization``), and once more after the last update when ``max_iter`` is
    divisible by it, as ``Solver::Step`` and ``Solver::Solve`` do. None when
    ``test_interval`` is 0 (Caffe never tests then).
    """
    every = config.test_interval
    if every <= 0 or config.test_iter <= 0:
        return []
    first = 0 if config.test_initialization else every
    return list(range(first, config.max_iter + 1, every))


def parse_solver(msg: Message, source: str = "solver") -> SolverConfig:
    """Validate a solver message and fill in Caffe's defaults; `source` names the file in
    errors. Raises `SpecError` listing every broken rule."""
    reader = FieldReader(msg, source, _PATH)
    reader.check_names(_FIELDS, _REFUSED, "Caffe's SolverParameter")
    solver_type = _solver_type(reader)
    values: dict[str, object] = {"type": solver_type, "source": source}
    for name in (
        "base_lr", "gamma", "power", "momentum", "momentum2", "delta", "rms_decay",
        "weight_decay", "clip_gradients",
    ):  # fmt: skip
        value = reader.number(name)
        if value is not None:
            values[name] = value
    for name in (
        "max_iter", "stepsize", "iter_size", "test_interval", "average_loss", "random_seed",
    ):  # fmt: skip
        value = reader.integer(name)
        if value is not None:
            values[name] = value
    for name in ("lr_policy", "regularization_type", "net", "train_net"):
        value = reader.text(name)
        if value is not None:
            values[name] = value
    value = reader.flag("test_initialization")
    if value is not None:
        values["test_initialization"] = value
    values["stepvalue"] = tuple(reader.integers("stepvalue"))
    test_iter = reader.integers("test_iter")
    for name, items in (
        ("test_iter", test_iter),
        ("test_net", msg.getall("test_net")),
        ("test_net_param", msg.getall("test_net_param")),
        ("test_state", msg.getall("test_state")),
    ):
        if len(items) > 1:
            reader.fail(
                name,
                f"is written {len(items)} times; one test net is supported: keep the "
                "test_state and test_iter of the one to report",
            )
    _read_states(reader, values)
    if test_iter:
        values["test_iter"] = test_iter[0]
    if msg.has("test_net"):
        values["test_net"] = reader.text("test_net", last=False)
    for name in ("net_param", "train_net_param", "test_net_param"):
        item = msg.get(name)
        if item is not None and not isinstance(item, Message):
            reader.fail(name, f"must be a message {{ ... }}, got {item!r}")
        elif item is not None:
            values[name] = item
    for name in ("base_lr", "max_iter", "lr_policy"):
        if name not in values and not reader.failed(name):
            reader.fail(name, "is required (Caffe has no default for it)")
    if not reader.problems:
        _check_rules(reader, values)
    if reader.problems:
        raise SpecError(reader.problems)
    return SolverConfig(**values)  # type: ignore[arg-type]


def _read_states(reader: FieldReader, values: dict[str, object]) -> None:
    """``train_state`` and ``test_state``: NetState messages, each of its own net's phase."""
    for name, phase in (("train_state", "TRAIN"), ("test_state", "TEST")):
        item = reader.msg.get(name)
        if item is None or reader.failed(name):
            continue
        if not isinstance(item, Message):
            reader.fail(name, f"must be a message {{ stage: ... }}, got {item!r}")
            continue
        problems = check(item, "NetState", name)
        if item.has("phase") and str(item.get("phase")) != phase:
            problems.append(
                f"{name}.phase is {item.get('phase')}, but {name} builds the {phase} net; "
                "remove the phase"
            )
        if problems:
            reader.fail(name, "; ".join(problems))
        else:
            values[name] = item


def _check_rules(reader: FieldReader, values: dict[str, object]) -> None:
    """The rules between fields, on values already read with their types."""
    config = SolverConfig(**values)  # type: ignore[arg-type]
    fail = reader.fail
    if not (math.isfinite(config.base_lr) and config.base_lr > 0):
        fail("base_lr", f"must be a finite number > 0, got {config.base_lr}")
    if not 1 <= config.max_iter <= MAX_ITER_LIMIT:
        fail("max_iter", f"must be in [1, {MAX_ITER_LIMIT:,}], got {config.max_iter}")
    if config.lr_policy not in LR_POLICIES:
        fail("lr_policy", f"must be one of {', '.join(LR_POLICIES)}, got {config.lr_policy!r}")
    if config.regularization_type not in REGULARIZATION_TYPES:
        fail(
            "regularization_type",
            f"must be L2 or L1 (Caffe's spelling), got {config.regularization_type!r}",
        )
    _check_policy(reader, config)
    _check_solver_type(reader, config)
    for name in ("weight_decay", "gamma", "power", "clip_gradients"):
        if not math.isfinite(getattr(config, name)):
            fail(name, f"must be finite, got {getattr(config, name)}")
    if config.weight_decay < 0:
        fail("weight_decay", f"must be >= 0, got {config.weight_decay}")
    if not 1 <= config.iter_size <= MAX_ITER_SIZE:
        fail("iter_size", f"must be in [1, {MAX_ITER_SIZE}], got {config.iter_size}")
    if config.average_loss < 1:
        fail("average_loss", f"must be >= 1, got {config.average_loss}")
    if config.random_seed < -1:
        fail("random_seed", f"must be >= 0, or -1 for the trial's seed; got {config.random_seed}")
    _check_testing(reader, config)
    train_nets = [n for n in ("net", "net_param", "train_net", "train_net_param") if n in values]
    if len(train_nets) > 1:
        fail(
            train_nets[1],
            f"gives a second train net (with {train_nets[0]}); give only one of net, "
            "net_param, train_net, train_net_param",
        )


def _check_policy(reader: FieldReader, config: SolverConfig) -> None:
    policy, fail, given = config.lr_policy, reader.fail, reader.msg.has
    if policy not in LR_POLICIES:
        return
    if policy in _GAMMA_POLICIES and not given("gamma"):
        fail("gamma", f"is required by lr_policy {policy}")
    if policy in _POWER_POLICIES and not given("power"):
        fail("power", f"is required by lr_policy {policy}")
    if policy in ("step", "exp", "multistep") and given("gamma") and config.gamma <= 0:
        fail("gamma", f"must be > 0 for lr_policy {policy}, got {config.gamma}")
    if policy == "inv" and config.gamma < 0:
        fail("gamma", f"must be >= 0 for lr_policy inv, got {config.gamma}")
    if policy in _POWER_POLICIES and config.power < 0:
        fail("power", f"must be >= 0 for lr_policy {policy}, got {config.power}")
    if policy == "step" and not given("stepsize"):
        fail("stepsize", "is required by lr_policy step (iterations per step, > 0)")
    elif policy == "step" and config.stepsize <= 0:
        fail("stepsize", f"must be > 0 for lr_policy step, got {config.stepsize}")
    if policy == "multistep":
        steps = config.stepvalue
        if not steps:
            fail("stepvalue", "is required by lr_policy multistep (one or more iterations)")
        elif any(b <= a for a, b in itertools.pairwise(steps)) or steps[0] < 0:
            fail("stepvalue", f"must be >= 0 and strictly increasing, got {list(steps)}")
    if reader.problems or not 1 <= config.max_iter <= MAX_ITER_LIMIT:
        return
    for iteration in (0, config.max_iter - 1):  # every policy is monotone in the iteration
        rate = learning_rate(config, iteration)
        if not (math.isfinite(rate) and rate >= 0):
            fail("lr_policy", f"{policy} gives learning rate {rate} at iteration {iteration}")
            return


def _check_solver_type(reader: FieldReader, config: SolverConfig) -> None:
    fail, kind = reader.fail, config.type
    if not 0 <= config.momentum < 1:
        fail("momentum", f"must be in [0, 1), got {config.momentum}")
    elif kind in ("AdaGrad", "RMSProp") and config.momentum != 0:
        fail("momentum", f"must be 0 with type {kind} (Caffe: momentum cannot be used with it)")
    if kind in ("AdaGrad", "RMSProp", "AdaDelta", "Adam") and not (
        math.isfinite(config.delta) and config.delta > 0
    ):
        fail("delta", f"must be a finite number > 0 for type {kind}, got {config.delta}")
    if kind == "RMSProp" and not 0 <= config.rms_decay < 1:
        fail("rms_decay", f"must be in [0, 1), got {config.rms_decay}")
    if kind == "Adam" and not 0 <= config.momentum2 < 1:
        fail("momentum2", f"must be in [0, 1), got {config.momentum2}")


def _check_testing(reader: FieldReader, config: SolverConfig) -> None:
    fail = reader.fail
    if config.test_interval < 0:
        fail("test_interval", f"must be >= 0 (0: never test), got {config.test_interval}")
    if not 0 <= config.test_iter <= MAX_TEST_ITER:
        fail("test_iter", f"must be in [0, {MAX_TEST_ITER:,}], got {config.test_iter}")
    if config.test_interval > 0:
        if config.test_iter == 0 and not reader.failed("test_iter"):
            fail("test_iter", "is required (> 0) when test_interval is set")
        evaluations = config.max_iter // config.test_interval
        if evaluations > MAX_EVALUATIONS:
            fail(
                "test_interval",
                f"{config.test_interval} evaluates {evaluations:,} times in max_iter "
                f"{config.max_iter}, over the limit of {MAX_EVALUATIONS:,}; raise it",
            )


def _solver_type(reader: FieldReader) -> str:
    """The canonical solver type from `type` or the older `solver_type` enum."""
    if reader.msg.has("type") and reader.msg.has("solver_type"):
        reader.fail("solver_type", "and type are both given; give only type (the newer one)")
        return "SGD"
    if reader.msg.has("solver_type"):
        raw = reader.msg.get("solver_type")
        names = list(LEGACY_SOLVER_TYPES)
        if isinstance(raw, int) and not isinstance(raw, bool) and 0 <= raw < len(names):
            return LEGACY_SOLVER_TYPES[names[raw]]
        if isinstance(raw, str) and raw in LEGACY_SOLVER_TYPES:
            return LEGACY_SOLVER_TYPES[raw]
        reader.fail("solver_type", f"must be one of {', '.join(names)}, got {raw!r}")
        return "SGD"
    kind = reader.text("type")
    if kind is None:
        return "SGD"
    if kind not in SOLVER_TYPES:
        close = [t for t in SOLVER_TYPES if t.lower() == kind.lower()]
        hint = f" (Caffe spells it {close[0]})" if close else ""
        reader.fail("type", f"must be one of {', '.join(SOLVER_TYPES)}, got {kind!r}{hint}")
        return "SGD"
    return kind
