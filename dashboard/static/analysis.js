/* The sweep page's Analysis panel: what the sweep found (plateaus, cost laws, importance,
   the accuracy-cost front), computed on the server (dashboard/analysis.py) and drawn here
   as it comes. It loads once the page's own figures are drawn and the panel is in view,
   so it never slows the first draw, then polls while the sweep runs. */
"use strict";

(function () {
  const panel = document.getElementById("analysis-panel");
  if (!panel) return;
  const POLL_MS = 10000;
  const GROUPS = ["returns", "laws", "importance", "front"];
  const $ = (id) => document.getElementById(id);
  const state = { version: null, figures: [], chosen: {}, started: false };
  window.__analysis = { drawn: false, version: null, findings: [] };

  function status(text) { $("analysis-status").textContent = text; }

  function drawGroup(group) {
    const figs = state.figures.filter((f) => f.group === group);
    const node = $("analysis-fig-" + group);
    const select = $("analysis-" + group);
    if (!figs.length) {
      Plotly.purge(node);
      const note = group === "importance" ? state.importanceNote : "nothing to show yet";
      node.replaceChildren(SS.el("p", { class: "note", text: note || "nothing to show yet" }));
      if (select) select.replaceChildren();
      return Promise.resolve();
    }
    let chosen = figs.find((f) => f.id === state.chosen[group]) || figs[0];
    state.chosen[group] = chosen.id;
    if (select) {
      select.replaceChildren(...figs.map((f) => SS.el("option",
        { value: f.id, text: f.title, selected: f.id === chosen.id })));
    }
    if (node.querySelector(".note")) node.replaceChildren();
    return Plotly.react(node, chosen.figure.data, chosen.figure.layout, SS.PLOT_CONFIG);
  }

  function render(body) {
    const analysis = body.analysis;
    state.version = body.version;
    state.figures = body.figures;
    state.importanceNote = analysis.importance.note;
    $("analysis-findings").replaceChildren(
      ...analysis.findings.map((text) => SS.el("li", { text: text })));
    const sweep = analysis.sweep;
    status(SS.num(sweep.analysed) + " complete trials analysed" +
      (sweep.live ? " · updating as trials finish" : ""));
    return Promise.all(GROUPS.map(drawGroup)).then(() => {
      window.__analysis = { drawn: true, version: body.version, findings: analysis.findings,
                            figures: state.figures.map((f) => f.id), live: sweep.live };
    });
  }

  async function load() {
    const url = panel.dataset.url + (state.version ? "?version=" + encodeURIComponent(state.version) : "");
    let live = true;
    try {
      const body = await SS.getJSON(url);
      if (!body.unchanged) {
        await render(body);
      }
      live = window.__analysis.live !== false;
    } catch (error) {
      status("not available (" + error.message + "); retrying");
    }
    if (live) window.setTimeout(load, POLL_MS);
  }

  function start() {
    if (state.started) return;
    state.started = true;
    status("analysing…");
    load();
  }

  for (const group of GROUPS) {
    const select = $("analysis-" + group);
    if (select) {
      select.addEventListener("change", () => {
        state.chosen[group] = select.value;
        drawGroup(group);
      });
    }
  }

  // After the page's figures are drawn, once the panel is (nearly) in view.
  function whenDrawn() {
    if (window.__dashboard && window.__dashboard.drawn && window.Plotly) {
      const seen = new IntersectionObserver((entries) => {
        if (entries.some((e) => e.isIntersecting)) { seen.disconnect(); start(); }
      }, { rootMargin: "300px" });
      seen.observe(panel);
      status("computed once this panel is in view");
    } else {
      window.setTimeout(whenDrawn, 200);
    }
  }
  whenDrawn();
})();
