"""Caffe nets and solvers as trials (issue #17): reading prototxt, the layer graph, the solver.

The text format is `core.spec.caffe.prototxt`; the layer graph is `core.spec.caffe.net`
(`build_graph`), read through the tables of `fields` (caffe.proto's fields and defaults),
`layers` (the types built), `shapes` and `data` (their shape rules), `phases`
(include/exclude) and `geometry` (convolution and pooling windows). Torch never loads in
`core`: the module a net builds into is `workers.training.caffe`'s business.

`is_caffe` lives here, with no import, so that the code that only asks (the worker's
dispatch, the scheduler's costs) does not load the layer graph at its start.
"""

from __future__ import annotations

from typing import Any


def is_caffe(config: Any) -> bool:
    """Whether a spec document or a trial's config describes a Caffe net."""
    return isinstance(config, dict) and "caffe" in config
