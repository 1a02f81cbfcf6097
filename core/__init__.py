"""Sweepstack core: the floors every service stands on, split by meaning.

- plumbing, here: `core.errors` (the one exception family), `core.settings` (``SWEEPSTACK_*``),
  `core.states` (trial states), `core.broker` (queue and task names, Celery's shared
  configuration as plain values), `core.procs` (child processes, free ports);
- `core.spec`: the spec language, Caffe's part of it and the trial kinds;
- `core.store`: the store, MongoDB's only user;
- `core.analysis`: what a sweep found, from the store's rows.

Each floor imports only the ones listed before it. Nothing here imports torch, Celery,
Flask or Plotly; every other package may import it.
"""
