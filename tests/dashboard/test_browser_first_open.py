"""The sweep page's first open in a real headless Chromium (the fixtures of `test_browser`):
what it shows before plotly.js has come, and how its WebGL figure is drawn.

plotly.js (4.8 MB) is the last script of the page, so the cards and tables are filled
while it loads and compiles and only the figures wait for it; the WebGL scatter is drawn
at the screen's pixel density (`static/common.js`, ``plotGlPixelRatio``), not at twice it.
"""

from __future__ import annotations

from playwright.sync_api import BrowserContext, Route

from core.store.store import Store
from tests.dashboard.browser import Console, trace_lengths, wait_until
from tests.dashboard.seeding import Seeded

#: The scatter's WebGL canvas: its pixels, its CSS size, and the screen's pixel density.
_GL_CANVAS = """() => {
  const canvas = document.querySelector("#fig-scatter canvas.gl-canvas-context");
  return {width: canvas.width, height: canvas.height, cssWidth: canvas.clientWidth,
          cssHeight: canvas.clientHeight, ratio: window.devicePixelRatio};
}"""


def test_cards_and_tables_fill_before_plotly_js_comes_and_the_figures_after(
    context: BrowserContext, base_url: str, mcleod: Seeded
) -> None:
    held: list[Route] = []
    page = context.new_page()
    console = Console().attach(page)

    def hold(route: Route) -> None:
        held.append(route)  # answered below, once the cards and tables are checked

    page.route("**/dashboard/plotly.min.js*", hold)
    page.goto(f"{base_url}/sweeps/{mcleod.sweep_id}", wait_until="commit")

    wait_until(lambda: page.locator("#top-table tbody tr").count() == 20, 30, "top trials")
    wait_until(
        lambda: page.locator("#trials-table tbody tr").count() == 50,
        30,
        "the trials table's first page",
    )
    assert held, "plotly.js was asked for"
    assert "309" in page.locator("#summary").inner_text()  # complete trials
    assert page.locator("#failed-table tbody tr").count() == mcleod.count("failed")
    assert page.locator("#loading").is_hidden()
    assert page.evaluate("typeof window.Plotly") == "undefined"
    assert page.evaluate("window.__dashboard.drawn") is False
    assert page.evaluate("document.getElementById('fig-scatter').data") is None

    for route in held:
        route.continue_()
    page.wait_for_function("() => window.__dashboard.drawn", timeout=60_000)
    assert trace_lengths(page, "fig-scatter") == [mcleod.count("complete")]
    for element_id in (
        "fig-width",
        "fig-parallel",
        "fig-curves",
        "fig-history-trials",
        "fig-history-epochs",
        "fig-depth",
        "fig-size",
    ):
        assert page.evaluate("(id) => document.getElementById(id).data.length", element_id) > 0, (
            element_id
        )
    assert console.errors() == []
    page.close()


def test_the_webgl_scatter_is_drawn_at_the_screens_pixel_density(
    context: BrowserContext, base_url: str, mcleod: Seeded, live_store: Store
) -> None:
    page = context.new_page()
    page.goto(f"{base_url}/sweeps/{mcleod.sweep_id}")
    page.wait_for_function("() => window.__dashboard && window.__dashboard.drawn", timeout=60_000)
    canvas = page.evaluate(_GL_CANVAS)
    assert canvas["ratio"] == 1
    assert canvas["width"] == round(canvas["cssWidth"] * canvas["ratio"]), canvas
    assert canvas["height"] == round(canvas["cssHeight"] * canvas["ratio"]), canvas
    # Its points are drawn: the canvas is not blank where the complete trials are.
    painted = page.evaluate("""() => {
      const gl = document.querySelector("#fig-scatter canvas.gl-canvas-context");
      const copy = document.createElement("canvas");
      copy.width = gl.width; copy.height = gl.height;
      const ctx = copy.getContext("2d");
      ctx.drawImage(gl, 0, 0);
      const pixels = ctx.getImageData(0, 0, copy.width, copy.height).data;
      let n = 0;
      for (let i = 3; i < pixels.length; i += 4) if (pixels[i] > 0) n++;
      return n;
    }""")
    assert painted > 500, painted
    page.close()
