/* The sweep page's trials table: every trial, sorted, filtered and paged by the server
   (/table), a comparison of 2-5 selected trials (/compare), downloads of what the filters
   select, and the owner's actions (cancel, retry failed, pause or resume, extend) after a
   confirmation. The page
   only keeps the query and the selection; every row comes from the server. */
"use strict";

(function () {
  const cfg = JSON.parse(document.getElementById("trials-config").textContent);
  const limits = cfg.limits;
  const REFRESH_MS = 5000;
  const $ = (id) => document.getElementById(id);
  const short = (path) => (path.includes(".") ? path.split(".").slice(1).join(".") : path);
  const T = {
    sort: "index", order: "asc", page: 1, size: limits.page_size, states: new Set(),
    filters: [], selected: new Map(), data: null, busy: false, confirm: null, front: false,
  };
  const LABELS = {
    index: "trial", state: "state", objective: cfg.metric, train_seconds: "train time",
    param_count: "parameters", epochs: "epochs", finished_at: "finished (UTC)",
  };
  const SHOWN = ["index", "state", "objective"];
  const AFTER = ["epochs", "train_seconds", "param_count", "finished_at"];

  // -- the query ------------------------------------------------------------------------

  function query(paged) {
    const q = new URLSearchParams();
    q.set("sort", T.sort); q.set("order", T.order);
    if (T.states.size) q.set("state", [...T.states].join(","));
    if (T.front) q.set("front", "true");
    for (const f of T.filters) q.append("filter", f.column + ":" + f.op + ":" + f.value);
    const low = $("objective-min").value, high = $("objective-max").value;
    if (low !== "") q.append("filter", "objective:ge:" + low);
    if (high !== "") q.append("filter", "objective:le:" + high);
    if (paged) { q.set("page", T.page); q.set("size", T.size); }
    return q;
  }

  function updateDownloads() {
    for (const fmt of ["csv", "jsonl"]) {
      const q = query(false);
      q.set("format", fmt);
      $("download-" + fmt).href = cfg.downloadUrl + "?" + q;
    }
  }

  // The first page, asked for by the page before this script ran, when that is the query.
  async function first(url) {
    const early = window.trialsFirst;
    window.trialsFirst = null;
    if (!early || url !== cfg.tableUrl + "?" + cfg.limits.first_query) return SS.getJSON(url);
    const response = await early;
    if (!response.ok) return SS.getJSON(url);  // the usual error handling, once more
    return response.json();
  }

  // One request at a time; a change made meanwhile is loaded right after.
  async function load() {
    if (T.busy) { T.pending = true; return; }
    T.busy = true;
    try {
      const asked = query(true).toString();
      const data = await first(cfg.tableUrl + "?" + asked);
      T.data = data; T.page = data.page;
      window.__dashboard.tableQuery = asked;
      render(data);
      note("", false, "table");
    } catch (error) {
      note("The table could not be loaded: " + error.message, true, "table");
    } finally {
      T.busy = false;
      if (T.pending) { T.pending = false; load(); }
    }
  }

  // -- drawing --------------------------------------------------------------------------

  function value(row, column) {
    if (column in LABELS) return row[column];
    const v = row.params[column];
    return v === undefined ? null : v;
  }

  // A column's cell text; a parameter's is the server's (`row.text`, `texts`), given here.
  function text(column, v, shown) {
    if (v === null || v === undefined) return "–";
    if (column === "train_seconds") return SS.seconds(v);
    if (column === "finished_at") return SS.time(v);
    if (column === "objective") return SS.num(v, 5);
    if (shown !== undefined) return shown;
    return SS.num(v);
  }

  function headCell(column, label) {
    const active = T.sort === column;
    const arrow = active ? (T.order === "asc" ? " ▲" : " ▼") : "";
    return SS.el("th", { class: "sortable" + (active ? " sorted" : ""), "data-column": column,
      title: "sort by " + column, "aria-sort": active ? (T.order === "asc" ? "ascending" : "descending") : null },
    label + arrow);
  }

  function render(data) {
    const columns = [...SHOWN, ...data.params, ...AFTER];
    const head = SS.el("tr", {}, SS.el("th", { class: "pick", text: "" }),
      columns.map((c) => headCell(c, LABELS[c] || short(c))));
    const rows = data.rows.map((row) => SS.el("tr", { "data-index": row.index },
      SS.el("td", { class: "pick" }, SS.el("input", { type: "checkbox", class: "pick-box",
        "data-index": row.index, "aria-label": "select trial #" + row.index,
        checked: T.selected.has(row.index) })),
      columns.map((c) => cell(row, c))));
    const body = SS.el("tbody", {}, rows);
    if (!rows.length) {
      body.append(SS.el("tr", {}, SS.el("td", { class: "empty", colspan: columns.length + 1,
        text: data.all ? "No trial matches these filters." : "No trial yet." })));
    }
    $("trials-table").replaceChildren(SS.el("thead", {}, head), body);
    $("trials-count").textContent = data.total === data.all
      ? "(" + SS.grouped(data.all) + ")"
      : "(" + SS.grouped(data.total) + " of " + SS.grouped(data.all) + " match)";
    $("page-label").textContent = "page " + SS.grouped(data.page) + " of " +
      SS.grouped(data.pages);
    $("page-first").disabled = $("page-prev").disabled = data.page <= 1;
    $("page-last").disabled = $("page-next").disabled = data.page >= data.pages;
    fillParams(data.params);
    $("retry-failed").textContent = "Retry failed trials" +
      (data.failed ? " (" + SS.grouped(data.failed) + ")" : "");
    $("retry-failed").disabled = !data.failed || data.cancelled;
    $("cancel-sweep").disabled = data.cancelled || !data.left;
    $("pause-sweep").disabled = data.cancelled;
    $("pause-sweep").textContent = data.paused ? "Resume sweep" : "Pause sweep";
    T.paused = data.paused;
    updateDownloads();
    window.__dashboard.table = (window.__dashboard.table || 0) + 1;
    if (window.__dashboard.tableAt === undefined) window.__dashboard.tableAt = performance.now();
  }

  function cell(row, column) {
    const v = value(row, column);
    if (column === "index") {
      return SS.el("td", {}, SS.el("a", { href: cfg.trialsUrl + row.id, text: "#" + row.index }));
    }
    if (column === "state") {
      return SS.el("td", { title: row.error || null },
        SS.el("span", { class: "badge " + row.state, text: row.state }));
    }
    const numeric = typeof v === "number";
    const shown = column in LABELS ? undefined : row.text[column];
    return SS.el("td", { class: numeric ? "num nowrap" : null, text: text(column, v, shown) });
  }

  function fillParams(params) {
    const select = $("filter-param");
    const have = [...select.options].map((o) => o.value).join(",");
    const want = ["objective", "train_seconds", "param_count", "epochs", "index", ...params];
    if (have === want.join(",")) return;
    select.replaceChildren(...want.map((p) => SS.el("option", { value: p,
      text: LABELS[p] && p !== "index" ? LABELS[p] : p, selected: p === params[0] })));
  }

  function renderChips() {
    $("filter-chips").replaceChildren(...T.filters.map((f, i) => SS.el("li", { class: "chip" },
      short(f.column) + " " + $("filter-op").querySelector("option[value=" + f.op + "]").textContent +
      " " + f.value, SS.el("button", { type: "button", class: "chip-x", "data-chip": i,
        "aria-label": "remove this filter", text: "×" }))));
  }

  function note(message, error, from) {
    const node = $("trials-note");
    if (!message) {
      if (node.dataset.from === from) node.hidden = true;
      return;
    }
    node.hidden = false;
    node.dataset.from = from;
    node.className = "trials-note" + (error ? " error" : "");
    node.textContent = message;
  }

  // -- selection and comparison ---------------------------------------------------------

  function updateSelection() {
    const n = T.selected.size;
    $("compare-open").disabled = n < limits.compare_min;
    $("compare-count").textContent = n
      ? n + " selected: " + [...T.selected.keys()].map((i) => "#" + i).join(", ")
      : "select " + limits.compare_min + " to " + limits.compare_max + " trials to compare them";
  }

  function pick(box) {
    const index = Number(box.dataset.index);
    $("compare-note").textContent = "";
    if (!box.checked) { T.selected.delete(index); updateSelection(); return; }
    if (T.selected.size >= limits.compare_max) {
      box.checked = false;
      $("compare-note").textContent = "You can compare at most " + limits.compare_max +
        " trials; unselect one first.";
      return;
    }
    const row = T.data.rows.find((r) => r.index === index);
    T.selected.set(index, row ? row.id : null);
    updateSelection();
  }

  async function openCompare() {
    const indexes = [...T.selected.keys()];
    $("compare-note").textContent = "";
    let data;
    try {
      data = await SS.getJSON(cfg.compareUrl + "?indexes=" + indexes.join(","));
    } catch (error) {
      $("compare-note").textContent = error.message;
      return;
    }
    T.compare = data;
    $("compare-title").textContent = data.trials.map((t) => "#" + t.index).join(", ");
    const select = $("compare-metric");
    select.replaceChildren(...data.metrics.map((m) => SS.el("option", { value: m, text: m,
      selected: m === data.metric })));
    renderCompareTables(data);
    $("compare-dialog").showModal();
    await drawCompare();
    window.__dashboard.compared = (window.__dashboard.compared || 0) + 1;
  }

  async function drawCompare() {
    const data = T.compare;
    const metric = $("compare-metric").value;
    const figure = data.figures[metric] || { data: [], layout: { title: { text: "no per-epoch metrics" } } };
    await Plotly.react($("fig-compare"), figure.data, figure.layout, SS.PLOT_CONFIG);
  }

  function renderCompareTables(data) {
    const heads = SS.el("tr", {}, SS.el("th", { text: "" }), data.trials.map((t) =>
      SS.el("th", { class: "num" }, SS.el("a", { href: cfg.trialsUrl + t.id, text: "#" + t.index }))));
    const finals = [...new Set(data.trials.flatMap((t) => Object.keys(t.final || {})))];
    const lines = [
      ["state", (t) => t.state], [cfg.metric + " (objective)", (t) => SS.num(t.objective, 5)],
      ...finals.map((m) => ["final " + m, (t) => SS.num((t.final || {})[m], 5)]),
      ["epochs", (t) => SS.num(t.epochs)], ["train time", (t) => SS.seconds(t.train_seconds)],
      ["parameters", (t) => SS.num(t.param_count)], ["device", (t) => t.device || "–"],
      ["error", (t) => t.error || "–"],
    ];
    $("compare-results").replaceChildren(SS.el("thead", {}, heads.cloneNode(true)),
      SS.el("tbody", {}, lines.map(([label, get]) => SS.el("tr", {}, SS.el("th", { text: label }),
        data.trials.map((t) => SS.el("td", { class: "num", text: get(t) }))))));
    $("compare-params").replaceChildren(SS.el("thead", {}, heads),
      SS.el("tbody", {}, data.params.map((p) => SS.el("tr", { class: p.differs ? "differs" : null },
        SS.el("th", { text: p.path }),
        p.values.map((v, i) => SS.el("td", { class: "num",
          text: text(p.path, v, p.texts[i] === null ? undefined : p.texts[i]) }))))));
  }

  // -- owner actions --------------------------------------------------------------------

  function ask(message, yes, action) {
    $("confirm-text").textContent = message;
    $("confirm-yes").textContent = yes;
    T.confirm = action;
    $("confirm-dialog").showModal();
  }

  async function post(url, json) {
    const headers = { Accept: "application/json", "X-CSRF-Token": cfg.csrf };
    if (json !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(url, { method: "POST", headers,
      body: json === undefined ? undefined : JSON.stringify(json) });
    let body = null;
    try { body = await response.json(); } catch (e) { body = null; }
    if (!response.ok) throw new Error(body && body.message ? body.message : response.statusText);
    return body;
  }

  async function act(url, done) {
    try {
      const body = await post(url);
      note(done(body), false, "action");
    } catch (error) {
      note("Refused: " + error.message, true, "action");
    }
    await load();
  }

  function cancelSweep() {
    const left = T.data ? T.data.left : 0;
    ask("Cancel this sweep? Its " + SS.grouped(left) + " queued and running trials stop " +
      "(running ones at their next epoch) and no new trial starts. This cannot be undone.",
    "Yes, cancel the sweep", () => act(cfg.cancelUrl, (b) => "Sweep cancelled: " +
      SS.grouped(b.cancelled) + " queued trials cancelled, " + SS.grouped(b.stopping) +
      " running trials asked to stop."));
  }

  // Pausing, resuming and extending go in the sweep's history, which the page shows near
  // its top: the page is loaded again once the server took the change.
  async function change(url, json) {
    try {
      await post(url, json);
      window.location.reload();
    } catch (error) {
      note("Refused: " + error.message, true, "action");
    }
  }

  function pauseSweep() {
    if (T.paused) {
      ask("Resume this sweep? Its queued trials start again, and new ones are created as " +
        "places free.", "Yes, resume it", () => change(cfg.resumeUrl));
      return;
    }
    ask("Pause this sweep? No new trial starts; running trials finish. Resume it at any time.",
      "Yes, pause it", () => change(cfg.pauseUrl));
  }

  function extendSweep(event) {
    event.preventDefault();
    const trials = Number($("extend-trials").value);
    ask("Raise this sweep's trials from " + SS.grouped(cfg.budget) + " to " +
      SS.grouped(trials) + "? Its trials so far stay; the search goes on from what it " +
      "learned.", "Yes, extend it", () => change(cfg.changeUrl, { trials }));
  }

  function retryFailed() {
    const failed = T.data ? T.data.failed : 0;
    ask("Queue the " + SS.grouped(failed) + " failed trials of this sweep again? Their " +
      "failed attempts stay in each trial's history.", "Yes, retry them",
    () => act(cfg.retryUrl, (b) => "Queued again: " + SS.grouped(b.retried) +
      " failed trials" + (b.requeued_stale ? " and " + SS.grouped(b.requeued_stale) +
      " stale running ones" : "") + "."));
  }

  // -- events ---------------------------------------------------------------------------

  function again(page) { T.page = page; load(); }

  $("trials-table").addEventListener("click", (event) => {
    const th = event.target.closest("th.sortable");
    if (th) {
      const column = th.dataset.column;
      if (T.sort === column) T.order = T.order === "asc" ? "desc" : "asc";
      else { T.sort = column; T.order = column === "objective" && cfg.direction === "maximize" ? "desc" : "asc"; }
      again(1);
    }
  });
  $("trials-table").addEventListener("change", (event) => {
    if (event.target.classList.contains("pick-box")) pick(event.target);
  });
  $("trials-filters").addEventListener("submit", (event) => {
    event.preventDefault();
    const v = $("filter-value").value.trim();
    const op = $("filter-op").value;
    if (v === "") { note("Type a value to filter on.", true, "filter"); return; }
    if (op !== "eq" && op !== "ne" && !Number.isFinite(Number(v))) {
      note("≥, ≤, > and < compare numbers: " + JSON.stringify(v) + " is not one.", true, "filter");
      return;
    }
    note("", false, "filter");
    T.filters.push({ column: $("filter-param").value, op: op, value: v });
    $("filter-value").value = "";
    renderChips();
    again(1);
  });
  $("trials-filters").addEventListener("change", (event) => {
    if (event.target.name === "state") {
      if (event.target.checked) T.states.add(event.target.value);
      else T.states.delete(event.target.value);
      again(1);
    } else if (event.target.id === "filter-front") {
      T.front = event.target.checked;
      again(1);
    } else if (event.target.id === "objective-min" || event.target.id === "objective-max") {
      again(1);
    }
  });
  $("filters-clear").addEventListener("click", () => {
    T.filters = []; T.states.clear(); T.front = false;
    if ($("filter-front")) $("filter-front").checked = false;
    $("objective-min").value = ""; $("objective-max").value = "";
    for (const box of document.querySelectorAll("#trials-filters input[name=state]")) box.checked = false;
    renderChips();
    again(1);
  });
  $("filter-chips").addEventListener("click", (event) => {
    const x = event.target.closest(".chip-x");
    if (!x) return;
    T.filters.splice(Number(x.dataset.chip), 1);
    renderChips();
    again(1);
  });
  $("page-first").addEventListener("click", () => again(1));
  $("page-prev").addEventListener("click", () => again(T.page - 1));
  $("page-next").addEventListener("click", () => again(T.page + 1));
  $("page-last").addEventListener("click", () => again(T.data ? T.data.pages : 1));
  const sizes = $("page-size");
  sizes.replaceChildren(...limits.page_sizes.map((n) => SS.el("option", { value: n, text: n,
    selected: n === T.size })));
  sizes.addEventListener("change", () => { T.size = Number(sizes.value); again(1); });
  $("compare-open").addEventListener("click", openCompare);
  $("compare-close").addEventListener("click", () => $("compare-dialog").close());
  $("compare-metric").addEventListener("change", drawCompare);
  $("cancel-sweep").addEventListener("click", cancelSweep);
  $("pause-sweep").addEventListener("click", pauseSweep);
  if ($("extend-form")) $("extend-form").addEventListener("submit", extendSweep);
  $("retry-failed").addEventListener("click", retryFailed);
  $("confirm-no").addEventListener("click", () => { T.confirm = null; $("confirm-dialog").close(); });
  $("confirm-yes").addEventListener("click", () => {
    const action = T.confirm;
    T.confirm = null;
    $("confirm-dialog").close();
    if (action) action();
  });

  // While trials are queued or running, the page on show follows them.
  function refresh() {
    const open = $("compare-dialog").open || $("confirm-dialog").open;
    if (T.data && T.data.left && !open && !document.hidden) load();
    window.setTimeout(refresh, REFRESH_MS);
  }

  load();
  window.setTimeout(refresh, REFRESH_MS);
})();
