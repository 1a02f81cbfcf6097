"""The top floor: every ``sweepstack`` command, the one-machine launcher, the web app's
composition and its WSGI entry points. It may import every other package; none imports it.

- `cli.main`: the click group and the commands' wiring (exit codes, ``--help``);
  `cli.commands` (submit, worker, scheduler, the store every reading command opens),
  `cli.results` (ls, status, export), `cli.report` with `cli.report_files`,
  `cli.open_dashboard`, `cli.api_server` and `cli.dashboard_server` (gunicorn, through
  `cli.gunicorn`);
- `cli.run` and `cli.run_follow`: ``sweepstack run``, the whole platform on one machine,
  on the embedded services of `cli.embedded` (`cli.embedded_store`, `cli.embedded_broker`)
  kept in a data folder (`cli.datafolder`, read back after the run by `cli.local`);
- `cli.app`: `create_app`, the REST API and the dashboard on one Flask app behind the shared
  web layer (`web`); `cli.wsgi` (API and dashboard) and `cli.dashboard_wsgi` (the dashboard
  alone) are the WSGI entry points, `cli.gunicorn_conf` gunicorn's settings.
"""
