"""Which layers of a Caffe net a phase keeps: Caffe's NetStateRule, and deploy-style inputs.

A layer with ``include`` rules is kept when one of them is met; otherwise it is kept unless
an ``exclude`` rule is met. A rule is met when its ``phase`` (if any) is the net's phase,
the net's level lies within ``min_level``/``max_level``, every ``stage`` is one of the net's
stages and no ``not_stage`` is. The net's level and stages are its ``state`` message merged
with the solver's ``train_state`` (TRAIN) or ``test_state`` (TEST), as Caffe's solver
merges them: the solver's level wins when it gives one, the stages are both lists (level 0
and no stage without either); the phase is the caller's. A net-level ``input:`` (with
``input_shape`` or ``input_dim``, Caffe's deploy form) becomes an Input layer first.
"""

from __future__ import annotations

from core.errors import Problem, SpecError
from core.spec.caffe.fields import check
from core.spec.caffe.prototxt import Message

PATH = "caffe.net"
_NET_FIELDS = {
    "name",
    "layer",
    "input",
    "input_shape",
    "input_dim",
    "state",
    "force_backward",
    "debug_info",
}


def _fail(message: str) -> SpecError:
    return SpecError([Problem(PATH, message)])


def _rule_met(rule: Message, phase: str, level: int, stages: set[str]) -> bool:
    if rule.has("phase") and str(rule.get("phase")) != phase:
        return False
    if rule.has("min_level") and level < int(rule.get("min_level")):  # type: ignore[arg-type]
        return False
    if rule.has("max_level") and level > int(rule.get("max_level")):  # type: ignore[arg-type]
        return False
    if any(str(s) not in stages for s in rule.getall("stage")):
        return False
    return not any(str(s) in stages for s in rule.getall("not_stage"))


def included(
    layer: Message, phase: str, level: int = 0, stages: frozenset[str] = frozenset()
) -> bool:
    """Caffe's StateMeetsRule: any include rule met admits, any exclude rule met drops."""
    includes = [r for r in layer.getall("include") if isinstance(r, Message)]
    excludes = [r for r in layer.getall("exclude") if isinstance(r, Message)]
    if includes:
        return any(_rule_met(r, phase, level, set(stages)) for r in includes)
    return not any(_rule_met(r, phase, level, set(stages)) for r in excludes)


def _net_input_layer(net: Message) -> Message | None:
    """The net-level ``input: "data" input_dim: ...`` (deploy style) as an Input layer."""
    names = net.getall("input")
    if not names:
        return None
    if len(names) != 1:
        raise _fail(f"the net declares {len(names)} net-level inputs; one is supported")
    dims = [int(d) for d in net.getall("input_dim")]  # type: ignore[call-overload]
    shapes = [s for s in net.getall("input_shape") if isinstance(s, Message)]
    if shapes:
        dims = [int(d) for d in shapes[0].getall("dim")]  # type: ignore[call-overload]
    if not dims:
        raise _fail(f"net-level input '{names[0]}' needs input_shape or input_dim")
    shape = Message()
    shape.set("dim", list(dims))
    param = Message()
    param.set("shape", shape)
    layer = Message(line=net.field("input").line)  # type: ignore[union-attr]
    layer.set("name", str(names[0]))
    layer.set("type", "Input")
    layer.set("top", str(names[0]))
    layer.set("input_param", param)
    return layer


def _rule_problems(layers: list[Message]) -> list[str]:
    """The include/exclude rules of every layer, whatever the phase: a misspelt rule must
    not drop a layer from both phases unnoticed."""
    out = []
    for layer in layers:
        for rule in ("include", "exclude"):
            for item in layer.getall(rule):
                found = (
                    check(item, "NetStateRule", rule)
                    if isinstance(item, Message)
                    else [f"{rule} must be a message {{ ... }}"]
                )
                out += [f"layer '{layer.get('name')}' ({layer.get('type')}): {p}" for p in found]
    return out


def net_state(net: Message, solver_state: Message | None = None) -> tuple[int, frozenset[str]]:
    """The (level, stages) a net is built with: its ``state`` merged with the solver's
    ``train_state``/``test_state`` (`solver_state`), as protobuf's MergeFrom does."""
    level, stages = 0, []
    for state in (net.get("state"), solver_state):
        if isinstance(state, Message):
            if state.has("level"):
                level = int(state.get("level"))  # type: ignore[arg-type]
            stages += [str(s) for s in state.getall("stage")]
    return level, frozenset(stages)


def layers_for_phase(
    net: Message, phase: str, solver_state: Message | None = None
) -> list[Message]:
    """The layer messages `phase` keeps, in order, under the net's state merged with
    `solver_state` (the solver's ``train_state`` or ``test_state``); refuses fields a
    NetParameter lacks."""
    problems: list[str] = []
    for name in net.names():
        if name == "layers":
            problems.append(
                "the net uses Caffe's old 'layers' (V1) format; upgrade it to 'layer' "
                "(Caffe's upgrade_net_proto_text tool)"
            )
        elif name not in _NET_FIELDS:
            problems.append(f"{name} is not a field of a Caffe NetParameter")
    state = net.get("state")
    if isinstance(state, Message):
        problems.extend(check(state, "NetState", "state"))
    layers = [m for m in net.getall("layer") if isinstance(m, Message)]
    problems.extend(_rule_problems(layers))
    if problems:
        raise SpecError([Problem(PATH, p) for p in problems])
    level, stages = net_state(net, solver_state)
    head = _net_input_layer(net)
    kept = [head] if head is not None else []
    kept += [m for m in layers if included(m, phase, level, stages)]
    return kept
