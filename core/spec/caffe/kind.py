"""Caffe nets as a kind of trial (`CaffeKind`): a document with a ``caffe`` section.

This module stays light: the code that only asks (the worker's choice of trainer, the
scheduler's costs) loads it at its start, and the layer graph, the solver and the image
folders load only when a Caffe spec is validated or a Caffe trial is costed (each method
imports what it needs).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from core.spec.caffe.trial import CaffeTrialConfig
from core.spec.ceilings import over
from core.spec.kind import TrialKind, Work

if TYPE_CHECKING:
    from core.errors import Problem
    from core.settings import Settings
    from core.spec.caffe.spec import CaffeSpec
    from core.spec.spec import SweepSpec

#: Seconds to render one trial's texts and build its net to price it, per layer of the net
#: (`CaffeKind.config_seconds`).
SECONDS_PER_LAYER = 3e-4


class CaffeKind(TrialKind):
    """A Caffe net and its solver (`core.spec.caffe.spec`), trained by the worker's Caffe
    trainer. It trains alone, in its own message (its layer graph has no stacked form yet),
    and costs what its graph computes (`core.spec.caffe.cost`)."""

    name = "caffe"
    trainer = "caffe"
    step = "evaluation"
    config_model = CaffeTrialConfig
    image_folders = True
    parameter_roots = ("caffe.layers", "caffe.solver_params")

    def claims(self, document: Mapping[str, Any]) -> bool:
        """Whether the document or config has a ``caffe`` section."""
        return "caffe" in document

    def load_spec(self, document: dict[str, Any], path: Path | None = None) -> SweepSpec:
        """`core.spec.caffe.spec.load_caffe_spec`, after reading the ``net`` and ``solver``
        files a spec file names, relative to it (`core.spec.caffe.files`; the API reads none)."""
        from core.spec.caffe.files import read_caffe_files
        from core.spec.caffe.spec import load_caffe_spec

        if path is not None:
            document = read_caffe_files(document, path)
        return load_caffe_spec(document)

    def work(self, config: Mapping[str, Any]) -> Work:
        """Its graph's steps and multiply-accumulates (`core.spec.caffe.cost.config_work`)."""
        from core.spec.caffe.cost import config_work

        return config_work(config)

    def macs(self, config: Mapping[str, Any], data: Mapping[str, Any]) -> int | None:
        """The TRAIN net's forward multiply-accumulates of one sample
        (`core.spec.caffe.cost.TrialWork.train_macs`, on the sample shape it guesses)."""
        from core.spec.caffe.cost import config_work

        return config_work(config).train_macs

    def costs_before_training(self, config: Mapping[str, Any]) -> dict[str, int]:
        """The TRAIN net's parameters and forward multiply-accumulates of one sample, where
        the config says the sample's shape (`core.spec.caffe.cost.config_costs`)."""
        from core.spec.caffe.cost import config_costs

        return config_costs(config)

    def config_seconds(self, spec: SweepSpec) -> float | None:
        """Rendering a trial's texts and building its net to price it: about
        `SECONDS_PER_LAYER` a layer of its net (measured: 4 ms a LeNet trial, 0.3 s one of
        1,000 layers)."""
        from core.spec.caffe.ceilings import layer_count

        net, _ = cast("CaffeSpec", spec).messages({})
        return SECONDS_PER_LAYER * max(1, layer_count(net))

    def limit_problems(self, spec: SweepSpec, settings: Settings) -> list[Problem]:
        """The net's and the solver's texts against ``SWEEPSTACK_MAX_PROTOTXT_BYTES`` each, a
        mean file, refused with its channel means (`core.spec.caffe.mean_file`), and the
        sweep's nets against ``SWEEPSTACK_MAX_CAFFE_LAYERS``, ``SWEEPSTACK_MAX_MODEL_PARAMETERS``
        and ``SWEEPSTACK_MAX_ACTIVATION_ELEMENTS``, on the worst trial's
        (`core.spec.caffe.ceilings`)."""
        from core.spec.caffe.ceilings import net_problems
        from core.spec.caffe.mean_file import mean_file_problems

        caffe = cast("CaffeSpec", spec)  # what `load_spec` gives
        problems = []
        texts = (("caffe.net_text", caffe.net_text), ("caffe.solver_text", caffe.solver_text))
        for key, text in texts:
            size = len(text.encode("utf-8"))
            if size > settings.max_prototxt_bytes:
                problems.append(
                    over(key, "its UTF-8 bytes", size, settings.max_prototxt_bytes,
                         "SWEEPSTACK_MAX_PROTOTXT_BYTES")
                )  # fmt: skip
        net, _ = caffe.messages({})
        problems += mean_file_problems(net, settings.datasets_dir)
        return problems + net_problems(caffe, net, settings)

    def folder_problems(
        self, spec: SweepSpec, value: str, real: Path, datasets: Path
    ) -> list[Problem]:
        """The folder as a data set of images by class, and the first trial's net built on
        its images' shape and classes (`core.spec.caffe.checks.folder_problems`)."""
        from core.spec.caffe.checks import folder_problems

        return folder_problems(cast("CaffeSpec", spec), value, real, datasets)

    def file_problems(self, spec: SweepSpec, value: str, real: Path) -> list[Problem]:
        """An .npz file's ``X`` shape, and the first trial's net built on it and its
        evaluations against the file's rows (`core.spec.caffe.checks.npz_problems`)."""
        from core.spec.caffe.checks import npz_problems

        return npz_problems(cast("CaffeSpec", spec), value, real)
