"""Caffe nets and solvers as trials (issue #17): reading prototxt, the layer graph, the solver.

`core.spec.caffe.kind` is the kind of trial (`CaffeKind`, `core.spec.kind`): the one place
that tells a Caffe document or config by its keys, light enough for the code that only asks
(the worker's choice of trainer, the scheduler's costs) to load at its start. A spec is
`core.spec.caffe.spec` (`CaffeSpec`, `load_caffe_spec`; the files a spec file names are
read by `files`), checked by building its nets (`checks`); one trial's config is `trial`;
what a trial costs is `cost`. The text format is `core.spec.caffe.prototxt`; the layer graph
is `core.spec.caffe.net` (`build_graph`), read through the tables of `fields` (caffe.proto's
fields and defaults), `layers` (the types built), `shapes` and `data` (their shape rules),
`phases` (include/exclude) and `geometry` (convolution and pooling windows). Torch never
loads in `core`: the module a net builds into is `workers.training.caffe`'s business.
"""
