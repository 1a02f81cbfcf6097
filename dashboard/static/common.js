/* Helpers every dashboard page shares: safe element building, number and time formats,
   JSON requests, the live indicator and a polling loop that never overlaps itself. */
"use strict";

const SS = (function () {
  const STATES = ["queued", "running", "complete", "failed", "pruned", "cancelled"];
  const PLOT_CONFIG = {
    responsive: true,
    displaylogo: false,
    modeBarButtonsToRemove: ["select2d", "lasso2d", "autoScale2d", "toggleSpikelines"],
    // WebGL figures (the sweep page's scatter) at the screen's own pixel density, at most
    // plotly's default of 2: on a 1x screen that default draws, reads back and scales
    // down four times the pixels shown, which with software WebGL (no GPU) cost ~0.2-0.4 s
    // of the sweep page's drawing at 50,000 trials; a 2x screen is drawn as before.
    plotGlPixelRatio: Math.min(Math.max(window.devicePixelRatio || 1, 1), 2),
  };

  /** An element with attributes (text via `text`, classes via `class`) and children. */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "text") node.textContent = String(value);
      else if (key === "class") node.className = value;
      // Through the CSSOM: a style attribute set as markup is refused by the CSP.
      else if (key === "style") node.style.cssText = value;
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  // Thousands separators without Intl (toLocaleString is slow enough to show in profiles).
  function grouped(n) {
    return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  }

  function num(value, digits) {
    if (value === null || value === undefined || Number.isNaN(value)) return "–";
    if (typeof value !== "number") return String(value);
    if (Number.isInteger(value) && Math.abs(value) < 1e15) return grouped(value);
    return Number(value.toPrecision(digits || 4)).toString();
  }

  /** A size in bytes as people read it: 812 B, 104 kB, 2.1 MB (powers of 1,000). */
  function bytes(n) {
    if (n === null || n === undefined) return "–";
    const units = ["B", "kB", "MB", "GB", "TB"];
    let i = 0;
    while (n >= 1000 && i < units.length - 1) { n /= 1000; i += 1; }
    return (i === 0 || n >= 100 ? Math.round(n) : Number(n.toPrecision(2))) + " " + units[i];
  }

  function seconds(value) {
    if (value === null || value === undefined) return "–";
    if (value < 1) return value.toFixed(2) + " s";
    if (value < 60) return value.toFixed(1) + " s";
    const s = Math.round(value);
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
    if (h) return h + " h " + String(m).padStart(2, "0") + " min";
    return m + " min " + String(r).padStart(2, "0") + " s";
  }

  function time(ms) {
    if (ms === null || ms === undefined) return "–";
    return new Date(ms).toISOString().replace("T", " ").slice(0, 19);
  }

  function ago(ms, now) {
    if (ms === null || ms === undefined) return "–";
    const s = Math.max(0, Math.round(((now || Date.now()) - ms) / 1000));
    if (s < 90) return s + " s ago";
    if (s < 5400) return Math.round(s / 60) + " min ago";
    return Math.round(s / 3600) + " h ago";
  }

  /** Fill every `.time[data-ms]` element with its UTC time. */
  function fillTimes(root) {
    for (const node of (root || document).querySelectorAll(".time[data-ms]")) {
      node.textContent = time(Number(node.dataset.ms)) + " UTC";
    }
  }

  async function getJSON(url) {
    const response = await fetch(url, { headers: { Accept: "application/json" } });
    let body = null;
    try { body = await response.json(); } catch (e) { body = null; }
    if (response.status === 401) {
      // The session ended (logout elsewhere, token removed): back to the login form.
      window.location.assign("/login?next=" + encodeURIComponent(window.location.pathname));
    }
    if (!response.ok) {
      const message = body && body.message ? body.message : response.statusText;
      const error = new Error(message);
      error.status = response.status;
      throw error;
    }
    return body;
  }

  function setLive(ok, text) {
    const node = document.getElementById("live");
    if (!node) return;
    node.className = "live " + (ok ? "ok" : "err");
    node.textContent = text;
  }

  /** Call `step` now and then every `every` ms after each call ends; show the status. */
  function poll(step, every) {
    let failures = 0;
    async function run() {
      try {
        await step();
        failures = 0;
        setLive(true, "live · updated " + new Date().toISOString().slice(11, 19) + " UTC");
      } catch (error) {
        failures += 1;
        setLive(false, "not updating (" + error.message + "); retrying");
      }
      window.setTimeout(run, failures ? Math.min(every * 2 ** failures, 30000) : every);
    }
    window.setTimeout(run, every);
  }

  /** A progress bar: one segment per state, as wide as its share of `total`. */
  function progressBar(counts, total, node) {
    const bar = node || el("div", { class: "progress" });
    bar.replaceChildren();
    for (const state of STATES) {
      const n = counts[state] || 0;
      if (!n || !total) continue;
      bar.append(el("span", {
        class: "seg-" + state,
        style: "width:" + (100 * n / total).toFixed(3) + "%",
        title: state + ": " + grouped(n),
      }));
    }
    return bar;
  }

  function card(label, value, sub, colour) {
    return el("div", { class: "card" },
      el("div", { class: "label" },
        colour ? el("span", { class: "dot " + colour }) : null,
        label),
      el("div", { class: "value", text: value }),
      sub ? el("div", { class: "sub", text: sub }) : null);
  }

  /** Mark the page as fully drawn (tests and the benchmark wait for this). */
  function drawn() {
    window.__dashboard = window.__dashboard || {};
    window.__dashboard.drawn = true;
    window.__dashboard.drawnAt = performance.now();
    document.body.dataset.drawn = "true";
  }

  /** Wait until the browser has painted what was drawn so far. */
  function painted() {
    return new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));
  }

  // Whether WebGL traces draw here: regl's drawing code for them is compiled ahead
  // (regl_shim.js) for a WebGL with instanced drawing and vertex array objects, which the
  // policy's script-src 'self' needs (no eval); elsewhere, or once the shim met code it has
  // not got ("sweepstack:regl-miss"), they are drawn as SVG traces: slower, never blank.
  let webgl = (function () {
    try {
      const gl = document.createElement("canvas").getContext("webgl");
      return !!(gl && gl.getExtension("ANGLE_instanced_arrays") &&
        gl.getExtension("OES_vertex_array_object"));
    } catch (err) {
      return false;
    }
  })();

  /** A figure's traces as this browser draws them: WebGL ones as SVG where it cannot. */
  function traces(data) {
    return webgl ? data : data.map((t) => (t.type === "scattergl" ? { ...t, type: "scatter" } : t));
  }

  window.addEventListener("sweepstack:regl-miss", () => {
    if (!webgl) return;
    webgl = false;
    for (const gd of document.querySelectorAll(".js-plotly-plot")) {
      if (gd.data && gd.data.some((t) => t.type === "scattergl")) {
        Plotly.react(gd, traces(gd.data), gd.layout, PLOT_CONFIG);
      }
    }
  });

  window.__dashboard = { pageId: Math.random().toString(36).slice(2), drawn: false };

  return { STATES, PLOT_CONFIG, el, num, grouped, bytes, seconds, time, ago, fillTimes, getJSON,
           setLive, poll, progressBar, card, drawn, painted, traces };
})();
