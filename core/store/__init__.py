"""The store: sweeps, trials and per-epoch metrics in MongoDB; the only pymongo user.

Start at `core.store.roles`: the interface, one page of Protocols with the contract of every
method, one per service that uses the store: `TrialLifecycle` (workers: claim, heartbeat,
report, finish), `SweepAdmin` (API and scheduler: create, cancel, requeue, retry, delete,
request prunes, recount), `Feeding` (the scheduler's windows) and `Reads` (API, dashboard,
CLI, analysis: sweeps, trial pages, the best, a trial and its curve, change feeds).

`core.store.store.Store` owns the connection and hands out the roles, all on one shared
state (`core.store.state`: the collections, clock, caches and the steps every transition
shares); its docstring states every collection, index and invariant. Each role has one
implementation module holding all of its code: `core.store.lifecycle`, `core.store.admin`,
`core.store.feeding`, `core.store.reads` (the windows and orderings its pages of trials are
read in: `core.store.pages`). Below them: the document shapes (`core.store.records`), the
checking of what callers send and the paging order (`core.store.query`), the per-sweep
summaries (`core.store.summaries`), the CSV / JSON Lines / Parquet export
(`core.store.export`, over `Reads`) and a sweep as the runs of an experiment tracker
(`core.store.trackers`, what the MLflow and TensorBoard exports write).

It imports the plumbing and the spec language of `core`, never the analysis.
"""
