"""The live dashboard: a Flask blueprint of Plotly pages over the store.

`data`, `param_axes` and `detail` turn store records into rows; `figures` and `parcoords`
turn rows into Plotly figures; `table` keeps each open sweep in memory and follows the
store's changes; `workers` asks Celery who is online; `payloads` puts a page's JSON
together and `blueprint` serves it. `trials` (the sweep page's table of every trial),
`compare` (trials side by side) and `trial_routes` (their routes, downloads and the owner's
cancel and retry) are the trials table. `app` and `wsgi` run the dashboard alone.
"""
