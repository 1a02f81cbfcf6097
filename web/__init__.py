"""The shared web layer: what the REST API (`api`) and the dashboard (`dashboard`) both stand on.

- `web.context`: the typed `AppContext` every view reads (settings, store, Celery sender,
  the analysis' importance function and memo) and the caller's `Identity`;
- `web.auth`: one auth layer for both (bearer tokens, the dashboard's login and session
  cookie, CSRF, throttling of failed attempts);
- `web.headers`: the security headers of every response (no framing, no sniffing, no
  shared caching of a user's data);
- `web.downloads`: a trial's kept model as a streamed download (the API's route and the
  dashboard's link give the same response);
- `web.errors`: the one JSON error body ``{"code", "message", "details"}`` and the handlers
  that give every error, routing and unexpected ones included, that shape.

It imports `core` only. `api` and `dashboard` import it and never each other; the
composition that mounts both on one Flask app, and the WSGI entry points, live on the top
floor (`cli.app`, `cli.wsgi`, `cli.dashboard_wsgi`).
"""
