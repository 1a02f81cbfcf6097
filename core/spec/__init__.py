"""The spec language: what a user may write in a sweep spec, checked before anything runs.

From the top down:

- `core.spec.sweep`: `load_spec`, a YAML or JSON document into the validated spec of its
  kind, every problem named by its path and rule (`core.spec.documents` reads the document
  strictly);
- `core.spec.kinds`: the kinds of trial and `kind_of`, which tells a document's, a spec's
  or a trial config's kind; `core.spec.kind`: `TrialKind`, the one interface every kind
  answers (how it validates, costs, groups, trains and describes itself), so that nothing
  else asks which kind a config is;
- the kinds, each in its own module and the only place that reads which keys make one:
  `core.spec.mlp` (the built-in network), `core.spec.trainable` (specs of a user's own
  training function), `core.spec.caffe` (Caffe nets and solvers, prototxt read without
  Caffe; its kind is `core.spec.caffe.kind`);
- `core.spec.limits`: what a server lets a spec ask for (dataset roots, ceilings), measured
  by `core.spec.ceilings`;
- what the kinds build on: `core.spec.spec` (`SweepSpec`, the validated spec),
  `core.spec.sections` (a built-in section into dimensions), `core.spec.problems`
  (pydantic's errors as problems), `core.spec.space` (the search dimensions a leaf may be),
  `core.spec.config` and `core.spec.fields` (the concrete config of one trial and its fields
  by dotted path), `core.spec.search` (the ``search`` and ``pruning`` sections),
  `core.spec.suggest` ("did you mean"); `core.spec.search_settings`: a stored sweep's
  settings as readers show them; `core.spec.values`: a parameter value as text, as every
  surface writes it.

It imports the plumbing of `core` only (errors, settings); never the store.
"""
