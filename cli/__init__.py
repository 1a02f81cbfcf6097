"""The top floor: every ``sweepstack`` command, the one-machine launcher, the web app's
composition and its WSGI entry points. It may import every other package; none imports it.

- `cli.main`: the click group, assembled from the command modules, and the console entry
  point; nothing imports it. The commands: `cli.specs` (validate, generate),
  `cli.commands` (submit, scheduler), `cli.worker` (worker, and the worker command lines
  `run` starts too), `cli.results` (ls, status, export), `cli.report` with
  `cli.report_files`, `cli.open_dashboard`, `cli.api_server` and `cli.dashboard_server`
  (gunicorn, through `cli.gunicorn`);
- at the bottom, imported by the commands and importing none of them: `cli.shared` (exit
  codes, settings, the spec as read, the program's name) and `cli.options` (the options
  several commands take, defined once); `cli.local` opens the store a command reads
  (``SWEEPSTACK_MONGO_URL``'s, or a data folder's);
- `cli.run` and `cli.run_follow`: ``sweepstack run``, the whole platform on one machine,
  on the embedded services of `cli.embedded` (`cli.embedded_store`, `cli.embedded_broker`)
  kept in a data folder (`cli.datafolder`, read back after the run by `cli.local`);
- `cli.app`: `create_app`, the REST API and the dashboard on one Flask app behind the shared
  web layer (`web`); `cli.wsgi` (API and dashboard) and `cli.dashboard_wsgi` (the dashboard
  alone) are the WSGI entry points, `cli.gunicorn_conf` gunicorn's settings.
"""
