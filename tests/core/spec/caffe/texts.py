"""Prototxt snippets for the layer-graph tests: an Input feeding the layers under test."""

from __future__ import annotations

import pytest

from core.errors import SpecError
from core.spec.caffe.net import NetGraph, build_graph
from core.spec.caffe.prototxt import parse

HEAD = 'layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 2 %s } } }\n'


def layer(
    name: str | None,
    kind: str,
    rest: str = "",
    bottoms: tuple[str, ...] = ("data",),
    tops: tuple[str, ...] | None = None,
) -> str:
    """One layer's text: its bottoms the input by default, its top named after it."""
    wires = [f'bottom: "{b}"' for b in bottoms] + [f'top: "{t}"' for t in (tops or (name,))]
    named = f'name: "{name}" ' if name else ""
    return f'layer {{ {named}type: "{kind}" {" ".join(wires)} {rest} }}\n'


def graph(
    body: str,
    dims: str = "dim: 3 dim: 8 dim: 8",
    phase: str = "TRAIN",
    shape: tuple[int, ...] = (3, 8, 8),
    classes: int | None = None,
) -> NetGraph:
    """The graph of `HEAD` (an Input of batch 2 and `dims`) feeding `body`."""
    return build_graph(parse(HEAD % dims + body, "t.prototxt"), phase, shape, classes, "t.prototxt")


def refusal(body: str, **kw: object) -> str:
    """The text of the SpecError `graph(body)` raises (every problem on caffe.net)."""
    with pytest.raises(SpecError) as info:
        graph(body, **kw)  # type: ignore[arg-type]
    assert all(p.path == "caffe.net" for p in info.value.problems)
    return str(info.value)
