/* The trial page: config, per-epoch curves, timings, worker, device and error, and the
   download of its kept model when it has one. While the trial runs, polls for the epochs
   after the last one drawn and extends the curves. */
"use strict";

(function () {
  const initial = JSON.parse(document.getElementById("initial").textContent);
  const cfg = JSON.parse(document.getElementById("trial-config").textContent);
  const $ = (id) => document.getElementById(id);
  let last = initial.series.last;
  let names = { loss: initial.series.losses, metrics: initial.series.metrics };
  let trial = initial.trial;

  function kv(table, rows) {
    table.replaceChildren(...rows.map(([key, value, cls]) => SS.el("tr", { class: cls || null },
      SS.el("th", { text: key }), value instanceof Node ? SS.el("td", {}, value)
        : SS.el("td", { text: value === null || value === undefined ? "–" : value }))));
  }

  function show(value) {
    if (value === null || value === undefined) return "–";
    if (typeof value === "number") return SS.num(value, 6);
    if (typeof value === "object") return JSON.stringify(value);
    return String(value);
  }

  // The kept model's download link (`model`: its URL and size, or null: none kept).
  function renderModel(model) {
    const link = $("model-download");
    link.hidden = !model;
    if (!model) { link.removeAttribute("href"); return; }
    link.href = model.url;
    link.title = "safetensors, SHA-256 " + model.sha256;
    link.textContent = "download model (" + SS.bytes(model.size) + ")";
  }

  function render(t) {
    trial = t;
    const state = $("state");
    state.className = "badge " + t.state;
    state.textContent = t.state;
    const stopped = t.state === "pruned" && t.pruned_epoch !== null;
    const cards = [
      SS.card("state", t.state, "attempt " + t.attempt, t.state),
      stopped ? SS.card("stopped at epoch", String(t.pruned_epoch),
        t.planned_epochs ? "of " + t.planned_epochs + " planned" : null, "pruned") : null,
      SS.card(t.objective_metric || "objective", show(t.objective), t.direction),
      SS.card("train time", SS.seconds(t.timings.train_seconds)),
      SS.card("parameters", t.param_count === null ? "–" : SS.num(t.param_count)),
      SS.card("device", t.device || "–", t.dtype),
    ];
    $("cards").replaceChildren(...cards.filter((c) => c !== null));
    const tm = t.timings;
    kv($("timings"), [
      ["queued at (UTC)", SS.time(tm.queued_at)],
      ["started at (UTC)", SS.time(tm.started_at)],
      ["finished at (UTC)", SS.time(tm.finished_at)],
      ["waited in queue", SS.seconds(tm.wait_seconds)],
      [t.state === "running" ? "running for" : "ran for", SS.seconds(tm.run_seconds)],
      ["training (measured by the loop)", SS.seconds(tm.train_seconds)],
      ["last heartbeat (UTC)", SS.time(tm.heartbeat_at)],
    ]);
    const info = t.device_info ? Object.entries(t.device_info).map(([k, v]) => [k, show(v)]) : [];
    kv($("worker"), [
      ["worker", t.worker.name], ["host", t.worker.host], ["pid", t.worker.pid],
      ["device", t.device], ["dtype", t.dtype], ...info,
      ...(t.versions ? Object.entries(t.versions).map(([k, v]) => ["version of " + k, v]) : []),
    ]);
    $("error-panel").hidden = !t.error;
    $("error").textContent = t.error || "";
    kv($("params"), Object.entries(t.params).map(([k, v]) => [k, show(v)]));
    const result = t.result || {};
    const rows = [];
    for (const [key, value] of Object.entries(result)) {
      if (value && typeof value === "object" && !Array.isArray(value)) {
        rows.push([key, "", "section"]);
        for (const [k, v] of Object.entries(value)) rows.push([k, show(v)]);
      } else {
        rows.push([key, show(value)]);
      }
    }
    const finished = ["complete", "failed", "pruned", "cancelled"].includes(t.state);
    kv($("result"), rows.length ? rows : [["result", finished ? "none" : "not yet"]]);
    // A sub-section (execution.parallel) shows as dotted keys: parallel.world_size.
    const leaves = (obj, prefix) => Object.entries(obj).flatMap(([k, v]) =>
      v && typeof v === "object" && !Array.isArray(v)
        ? leaves(v, prefix + k + ".") : [[prefix + k, show(v)]]);
    // A Caffe trial's net and solver texts (caffe.net_text, solver_text) show as text.
    const texts = [];
    const sections = Object.entries(t.config).map(([section, values]) => {
      const table = SS.el("table", { class: "kv" });
      let shown = values;
      if (section === "caffe" && values && typeof values === "object") {
        shown = Object.fromEntries(Object.entries(values).filter(([k, v]) =>
          !(k.endsWith("_text") && typeof v === "string" && texts.push([k, v]))));
      }
      kv(table, typeof shown === "object" && shown !== null
        ? leaves(shown, "") : [[section, show(shown)]]);
      return [SS.el("h3", { class: "muted", text: section }), table];
    });
    const prototxt = texts.map(([k, v]) => SS.el("details", {},
      SS.el("summary", { text: k }), SS.el("pre", { class: "mono", text: v })));
    $("config").replaceChildren(...sections.flat(), ...prototxt);
    layerTable(t.layer_table);
    const head = SS.el("tr", {}, ["attempt", "state", "worker", "started (UTC)",
      "finished (UTC)", "error", "notes"].map((h) => SS.el("th", { text: h })));
    $("history").replaceChildren(SS.el("thead", {}, head), SS.el("tbody", {},
      t.history.map((h) => SS.el("tr", {}, SS.el("td", { text: h.attempt }),
        SS.el("td", {}, SS.el("span", { class: "badge " + h.state, text: h.state })),
        SS.el("td", { class: "mono", text: h.worker || "–" }),
        SS.el("td", { text: SS.time(h.started_at) }), SS.el("td", { text: SS.time(h.finished_at) }),
        SS.el("td", { class: "reason", title: h.error || "", text: h.error || "" }),
        SS.el("td", { class: "reason", text: (h.notes || []).join("; ") })))));
  }

  // A Caffe trial's layers (NetGraph.layer_table): one row per layer, its columns as given;
  // lists joined, shapes written 64x20x24x24.
  function layerTable(rows) {
    $("layers-panel").hidden = !(rows && rows.length);
    if (!rows || !rows.length) return;
    const first = ["name", "type", "bottoms", "tops", "output", "params"];
    const keys = Object.keys(rows[0]);
    const columns = [...first.filter((c) => keys.includes(c)),
      ...keys.filter((c) => !first.includes(c))];
    const shape = (x) => x.length ? x.join("x") : "scalar";
    const cell = (v) => Array.isArray(v)
      ? v.map((x) => Array.isArray(x) ? shape(x) : show(x)).join(", ") : show(v);
    $("layers").replaceChildren(
      SS.el("thead", {}, SS.el("tr", {}, columns.map((c) => SS.el("th", { text: c })))),
      SS.el("tbody", {}, rows.map((r) => SS.el("tr", {},
        columns.map((c) => SS.el("td", { class: "mono", text: cell(r[c]) }))))));
  }

  function plotAll(figures) {
    return Promise.all(Object.entries(figures).map(([key, fig]) =>
      Plotly.react($("fig-" + key), fig.data, fig.layout, SS.PLOT_CONFIG)));
  }

  async function extend(series) {
    if (!series.epochs.length) return;
    const fresh = series.losses.some((n) => !names.loss.includes(n)) ||
      series.metrics.some((n) => !names.metrics.includes(n));
    if (fresh || last[1] < 0) return reload();
    for (const [key, list] of Object.entries(names)) {
      if (!list.length) continue;
      await Plotly.extendTraces($("fig-" + key), {
        x: list.map(() => series.epochs), y: list.map((n) => series.values[n]),
      }, list.map((_, i) => i));
    }
    if (series.values.epoch_seconds) {
      await Plotly.extendTraces($("fig-seconds"),
        { x: [series.epochs], y: [series.values.epoch_seconds] }, [0]);
    }
    last = series.last;
  }

  async function reload() {
    const d = await SS.getJSON(cfg.dataUrl);
    last = d.series.last;
    names = { loss: d.series.losses, metrics: d.series.metrics };
    render(d.trial);
    renderModel(d.model);
    await plotAll(d.figures);
  }

  async function step() {
    if (["complete", "failed", "pruned", "cancelled"].includes(trial.state) &&
        (window.__dashboard.idle = (window.__dashboard.idle || 0) + 1) % 5) {
      return; // a finished trial changes only if retried: look less often
    }
    const d = await SS.getJSON(cfg.dataUrl + "?attempt=" + last[0] + "&epoch=" + last[1]);
    // Pruned just now: draw the figures again, with the epoch it stopped at marked.
    if (d.reset || (d.trial.state === "pruned" && trial.state !== "pruned")) return reload();
    render(d.trial);
    renderModel(d.model);
    await extend(d.series);
  }

  async function start() {
    render(trial);
    renderModel(initial.model);
    await plotAll(initial.figures);
    await SS.painted();
    SS.drawn();
    SS.setLive(true, "live");
    SS.poll(step, 2000);
  }

  start();
})();
