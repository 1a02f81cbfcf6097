"""Every dashboard page under the Content-Security-Policy (`web.headers`), in a real headless
Chromium against a live server and the McLeod sweep (the fixtures of `test_browser`).

The policy runs no inline script, no ``eval`` or ``Function`` and no inline style; each
page is opened and used (the sweep page's scatter on another parameter, hovered, saved as
a PNG, two trials compared, the Analysis panel), and must draw every chart with no
``securitypolicyviolation`` event and no console error. The WebGL scatter draws from the
code regl would compile, compiled ahead in ``dashboard/static/regl_code.js``, which must be
of the installed plotly package.
"""

from __future__ import annotations

import re

import plotly
from playwright.sync_api import Browser, BrowserContext, Page

from tests.dashboard.browser import ROOT, Console, shoot, wait_until
from tests.dashboard.seeding import Seeded

#: Records the page's policy violations from its first script on.
VIOLATIONS = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (e) => window.__violations.push(
  e.violatedDirective + " " + (e.blockedURI || "") + " at " + e.sourceFile + ":" + e.lineNumber));
"""
#: The ids of the visible figures plotly.js has not drawn.
UNDRAWN = """() => Array.from(document.querySelectorAll(".fig"))
  .filter((f) => f.offsetParent !== null && !f.querySelector(".main-svg"))
  .map((f) => f.id)"""
#: How many pixels of the scatter's WebGL canvas are painted.
GL_PAINTED = """() => {
  const gl = document.querySelector("#fig-scatter canvas.gl-canvas-context");
  const copy = document.createElement("canvas");
  copy.width = gl.width; copy.height = gl.height;
  const ctx = copy.getContext("2d");
  ctx.drawImage(gl, 0, 0);
  const pixels = ctx.getImageData(0, 0, copy.width, copy.height).data;
  let n = 0;
  for (let i = 3; i < pixels.length; i += 4) if (pixels[i] > 0) n++;
  return n;
}"""
#: The one console error of an error page: its own status, which Chromium logs.
STATUS_ERROR = "Failed to load resource: the server responded with a status of 404 (NOT FOUND)"


def _open(context: BrowserContext, url: str, drawn: bool = True) -> tuple[Page, Console]:
    page = context.new_page()
    console = Console().attach(page)
    page.goto(url)
    if drawn:
        page.wait_for_function("() => window.__dashboard && window.__dashboard.drawn",
                               timeout=60_000)  # fmt: skip
    return page, console


def _clean(page: Page, console: Console, name: str, allowed: tuple[str, ...] = ()) -> None:
    page.wait_for_timeout(300)  # one more frame, and any late error
    assert page.evaluate("window.__violations") == [], name
    assert [e for e in console.errors() if e not in allowed] == [], name
    assert page.evaluate(UNDRAWN) == [], name


def _use_the_sweep_page(page: Page) -> None:
    """What a user does on the sweep page that draws anew: another parameter on the
    scatter, hovering it, saving it as a PNG, comparing two trials, the Analysis panel."""
    page.select_option("#scatter-param", "model.activation")
    page.wait_for_function(
        "() => (document.getElementById('fig-scatter').layout.meta || {}).param"
        " === 'model.activation'"
    )
    assert page.evaluate(GL_PAINTED) > 500
    box = page.locator("#fig-scatter .nsewdrag").first.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.hover("#fig-parallel .nsewdrag")
    with page.expect_download() as download:
        page.locator("#fig-scatter .modebar-btn[data-title='Download plot as a PNG']").click(
            force=True
        )
    assert download.value.suggested_filename.endswith(".png")

    wait_until(lambda: page.locator("#trials-table tbody .pick-box").count() > 0, 30,
               "the trials table")  # fmt: skip
    boxes = page.locator("#trials-table tbody .pick-box")
    boxes.nth(0).check()
    boxes.nth(1).check()
    page.click("#compare-open")
    page.wait_for_function("() => window.__dashboard.compared === 1")
    assert page.locator("#fig-compare .main-svg").count() > 0
    page.click("#compare-close")

    page.locator("#analysis-panel").scroll_into_view_if_needed()
    page.wait_for_function("() => window.__analysis && window.__analysis.drawn",
                           timeout=60_000)  # fmt: skip


def test_every_page_draws_under_the_policy_without_a_violation(
    browser: Browser, context: BrowserContext, base_url: str, mcleod: Seeded
) -> None:
    context.add_init_script(VIOLATIONS)
    page, console = _open(context, f"{base_url}/sweeps/{mcleod.sweep_id}")
    assert page.evaluate(GL_PAINTED) > 500  # the WebGL scatter, from the compiled code
    _use_the_sweep_page(page)
    shoot(page, "csp-sweep")
    _clean(page, console, "sweep")
    page.close()

    pages = {
        "sweeps": "/",
        "trial-complete": f"/trials/{mcleod.ids('complete')[0]}",
        "trial-running": f"/trials/{mcleod.ids('running')[0]}",
        "trial-failed": f"/trials/{mcleod.ids('failed')[0]}",
        "trial-by-index": f"/sweeps/{mcleod.sweep_id}/trials/0",
        "workers": "/workers",
    }
    for name, path in pages.items():
        page, console = _open(context, base_url + path)
        _clean(page, console, name)
        page.close()

    page, console = _open(context, f"{base_url}/sweeps/no-such-sweep", drawn=False)
    assert page.locator("#error-message").is_visible()
    _clean(page, console, "error", allowed=(STATUS_ERROR,))
    page.close()

    anonymous = browser.new_context()
    try:
        anonymous.add_init_script(VIOLATIONS)
        page, console = _open(anonymous, f"{base_url}/login", drawn=False)
        assert page.locator("#login-form").is_visible()
        _clean(page, console, "login")
    finally:
        anonymous.close()


def test_the_compiled_regl_code_is_of_the_installed_plotly() -> None:
    code = (ROOT / "dashboard" / "static" / "regl_code.js").read_text()
    found = re.search(r'SweepstackReglCode = \{ plotly: "([^"]+)"', code)
    assert found, "regl_code.js names no plotly version"
    assert found.group(1) == plotly.__version__, (
        f"regl_code.js is of plotly {found.group(1)}, {plotly.__version__} is installed: "
        "run python -m tests.dashboard.regl_code"
    )


#: The scatter's traces as drawn, and its points on the page (SVG points or WebGL canvas).
SCATTER = """() => {
  const gd = document.getElementById("fig-scatter");
  return { types: gd._fullData.map((t) => t.type),
           svgPoints: gd.querySelectorAll(".scatterlayer .point").length };
}"""


def test_without_the_compiled_code_the_scatter_draws_as_svg(
    context: BrowserContext, base_url: str, mcleod: Seeded
) -> None:
    """A browser whose WebGL needs code that regl_code.js has not got (another GPU's
    features): the policy refuses regl's eval, and the page draws the scatter as SVG
    instead of leaving it blank (common.js, `SS.traces`)."""
    context.route("**/static/regl_code.js*", lambda route: route.fulfill(
        status=200, content_type="text/javascript",
        body='window.SweepstackReglCode = { plotly: "none", functions: {} };'))  # fmt: skip
    page, _ = _open(context, f"{base_url}/sweeps/{mcleod.sweep_id}")
    wait_until(lambda: page.evaluate(SCATTER)["types"] == ["scatter"], 30, "the SVG scatter")
    drawn = page.evaluate(SCATTER)
    assert drawn["svgPoints"] >= len(mcleod.ids("complete")), drawn
    page.select_option("#scatter-param", "model.activation")
    page.wait_for_function(
        "() => (document.getElementById('fig-scatter').layout.meta || {}).param"
        " === 'model.activation'"
    )
    assert page.evaluate(SCATTER)["types"] == ["scatter"]
    page.close()
