/* The sweep page: draws the figures the server computed, then polls for what changed and
   extends them in place (Plotly.extendTraces, or react with arrays kept here). It never
   reloads, and a poll carries only the trials that changed after the page's cursor. What
   the page shows is computed by the server: each row's parameter values as text
   (`row.text`), and where each finished trial goes on the scatter and the parallel
   coordinates (`done`: `parcoords.placements`); the page appends what it is sent. */
"use strict";

(function () {
  const cfg = JSON.parse(document.getElementById("config").textContent);
  const POLL_MS = 2000;
  const S = {
    since: 0, versions: {}, sweep: null, params: [], param: null, mode: "best",
    limits: {}, plotted: new Set(), par: null, curves: [], top: [], models: new Set(),
    failed: [], failedSeen: new Set(), summary: null, history: null, historyFigs: null,
    recent: [], reasons: [],
    historyAxis: "trials",
  };
  const $ = (id) => document.getElementById(id);
  const better = (a, b) => (S.sweep.direction === "maximize" ? a > b : a < b);
  const short = (path) => (path.includes(".") ? path.split(".").slice(1).join(".") : path);

  // -- summary and tables ---------------------------------------------------------------

  function renderSummary(summary, sweep) {
    S.summary = summary;
    const counts = summary.counts;
    const cards = [];
    const pct = summary.total ? (100 * summary.done) / summary.total : 0;
    cards.push(SS.card("done", SS.num(summary.done) + " / " + SS.num(summary.total),
      pct.toFixed(1) + " %"));
    for (const state of SS.STATES) {
      if (state === "pruned" && !prunes(sweep, counts)) continue;
      cards.push(SS.card(state, SS.num(counts[state] || 0),
        state === "pruned" ? prunedNote(sweep) : null, state));
    }
    cards.push(SS.card("throughput", SS.num(summary.per_minute, 3) + " / min",
      summary.active_seconds === null ? "nothing finished yet"
        : "over " + SS.seconds(summary.active_seconds) + (summary.left ? " so far" : " active")));
    const eta = summary.eta_seconds === null ? "–"
      : summary.eta_seconds === 0 ? "done" : SS.seconds(summary.eta_seconds);
    cards.push(SS.card("ETA", eta, summary.left ? SS.num(summary.left) + " left" : null));
    const best = summary.best;
    const bestCard = SS.card("best " + sweep.metric, best ? SS.num(best.objective, 5) : "–",
      best ? "trial #" + best.index : "no complete trial yet");
    if (best) {
      bestCard.querySelector(".value").replaceChildren(
        SS.el("a", { href: cfg.trialsUrl + best.id, text: SS.num(best.objective, 5) }));
    }
    cards.push(bestCard);
    $("summary").replaceChildren(...cards);
    $("pruned-panel").hidden = !prunes(sweep, counts);
    SS.progressBar(counts, summary.total, $("progress"));
    renderFailuresFirst();
  }

  // The pruned card is shown only where pruning happens: a pruner, or pruned trials.
  function prunes(sweep, counts) {
    return (sweep.pruning && sweep.pruning.algorithm !== "none") || (counts.pruned || 0) > 0;
  }

  // The pruned card's note: the pruner, and the epochs saved so far when known.
  function prunedNote(sweep) {
    const pruner = sweep.pruning ? sweep.pruning.algorithm : "none";
    if (pruner === "none") return "no pruner";
    const h = S.history;
    if (!h || !h.planned) return "pruner " + pruner;
    return SS.num(h.planned - h.epochs) + " epochs saved";
  }

  function trialLink(row) {
    return SS.el("a", { href: cfg.trialsUrl + row.id, text: "#" + row.index });
  }

  // A download of the trial's kept model, if its sweep kept one (`S.models`: their ids).
  function modelLink(row) {
    if (!S.models.has(row.id)) return "–";
    return SS.el("a", { href: cfg.trialsUrl + row.id + "/model", download: true,
      class: "download", title: "download the trained model of trial #" + row.index +
        " (safetensors)", "aria-label": "download the model of trial #" + row.index,
      text: "↓" });
  }

  function paramCells(row, paths) {
    return paths.map((p) => SS.el("td", { class: typeof row.params[p] === "number" ? "num" : null,
      text: row.text[p] === undefined ? "–" : row.text[p] }));
  }

  function tableParams() {
    return S.params.filter((p) => p !== "index");
  }

  function renderTop(top) {
    S.top = top;
    const paths = tableParams();
    const head = SS.el("tr", {}, SS.el("th", { class: "num", text: "rank" }),
      SS.el("th", { text: "trial" }), paths.map((p) => SS.el("th", { text: short(p) })),
      SS.el("th", { class: "num", text: S.sweep.metric }),
      SS.el("th", { class: "num", text: "train time" }), SS.el("th", { text: "model" }));
    const rows = top.map((row, i) => SS.el("tr", { "data-index": row.index },
      SS.el("td", { class: "num", text: i + 1 }), SS.el("td", {}, trialLink(row)),
      paramCells(row, paths),
      SS.el("td", { class: "num", text: SS.num(row.objective, 5) }),
      SS.el("td", { class: "num nowrap", text: SS.seconds(row.train_seconds) }),
      SS.el("td", {}, modelLink(row))));
    $("top-table").replaceChildren(SS.el("thead", {}, head), SS.el("tbody", {}, rows));
    if (!top.length) {
      $("top-table").append(SS.el("tbody", {}, SS.el("tr", {},
        SS.el("td", { class: "empty", text: "No complete trial yet." }))));
    }
  }

  function renderFailed() {
    const paths = tableParams();
    const head = SS.el("tr", {}, SS.el("th", { text: "trial" }),
      paths.map((p) => SS.el("th", { text: short(p) })), SS.el("th", { text: "reason" }),
      SS.el("th", { text: "finished (UTC)" }));
    const rows = S.failed.map((row) => SS.el("tr", { "data-index": row.index },
      SS.el("td", {}, trialLink(row)), paramCells(row, paths),
      SS.el("td", { class: "reason", title: row.error || "", text: row.error || "(no reason)" }),
      SS.el("td", { text: SS.time(row.finished_at) })));
    $("failed-table").replaceChildren(SS.el("thead", {}, head), SS.el("tbody", {}, rows));
    $("failed-table").hidden = !S.failed.length;
  }

  function renderPruned(pruned) {
    S.pruned = pruned;
    const paths = tableParams();
    const head = SS.el("tr", {}, SS.el("th", { text: "trial" }),
      paths.map((p) => SS.el("th", { text: short(p) })),
      SS.el("th", { class: "num", text: "stopped at epoch" }),
      SS.el("th", { class: "num", text: S.sweep.metric }),
      SS.el("th", { text: "finished (UTC)" }));
    const rows = pruned.map((row) => SS.el("tr", { "data-index": row.index },
      SS.el("td", {}, trialLink(row)), paramCells(row, paths),
      SS.el("td", { class: "num stop", text: (row.pruned_epoch === null ? "–" : row.pruned_epoch) +
        (row.planned_epochs ? " / " + row.planned_epochs : "") }),
      SS.el("td", { class: "num", text: SS.num(row.objective, 5) }),
      SS.el("td", { text: SS.time(row.finished_at) })));
    const count = S.summary ? S.summary.counts.pruned || 0 : pruned.length;
    $("pruned-count").textContent = count ? "(" + SS.grouped(count) + ")" : "";
    $("pruned-table").replaceChildren(SS.el("thead", {}, head), SS.el("tbody", {}, rows));
    if (!pruned.length) {
      $("pruned-table").append(SS.el("tbody", {}, SS.el("tr", {},
        SS.el("td", { class: "empty", text: "No pruned trial." }))));
    }
  }

  // The history figures (best so far against trials or time, and against epochs), and
  // what the pruned card says of them.
  async function plotHistory(history) {
    S.historyFigs = history;
    S.history = history.epochs.layout.meta;
    await plot("fig-history-trials", history[S.historyAxis]);
    await plot("fig-history-epochs", history.epochs);
  }

  async function plotTiming(timing) {
    await plot("fig-depth", timing.depth);
    await plot("fig-size", timing.params);
  }

  function reasonItems(reasons) {
    return reasons.slice(0, 8).map((r) =>
      SS.el("li", {}, SS.el("span", { class: "n", text: "×" + SS.grouped(r.n) }), r.reason));
  }

  function renderReasons(reasons) {
    S.reasons = reasons;
    const total = reasons.reduce((n, r) => n + r.n, 0);
    $("failed-count").textContent = total ? "(" + SS.grouped(total) + ")" : "";
    $("reasons").replaceChildren(...(reasons.length ? reasonItems(reasons)
      : [SS.el("li", { class: "empty", text: "No failed trials." })]));
    renderFailuresFirst();
  }

  // While nothing completed and some trials failed, their reasons come first.
  function renderFailuresFirst() {
    const counts = S.summary ? S.summary.counts : {};
    const failed = counts.failed || 0;
    const show = failed > 0 && !(counts.complete || 0) && S.reasons.length > 0;
    $("failures-first").hidden = !show;
    if (!show) return;
    $("failures-first-count").textContent = SS.grouped(failed);
    $("failures-first-reasons").replaceChildren(...reasonItems(S.reasons));
  }

  function addFailed(rows) {
    let changed = false;
    for (const row of rows) {
      if (row.state !== "failed" || S.failedSeen.has(row.index)) continue;
      S.failedSeen.add(row.index);
      S.failed.unshift(row);
      changed = true;
    }
    if (changed) {
      S.failed.sort((a, b) => (b.finished_at || 0) - (a.finished_at || 0));
      S.failed.length = Math.min(S.failed.length, S.limits.failed);
      renderFailed();
    }
  }

  // -- figures --------------------------------------------------------------------------

  function plot(id, figure) {
    return Plotly.react($(id), SS.traces(figure.data), figure.layout, SS.PLOT_CONFIG);
  }

  function clearEmptyNote(id) {
    const gd = $(id);
    if (gd.layout && gd.layout.annotations && gd.layout.annotations.length &&
        id !== "fig-parallel") {
      return Plotly.relayout(gd, { annotations: [] });
    }
    return null;
  }

  function scatterTitle(n) {
    return S.sweep.metric + " vs " + short(S.param) + " (" + SS.grouped(n) +
      " complete trials)";
  }

  // `done`: the server's placements of newly finished trials (`parcoords.placements`);
  // `r.x` holds where a trial goes on the x axis for each parameter.
  async function extendScatter(done) {
    const gd = $("fig-scatter");
    const meta = gd.layout.meta;
    const fresh = done.filter((r) => !S.plotted.has(r.index));
    if (!fresh.length) return;
    for (const r of fresh) S.plotted.add(r.index);
    await Plotly.extendTraces(gd, {
      x: [fresh.map((r) => r.x[meta.param])],
      y: [fresh.map((r) => r.objective)],
      customdata: [fresh.map((r) => r.index)],
    }, [0]);
    const update = { "title.text": scatterTitle(S.plotted.size) };
    if ((gd.layout.annotations || []).length) update.annotations = [];
    await Plotly.relayout(gd, update);
  }

  // Parallel coordinates. `meta.axes` is the digest of the axes the figure is drawn on; a
  // poll's lines come with the digest of the axes they were placed on, and lines placed on
  // other axes than the figure's (the sweep's trials moved them) make the page ask for the
  // figure again.
  function setParallel(figure) {
    const meta = figure.layout.meta;
    const kept = new Map();
    for (const [index, objective, t] of meta.kept) kept.set(index, { objective, t });
    S.par = { meta, kept, rev: 0, added: 0, outOfRange: false, axesMoved: false,
      fetching: false, fetchedAt: Date.now() };
    parallelCaption();
  }

  function parallelCaption() {
    if (!S.par) return;
    const shown = S.par.kept.size;
    const total = Math.max(S.par.meta.total, S.summary ? S.summary.counts.complete || 0 : 0,
      shown);
    const cap = S.par.meta.cap;
    const which = S.par.meta.mode === "best" ? "best" : "most recent";
    $("parallel-cap").textContent = total > cap
      ? "showing the " + which + " " + SS.grouped(shown) + " of " +
        SS.grouped(total) + " complete trials (capped at " +
        SS.grouped(cap) + ")"
      : "showing all " + SS.grouped(shown) + " complete trials";
  }

  // Whether entry a should be shown before entry b (better, or newer), ties by index.
  function ahead(a, b) {
    if (S.par.meta.mode === "best") {
      if (a.objective !== b.objective) return better(a.objective, b.objective);
    } else if (a.t !== b.t) {
      return a.t > b.t;
    }
    return a.index < b.index;
  }

  // A band trace is one unbroken path that runs across the axes and back, a trial at a
  // time (see `parcoords._snake`: the page appends to the traces it holds the same way). A trial that leaves keeps its place in the path but is
  // moved below the plot (clipped), so its neighbours stay joined along an axis.
  const GONE = -1;

  function removeSegment(gd, index) {
    const width = S.par.meta.dims.length;
    for (const trace of gd.data.slice(0, S.par.meta.bands.count)) {
      const at = trace.customdata.indexOf(index);
      if (at < 0) continue;
      for (let i = at; i < at + width; i++) { trace.y[i] = GONE; trace.customdata[i] = null; }
      return;
    }
  }

  function snake(trace, ys, index) {
    const order = ys.map((_, i) => i);
    if (trace.x.length && trace.x[trace.x.length - 1] !== 0) order.reverse();
    for (const x of order) {
      trace.x.push(x);
      trace.y.push(ys[x]);
      trace.customdata.push(index);
    }
  }

  // The band trace an objective goes in: the quantile band of `parcoords.band_of`. The
  // bands are the edges of the figure the page holds (the server's snapshot moves on), so
  // the choice among the page's traces is made here.
  function bandTrace(gd, objective) {
    const bands = S.par.meta.bands;
    let band = 0;
    while (band < bands.count - 1 && objective >= bands.edges[band + 1]) band++;
    return gd.data[bands.order.indexOf(band)];
  }

  // The bands are quantiles of the lines the server drew. Once a new objective falls off
  // the objective axis, or the lines added here since are a quarter of those, the server
  // draws the figure again (one request at a time, at most every few seconds); the rows
  // of the last polls are placed again on it, as its snapshot may be older than them.
  const REFRESH_MS = 3000;
  const RECENT_MS = 15000;

  function staleParallel() {
    const p = S.par;
    return p.outOfRange || p.axesMoved || p.added > Math.max(4, p.meta.kept.length / 4);
  }

  async function refreshParallel() {
    const p = S.par;
    if (p.fetching || Date.now() - p.fetchedAt < REFRESH_MS || !staleParallel()) return;
    p.fetching = true;
    try {
      const answer = await SS.getJSON(cfg.parallelUrl + "?mode=" + S.mode);
      if (S.par !== p || answer.mode !== S.mode) return;
      await plot("fig-parallel", answer.figure);
      setParallel(answer.figure);
      S.par.fetchedAt = Date.now();
      const axes = S.par.meta.axes;
      await extendParallel(S.recent.filter((r) => r.axes === axes).map((r) => r.row), axes,
        false);
    } finally {
      p.fetching = false;
    }
  }

  function remember(done, axes) {
    const now = Date.now();
    for (const row of done) S.recent.push({ at: now, row: row, axes: axes });
    while (S.recent.length && now - S.recent[0].at > RECENT_MS) S.recent.shift();
  }

  // `done`: placements of finished trials (`parcoords.placements`) on the axes `axes`.
  async function extendParallel(done, axes, refresh = true) {
    if (!S.par) return;
    if (axes !== S.par.meta.axes) S.par.axesMoved = true;
    const gd = $("fig-parallel");
    const cap = S.par.meta.cap;
    const bands = S.par.meta.bands;
    let changed = false;
    for (const row of done) {
      if (S.par.kept.has(row.index)) continue;
      const entry = { index: row.index, objective: row.objective, t: row.finished_at || 0 };
      if (S.par.kept.size >= cap) {
        let last = null;
        for (const [index, e] of S.par.kept) {
          const candidate = { index, objective: e.objective, t: e.t };
          if (last === null || ahead(last, candidate)) last = candidate;
        }
        if (!ahead(entry, last)) continue;
        S.par.kept.delete(last.index);
        removeSegment(gd, last.index);
      }
      S.par.kept.set(row.index, { objective: entry.objective, t: entry.t });
      snake(bandTrace(gd, row.objective), row.ys, row.index);
      S.par.added += 1;
      if (row.objective < bands.low || row.objective > bands.high) S.par.outOfRange = true;
      changed = true;
    }
    parallelCaption();
    if (changed) {
      gd.layout.datarevision = ++S.par.rev;
      if (gd.layout.annotations && S.par.kept.size === 1) {
        gd.layout.annotations = gd.layout.annotations.filter((a) => a.xref !== "paper");
      }
      await Plotly.react(gd, gd.data, gd.layout, SS.PLOT_CONFIG);
    }
    if (refresh && staleParallel()) await refreshParallel();
  }

  // The curves of one group of traces ("top" or "pruned") made to show `rows`.
  async function updateCurves(rows, group, limit) {
    const gd = $("fig-curves");
    const want = rows.slice(0, limit).map((r) => r.index);
    const mine = (t) => (t.meta.group || "top") === group;
    const have = gd.data.map((t) => (mine(t) ? t.meta.index : null));
    const gone = have.map((index, i) => (index === null || want.includes(index) ? -1 : i))
      .filter((i) => i >= 0);
    if (gone.length) await Plotly.deleteTraces(gd, gone);
    const missing = want.filter((index) => !have.includes(index));
    if (!missing.length && !gone.length) return;
    if (missing.length) {
      const answer = await SS.getJSON(cfg.curvesUrl + "?indexes=" + missing.join(","));
      if (answer.traces.length) {
        await Plotly.addTraces(gd, answer.traces);
        await clearEmptyNote("fig-curves");
      }
    }
    const offset = { top: 1000, pruned: 2000 };
    await Plotly.restyle(gd, { legendrank: gd.data.map((t) => (mine(t)
      ? offset[group] + Math.max(0, want.indexOf(t.meta.index))
      : (t.legendrank === undefined ? offset[t.meta.group || "top"] : t.legendrank))) });
  }

  // -- the Pareto front (a sweep with several objectives) -------------------------------

  // The front's figures are the server's for the objectives the selects name; a poll says
  // the front's version (`d.front`), and the page asks for the figures again when it is not
  // the one drawn. One request at a time; a change made meanwhile is asked right after.
  const F = { version: null, busy: false, again: false };

  function frontQuery() {
    return new URLSearchParams({ x: $("front-x").value, y: $("front-y").value,
      colour: $("front-colour").value });
  }

  async function loadFront() {
    if (F.busy) { F.again = true; return; }
    F.busy = true;
    try {
      const answer = await SS.getJSON(cfg.frontUrl + "?" + frontQuery());
      await plotlyReady;
      await plot("fig-front", answer.figures.pareto);
      await plot("fig-hypervolume", answer.figures.hypervolume);
      F.version = answer.version;
      window.__dashboard.front = answer.version;
    } finally {
      F.busy = false;
    }
    if (F.again) { F.again = false; await loadFront(); }
  }

  // -- loading and polling --------------------------------------------------------------

  function fillParamSelect() {
    const select = $("scatter-param");
    select.replaceChildren(...S.params.map((p) => SS.el("option", {
      value: p, text: p === "index" ? "trial index" : p, selected: p === S.param })));
  }

  // What needs no plotly.js: the cards, the tables, the state the polls extend. It runs
  // as soon as the data has come, while plotly.js (a deferred script after this one) may
  // still be compiling, so the figures are all that is left once it is ready.
  function renderPage(payload) {
    S.since = payload.since; S.versions = payload.versions;
    S.sweep = payload.sweep; S.params = payload.params; S.param = payload.param;
    S.limits = payload.limits;
    S.pruned = payload.pruned;
    S.failed = payload.failed.slice(); S.failedSeen = new Set(S.failed.map((r) => r.index));
    const figs = payload.figures;
    S.plotted = new Set(figs.scatter.data[0].customdata);
    S.recent = [];
    S.historyFigs = figs.history;
    S.history = figs.history.epochs.layout.meta;
    renderSummary(payload.summary, payload.sweep);
    fillParamSelect();
    setParallel(figs.parallel);
    $("loading").hidden = true;
    S.models = new Set(payload.models || []);
    renderTop(payload.top);
    renderFailed();
    renderPruned(payload.pruned);
    renderReasons(payload.reasons);
  }

  async function drawFigures(figs) {
    // The WebGL scatter first: the GPU process renders it while the rest are drawn.
    for (const [id, fig] of [["fig-scatter", figs.scatter], ["fig-width", figs.width],
      ["fig-parallel", figs.parallel], ["fig-curves", figs.curves]]) {
      await plot(id, fig);
      performance.mark(id);
    }
    await plotHistory(figs.history);
    performance.mark("fig-history");
    await plotTiming(figs.timing);
    performance.mark("fig-timing");
    if (cfg.frontUrl) {
      await loadFront();
      performance.mark("fig-front");
    }
  }

  async function step() {
    const query = new URLSearchParams({ since: S.since, ...S.versions });
    const d = await SS.getJSON(cfg.changesUrl + "?" + query);
    S.since = d.since; S.versions = d.versions; S.sweep = d.sweep;
    renderSummary(d.summary, d.sweep);
    const done = d.done.rows;
    remember(done, d.done.axes);
    if (done.length) {
      await extendScatter(done);
      await extendParallel(done, d.done.axes);
    } else {
      parallelCaption();
      if (S.par && staleParallel()) await refreshParallel();
    }
    addFailed(d.rows);
    if (d.width) await plot("fig-width", d.width);
    if (d.timing) await plotTiming(d.timing);
    if (d.reasons) renderReasons(d.reasons);
    if (d.models) S.models = new Set(d.models);
    if (d.top) { renderTop(d.top); await updateCurves(d.top, "top", S.limits.curves); }
    if (d.history) { await plotHistory(d.history); renderSummary(d.summary, d.sweep); }
    if (d.pruned) {
      renderPruned(d.pruned);
      await updateCurves(d.pruned, "pruned", S.limits.curves_pruned);
    }
    if (cfg.frontUrl && d.front && d.front !== F.version) await loadFront();
    window.__dashboard.polls = (window.__dashboard.polls || 0) + 1;
  }

  // plotly.js is the deferred script after this one: ready when the document is.
  const plotlyReady = new Promise((resolve) => {
    if (window.Plotly) resolve();
    else document.addEventListener("DOMContentLoaded", resolve, { once: true });
  });

  // The selects are filled before plotly.js is ready: a change made meanwhile waits for it.
  async function replaceFigure(url, id) {
    const answer = await SS.getJSON(url);
    await plotlyReady;
    await plot(id, answer.figure);
    return answer;
  }

  $("scatter-param").addEventListener("change", async (event) => {
    S.param = event.target.value;
    const answer = await replaceFigure(cfg.scatterUrl + "?param=" +
      encodeURIComponent(S.param), "fig-scatter");
    S.plotted = new Set(answer.figure.data[0].customdata);
  });
  $("parallel-mode").addEventListener("change", async (event) => {
    S.mode = event.target.value;
    const answer = await replaceFigure(cfg.parallelUrl + "?mode=" + S.mode, "fig-parallel");
    setParallel(answer.figure);
  });
  if (cfg.frontUrl) {
    for (const id of ["front-x", "front-y", "front-colour"]) {
      $(id).addEventListener("change", loadFront);
    }
  }
  $("history-axis").addEventListener("change", async (event) => {
    S.historyAxis = event.target.value;
    await plotlyReady;
    if (S.historyFigs) await plot("fig-history-trials", S.historyFigs[S.historyAxis]);
  });

  function openTrial(event) {
    const point = event.points && event.points[0];
    if (point && typeof point.customdata === "number") {
      window.location.href = cfg.trialUrl + point.customdata;
    }
  }

  // A point of the time figures holds [trial index, its depth or size].
  function openTimed(event) {
    const point = event.points && event.points[0];
    if (point && Array.isArray(point.customdata)) {
      window.location.href = cfg.trialUrl + point.customdata[0];
    }
  }

  async function start() {
    SS.fillTimes();
    let payload;
    try {
      payload = await window.sweepData;
      performance.mark("data");
    } catch (error) {
      $("loading").textContent = "Could not load the sweep: " + error.message;
      SS.setLive(false, "not loaded");
      return;
    }
    renderPage(payload);
    performance.mark("page");
    await plotlyReady;
    performance.mark("plotly");
    await drawFigures(payload.figures);
    await SS.painted();
    SS.drawn();
    for (const id of ["fig-scatter", "fig-parallel", "fig-history-trials",
      "fig-history-epochs", "fig-front", "fig-hypervolume"]) {
      if ($(id)) $(id).on("plotly_click", openTrial);
    }
    for (const id of ["fig-depth", "fig-size"]) $(id).on("plotly_click", openTimed);
    SS.setLive(true, "live");
    SS.poll(step, POLL_MS);
  }

  start();
})();
