"""The spec language: what a user may write in a sweep spec, checked before anything runs.

- `core.spec.sweep`: `load_spec`, a YAML or JSON document into a validated `SweepSpec`, every
  problem named by its path and rule (`core.spec.documents` reads the document strictly,
  `core.spec.suggest` says "did you mean");
- `core.spec.space`: the search dimensions a leaf may be; `core.spec.config` and
  `core.spec.fields`: the concrete config of one trial and its fields by dotted path;
- `core.spec.search`: the ``search`` and ``pruning`` sections; `core.spec.search_settings`:
  a stored sweep's settings as readers show them;
- `core.spec.trainable`: specs of a user's own training function; `core.spec.caffe`: Caffe
  nets and solvers, prototxt read without Caffe;
- `core.spec.limits`: what a server lets a spec ask for (dataset roots, ceilings);
- `core.spec.values`: a parameter value as text, as every surface writes it.

It imports the plumbing of `core` only (errors, settings); never the store.
"""
