"""plotly.js as the installed ``plotly`` package ships it, and gzipped.

The pages load plotly.js from this server (never a CDN): ``plotly.min.js`` of the installed
package, the whole bundle (the package ships no partial bundle), 4.8 MB. Gzipped it is
~1.5 MB, which on a real network is most of a new browser's first open (at 20 Mbit/s:
~0.6 s instead of ~1.9 s). It is compressed once per process, in a background thread
started when the dashboard is set up (`start_gzip`, ~0.15 s of CPU), and sent to browsers
that accept gzip once ready; until then, and to other clients, the file as it is. On one
machine (loopback) both take the same time to load. Its URL carries the package version,
so browsers may keep it for a week.

plotly.js writes ``<style>`` elements itself, which the pages' Content-Security-Policy
allows by their hashes (`STYLE_SOURCES`, handed to `web.headers` by the composition):
its own, made empty and filled through the CSSOM (which the policy does not govern), and
those whose text it carries (maplibre's, written when the bundle loads).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import re
import threading
from importlib import resources

import plotly
from flask import Request, Response, send_file

PLOTLY_JS = resources.files("plotly") / "package_data" / "plotly.min.js"
MAX_AGE = 7 * 86400

#: A ``<style>`` element plotly.js writes with a text it carries, as a single-quoted or
#: double-quoted literal without escapes: ``X=document.createElement("style");X.id="…",
#: X.textContent='…'``.
_STYLE_TEXT = re.compile(
    r'createElement\("style"\);\w+\.id="[^"]*",\w+\.textContent=(?:\'([^\'\\]*)\'|"([^"\\]*)")'
)


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def style_sources(bundle: str) -> tuple[str, ...]:
    """CSP sources of the ``<style>`` elements `bundle` writes: the empty one plotly.js
    fills through the CSSOM, and each text it carries (`_STYLE_TEXT`)."""
    texts = [""] + [m.group(1) if m.group(1) is not None else m.group(2)
                    for m in _STYLE_TEXT.finditer(bundle)]
    return tuple(dict.fromkeys(_csp_hash(text) for text in texts))


#: `style_sources` of the installed plotly.js, read once (~35 ms).
STYLE_SOURCES = style_sources(PLOTLY_JS.read_text(encoding="utf-8"))

_lock = threading.Lock()
_gzipped: bytes | None = None
_started = False


def _compress() -> None:
    global _gzipped
    body = gzip.compress(PLOTLY_JS.read_bytes(), compresslevel=6, mtime=0)
    with _lock:
        _gzipped = body


def start_gzip() -> None:
    """Compress plotly.js in a background thread, once per process."""
    global _started
    with _lock:
        if _started:
            return
        _started = True
    threading.Thread(target=_compress, name="plotly-gzip", daemon=True).start()


def gzipped() -> bytes | None:
    """plotly.min.js gzipped, or None while it is being compressed (or never started)."""
    with _lock:
        return _gzipped


def response(request: Request) -> Response:
    """plotly.min.js for `request`: gzipped if the client accepts it and it is ready."""
    body = gzipped()
    if body is not None and "gzip" in request.accept_encodings:
        answer = Response(body, mimetype="text/javascript")
        answer.headers["Content-Encoding"] = "gzip"
        answer.set_etag(f"plotly-{plotly.__version__}-gzip")
        answer.cache_control.public = True
        answer.cache_control.max_age = MAX_AGE
        answer = answer.make_conditional(request)
    else:
        with resources.as_file(PLOTLY_JS) as path:
            answer = send_file(path, mimetype="text/javascript", max_age=MAX_AGE,
                               conditional=True)
    answer.vary.add("Accept-Encoding")
    return answer
