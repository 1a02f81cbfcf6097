"""The live dashboard: a Flask blueprint of Plotly pages over the store, in two steps as
Optuna's plots are: rows from the store's records, then figures from the rows.

- rows: `data` (records → rows), `param_axes` (the parameters as the scatter's and the
  parallel coordinates' axes), `detail` (one trial and its curve), `history` (best so far),
  `timing` (time against depth and size), `workers` (who is online, through Celery);
  `front` holds both steps of a multi-objective sweep's Pareto front (its rows from
  `core.analysis.pareto`, the scatter and the hypervolume drawn from them);
- figures: `figures` (rows → Plotly figure dicts, on `core.analysis.layout`'s one layout),
  `parcoords` (the parallel coordinates' geometry, computed once here and sent as rows that
  the page extends), `analysis` (the Analysis panel's data);
- serving: `table` keeps each open sweep in memory and follows the store's changes,
  `payloads` puts a page's JSON together, `snapshots` keeps a finished sweep's first page in
  the store, `plotlyjs` serves the installed plotly.js (and the hashes of the styles it writes, for
  the CSP), `blueprint` holds the routes;
  `trials` (the table of every trial), `compare` (trials side by side) and `trial_routes`
  (their routes, downloads and the owner's cancel and retry) are the trials table;
  `models` says which trials have a kept model to download (the top trials, a trial page);
- the pages: `templates/` and `static/`, whose scripts are files only (the CSP of
  `web.headers` runs no inline script); `static/regl_code.js` is the WebGL scatter's
  drawing code compiled ahead, recorded by `python -m tests.dashboard.regl_code`.

It imports `core` and the shared web layer (`web`), never `api`; `cli.app` mounts it, and
`cli.dashboard_wsgi` serves it alone.
"""
