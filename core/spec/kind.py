"""`TrialKind`: what every kind of trial answers, so that nothing else asks which kind a spec
or a trial's config is.

A trial is of one kind: the built-in network (`core.spec.mlp.MlpKind`), a Caffe net
(`core.spec.caffe.kind.CaffeKind`) or a user's installed training function
(`core.spec.trainable.TrainableKind`). `core.spec.kinds.kind_of` picks the kind of a spec
document, a spec, or a trial's config, and every part of the platform that treats kinds
differently asks that kind. A kind says how it

- **validates**: `load_spec` (a document into its validated spec), `host_problems` and
  `limit_problems` (what this host and this server's ceilings refuse, `core.spec.limits`),
  `image_folders` and `folder_problems` (what its ``dataset.path`` may name), and
  `config_model` (one trial's resolved config, as its trainer validates it again);
- **costs** a trial: `work`, which `scheduler.order` ranks and `scheduler.cost` times (a
  kind that gives none is priced by the built-in network's cost model), and `macs`, one
  sample's forward multiply-adds, which a worker records at finish (the ``macs`` an
  objective or a constraint may name, `core.spec.objectives`);
- **groups**: `fuses` (several trials trained as one stacked model, `scheduler.grouping`)
  and `chunks` (cheap trials sharing one message, `scheduler.chunks`);
- **trains**: `trainer`, a name that `workers.runner.TRAINERS` maps to its training code
  (torch loads only in workers, so the kind names its trainer and never imports it);
- **describes itself**: `name`, `parameter_roots` (where its free-form parameters live in a
  document), `counts_parameters` (whether a trial's record shows the parameter count its
  trainer reports).

A new kind is one subclass in its own module, one entry in `core.spec.kinds.KINDS` and one
in `workers.runner.TRAINERS`. A kind's module is the only place that reads which keys make a
document of its kind (`claims`). It builds on the lower pieces of the spec language
(`core.spec.spec`, `core.spec.sections`, `core.spec.problems`, `core.spec.ceilings`), never
on `core.spec.kinds` or `core.spec.sweep`, which stand on the kinds.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from pydantic import BaseModel

    from core.errors import Problem
    from core.settings import Settings
    from core.spec.spec import SweepSpec


class Work(Protocol):
    """What training one trial costs, counted in terms every kind can give (a Caffe net's
    `core.spec.caffe.cost.TrialWork` is one): the scheduler turns it into an order
    (`scheduler.order`) and into seconds (`scheduler.cost`)."""

    @property
    def steps(self) -> int:
        """The updates over the whole trial (each costs a fixed overhead)."""
        ...

    @property
    def layers(self) -> int:
        """The layers one update runs through (the fixed overhead grows with them)."""
        ...

    @property
    def macs(self) -> int:
        """The multiply-accumulates of the whole trial, forward and backward."""
        ...


class TrialKind(abc.ABC):
    """One kind of trial: how its specs validate, what its trials cost, whether they group,
    which trainer trains them, and how it describes itself (the module docstring).

    A kind holds no state: `core.spec.kinds` keeps one instance of each.
    """

    #: The kind's name (``mlp``, ``caffe``, ``trainable``).
    name: ClassVar[str]
    #: The name of the trainer a worker trains its trials with (`workers.runner.TRAINERS`).
    trainer: ClassVar[str]
    #: The model one trial's resolved config validates against; its trainer validates the
    #: config with it again before it trains.
    config_model: ClassVar[type[BaseModel]]
    #: Whether compatible trials of this kind may train fused, as one stacked model
    #: (`scheduler.grouping` says which and how many); a kind that does not trains alone.
    fuses: ClassVar[bool] = False
    #: Whether cheap trials of this kind may share one message, trained one after another
    #: by the built-in trainer (`scheduler.chunks`, `workers.group_runner`).
    chunks: ClassVar[bool] = False
    #: Whether ``dataset.path`` may name a folder of images by class besides a file.
    image_folders: ClassVar[bool] = False
    #: Whether a trial's record keeps the parameter count its trainer reports (a training
    #: function's model is its own, so readers show none for it).
    counts_parameters: ClassVar[bool] = True
    #: Where the kind's free-form parameters live in a document (``params``,
    #: ``caffe.layers``): mappings whose nested keys are parameter groups, not fields of a
    #: built-in section (the API counts their dimensions before the spec is read,
    #: `api.submission`).
    parameter_roots: ClassVar[tuple[str, ...]] = ()
    #: What one reported row of a trial is, as pages and exports name it: an ``epoch``, or
    #: for a Caffe net an ``evaluation`` (its test pass every ``test_interval`` iterations).
    step: ClassVar[str] = "epoch"
    #: Whether its trials have a depth and a width (``model.hidden_layers``,
    #: ``model.hidden_units``): what the dashboard's width and depth panels draw.
    shapes: ClassVar[bool] = False

    @abc.abstractmethod
    def claims(self, document: Mapping[str, Any]) -> bool:
        """Whether a spec document or a trial's resolved config is of this kind (by the
        keys it holds; `core.spec.kinds.kind_of` asks the kinds in turn)."""

    @abc.abstractmethod
    def load_spec(self, document: dict[str, Any], path: Path | None = None) -> SweepSpec:
        """Validate a parsed document of this kind into its spec, or raise `SpecError`
        listing every problem. `path` is the file the document was read from, for files it
        names relative to itself; None for a document from elsewhere (the API)."""

    def work(self, config: Mapping[str, Any]) -> Work | None:
        """What training the trial of this resolved config costs, or None to have the
        built-in network's cost model price it from its model, data and epochs."""
        return None

    def config_seconds(self, spec: SweepSpec) -> float | None:
        """About how many seconds resolving one trial's config and pricing it (`work`) take,
        where that is enough to bound how many a feeder resolves at once
        (`scheduler.feed.Feeder`: a Caffe net's texts, rendered and built per trial); None
        where it is cheap enough to do for a whole sweep up front."""
        return None

    def macs(self, config: Mapping[str, Any], data: Mapping[str, Any]) -> int | None:
        """Multiply-adds of one sample's forward pass through the trial's model, from its
        resolved config and what its worker loaded (`data`: the record's ``dataset``, its
        ``n_features`` and ``n_classes``); None when the kind cannot count them (a training
        function's model is its own: it may report ``macs`` itself)."""
        return None

    def costs_before_training(self, config: Mapping[str, Any]) -> dict[str, int]:
        """The trial's ``param_count`` and ``macs`` counted from its resolved config alone,
        before a worker loads its data (what a Pareto-rank pruner ranks a cost objective
        with at every rung, `core.analysis.rank_pruner`); those the kind cannot count so
        are left out (none by default)."""
        return {}

    def host_problems(self, spec: SweepSpec) -> list[Problem]:
        """What this host lacks to run the spec (checked first where specs are accepted,
        `core.spec.limits`); none by default."""
        return []

    def limit_problems(self, spec: SweepSpec, settings: Settings) -> list[Problem]:
        """How the spec goes past this server's ceilings for this kind's own figures (its
        model's size, its texts), beside the ceilings every kind shares; none by default."""
        return []

    def folder_problems(
        self, spec: SweepSpec, value: str, real: Path, datasets: Path
    ) -> list[Problem]:
        """What is wrong with the folder ``dataset.path`` names (`value`, at `real` in the
        datasets folder `datasets`) as the spec's data set. Asked only of a kind whose
        `image_folders` is true, by the commands whose workers read this host's files."""
        return []

    def file_problems(self, spec: SweepSpec, value: str, real: Path) -> list[Problem]:
        """What is wrong with the file ``dataset.path`` names (`value`, at `real`) as the
        spec's data set, read cheaply (headers, not data), by the commands whose workers
        read this host's files; none by default."""
        return []

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"
