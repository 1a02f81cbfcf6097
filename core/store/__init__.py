"""The store: sweeps, trials and per-epoch metrics in MongoDB; the only pymongo user.

`core.store.store.Store` owns the connection and composes the roles each service uses, all on
one shared state (`core.store.state`); its docstring states every collection, index and
invariant. The roles: `core.store.lifecycle` (workers: claim, heartbeat, report, finish;
batched in `core.store.batch_writes`), `core.store.admin` (API and scheduler: create, cancel,
requeue, retry, delete; prune requests in `core.store.prune_requests`), `core.store.feeding`
(the scheduler's windows) and `core.store.reads` (API, dashboard, CLI; pages in
`core.store.views`, change feeds in `core.store.changes`). Below them: the document shapes
(`core.store.records`), the checking of user queries (`core.store.query`), the per-sweep
summaries (`core.store.summaries`) and the CSV / JSON Lines export (`core.store.export`).

It imports the plumbing and the spec language of `core`, never the analysis.
"""
