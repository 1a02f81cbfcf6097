"""The security headers every response of the web app carries (the API's and the
dashboard's alike), set after the view (`init_headers`).

- ``X-Content-Type-Options: nosniff``: a response is read as the type it says it is;
- ``X-Frame-Options: DENY`` and CSP ``frame-ancestors 'none'``: no page of another site
  frames the dashboard (clickjacking of its cancel and retry buttons);
- ``Referrer-Policy: same-origin``: a sweep's URL never leaves for another site;
- a ``Content-Security-Policy`` (`policy`) under which a page runs only this server's
  script files: ``script-src 'self'``, with neither ``'unsafe-inline'`` nor
  ``'unsafe-eval'``, so markup that slipped into a page runs nothing. The pages hold no
  inline script or event handler (their data comes as ``<script type="application/json">``
  blocks, which are not run), and the sweep page's WebGL scatter, whose regl compiles
  its drawing code with ``Function``, gets that code compiled ahead in a static file
  (``dashboard/static/regl_shim.js``). Styles come from this server's files too
  (``style-src 'self'``; style attributes made through the CSSOM are not refused), plus
  the ``<style>`` elements plotly.js writes itself, allowed by the hashes of their text
  that the composition hands in (`dashboard.plotlyjs.STYLE_SOURCES`): no
  ``'unsafe-inline'`` either. Everything else is this server's (``default-src``,
  ``connect-src``), but images may be ``data:`` URIs (the pages' empty favicon, plotly.js's
  drawn images); no plugins (``object-src``), no other base URL (``base-uri``), no forms
  that post elsewhere (``form-action``);
- ``Cache-Control: no-store`` on every response that sets no caching of its own: a user's
  sweeps stay out of shared and disk caches (plotly.js and the static files keep theirs).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from flask import Flask, Response

HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
}


def policy(style_sources: Sequence[str] = ()) -> str:
    """The Content-Security-Policy; `style_sources` are added to ``style-src`` (hashes of
    the ``<style>`` elements a page's scripts write, as ``'sha256-…'``)."""
    styles = " ".join(("'self'", *style_sources))
    return (
        "default-src 'self'; script-src 'self'; "
        f"style-src {styles}; img-src 'self' data: blob:; connect-src 'self'; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )


def _secure(headers: dict[str, str], response: Response) -> Response:
    for name, value in headers.items():
        response.headers.setdefault(name, value)
    if "Cache-Control" not in response.headers:
        response.headers["Cache-Control"] = "no-store"
    return response


def init_headers(app: Flask, style_sources: Sequence[str] = ()) -> None:
    """Add `HEADERS` and the `policy` with `style_sources`, and ``no-store`` where a
    response sets no caching, to every response."""
    headers = {**HEADERS, "Content-Security-Policy": policy(style_sources)}
    app.after_request(partial(_secure, headers))
