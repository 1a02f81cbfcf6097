"""The kinds of trial there are, and the one function that tells which a document is.

`kind_of` picks the `core.spec.kind.TrialKind` of a spec document, a validated spec, or a
trial's resolved config, asking the kinds of `KINDS` in turn whether they claim it: a
training function (``trainable: NAME``, `core.spec.trainable`), a Caffe net (a ``caffe``
section, `core.spec.caffe.kind`), else the built-in network (`core.spec.mlp`). Everything
that treats kinds differently (the spec's loader, the server's limits, the scheduler's
costs and groups, the worker's trainers) asks the kind it gets here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.spec.caffe.kind import CaffeKind
from core.spec.kind import TrialKind
from core.spec.mlp import MlpKind
from core.spec.spec import SweepSpec
from core.spec.trainable import TrainableKind

#: A user's installed training function.
TRAINABLE = TrainableKind()
#: A Caffe net and its solver.
CAFFE = CaffeKind()
#: The built-in network.
MLP = MlpKind()
#: Every kind, in the order `kind_of` asks them; the built-in network, last, claims any
#: document the others do not.
KINDS: tuple[TrialKind, ...] = (TRAINABLE, CAFFE, MLP)
#: Every kind's `TrialKind.parameter_roots`, in that order.
PARAMETER_ROOTS: tuple[str, ...] = tuple(root for kind in KINDS for root in kind.parameter_roots)


def kind_of(source: Mapping[str, Any] | SweepSpec) -> TrialKind:
    """The kind of a spec document, a validated spec (by its document), or a trial's config.

    What is no mapping at all is the built-in network's, whose validation refuses it."""
    document = source.document if isinstance(source, SweepSpec) else source
    if not isinstance(document, Mapping):
        return MLP
    return next(kind for kind in KINDS if kind.claims(document))
