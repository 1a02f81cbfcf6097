"""The security headers every response of the web app carries (the API's and the
dashboard's alike), set after the view (`init_headers`).

- ``X-Content-Type-Options: nosniff``: a response is read as the type it says it is;
- ``X-Frame-Options: DENY`` and CSP ``frame-ancestors 'none'``: no page of another site
  frames the dashboard (clickjacking of its cancel and retry buttons);
- ``Referrer-Policy: same-origin``: a sweep's URL never leaves for another site;
- a ``Content-Security-Policy`` that refuses plugins (``object-src``), another base URL
  (``base-uri``) and forms that post elsewhere (``form-action``). It sets no ``script-src``:
  plotly.js's WebGL scatter (regl) compiles its drawing code with ``Function``, which a
  strict script policy refuses, and the sweep page draws 50,000 trials only in WebGL;
- ``Cache-Control: no-store`` on every response that sets no caching of its own: a user's
  sweeps stay out of shared and disk caches (plotly.js and the static files keep theirs).
"""

from __future__ import annotations

from flask import Flask, Response

HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Content-Security-Policy": (
        "frame-ancestors 'none'; object-src 'none'; base-uri 'none'; form-action 'self'"
    ),
}


def _secure(response: Response) -> Response:
    for name, value in HEADERS.items():
        response.headers.setdefault(name, value)
    if "Cache-Control" not in response.headers:
        response.headers["Cache-Control"] = "no-store"
    return response


def init_headers(app: Flask) -> None:
    """Add `HEADERS`, and ``no-store`` where a response sets no caching, to every response."""
    app.after_request(_secure)
