/* The Sweeps page: the newest sweeps with a progress bar by state and the best objective.
   Polls for sweeps updated since the last answer and redraws only their rows. */
"use strict";

(function () {
  const initial = JSON.parse(document.getElementById("initial").textContent);
  const cfg = JSON.parse(document.getElementById("sweeps-config").textContent);
  const sweeps = new Map();
  // The fair share of each active sweep (by id), whole at every answer; workers online.
  let shares = {};
  let workers = null;
  let since = null;
  const body = document.querySelector("#sweeps-table tbody");
  const pending = [];
  let fetching = false;

  function row(s) {
    const total = Object.values(s.counts).reduce((a, b) => a + b, 0);
    const done = total - (s.counts.queued || 0) - (s.counts.running || 0);
    const best = s.best ? SS.num(s.best.objective, 5) : s.best_known ? "–" : "…";
    return SS.el("tr", { id: "sweep-" + s.id, "data-id": s.id },
      SS.el("td", {},
        SS.el("a", { href: cfg.sweepUrl + encodeURIComponent(s.id), text: s.name }),
        s.cancelled ? SS.el("span", { class: "badge cancelled", text: "cancelled" }) : null,
        SS.el("div", { class: "mono muted", text: s.id }),
        s.settings_text ? SS.el("div", { class: "muted settings", text: s.settings_text }) : null),
      SS.el("td", { text: s.owner || "–" }),
      SS.el("td", { text: SS.time(s.created_at) }),
      SS.el("td", {}, SS.progressBar(s.counts, total)),
      SS.el("td", { class: "num", text: SS.num(done) + " / " + SS.num(total) }),
      ...shareCells(s),
      SS.el("td", { class: "num best", title: s.direction + " " + s.metric },
        best, SS.el("span", { class: "muted", text: " " + s.metric })));
  }

  // Share now (workers, of those online), place in line, priority: "–" once a sweep is
  // no longer active, "?" while no scheduler has counted the workers.
  function shareCells(s) {
    const sh = shares[s.id];
    if (!sh) {
      return [SS.el("td", { class: "num share", text: "–" }), SS.el("td", { class: "num position", text: "–" }),
        SS.el("td", { class: "priority", text: s.priority || "normal" })];
    }
    const share = sh.share === null ? "?" : SS.num(sh.share, 3) + " of " + SS.num(workers);
    return [
      SS.el("td", { class: "num share", title: sh.running + " running, window " + (sh.window ?? "?"),
        text: share }),
      SS.el("td", { class: "num position", text: sh.position === null ? "–" : "#" + sh.position }),
      SS.el("td", {}, SS.el("span", { class: "badge priority-" + sh.priority, text: sh.priority }))];
  }

  function render() {
    document.getElementById("workers-online").textContent = workers === null
      ? "Workers online: not counted yet (no scheduler running?)."
      : "Workers online: " + SS.num(workers) + ".";
    const ordered = [...sweeps.values()].sort((a, b) => b.created_at - a.created_at ||
      (a.id < b.id ? 1 : -1));
    body.replaceChildren(...ordered.map(row));
    document.getElementById("sweeps-empty").hidden = ordered.length > 0;
  }

  function merge(list) {
    for (const s of list) {
      const old = sweeps.get(s.id);
      if (old && !s.best_known && old.best_known) { s.best = old.best; s.best_known = true; }
      sweeps.set(s.id, s);
      if (!s.best_known && !pending.includes(s.id)) pending.push(s.id);
    }
  }

  // The best objective of a sweep not yet in the server's memory: one at a time.
  async function fillBest() {
    if (fetching || !pending.length) return;
    fetching = true;
    const id = pending.shift();
    try {
      const s = await SS.getJSON(cfg.summaryUrl.replace("/X/", "/" + encodeURIComponent(id) + "/"));
      sweeps.set(id, { ...sweeps.get(id), ...s });
      render();
    } catch (error) {
      pending.push(id);
    } finally {
      fetching = false;
      if (pending.length) window.setTimeout(fillBest, 50);
    }
  }

  async function step() {
    const sep = cfg.dataUrl.includes("?") ? "&" : "?";
    const url = cfg.dataUrl + (since === null ? "" : sep + "since=" + since);
    const d = await SS.getJSON(url);
    since = d.now - 5000;
    shares = d.shares || {};
    workers = d.workers ?? null;
    merge(d.sweeps);
    render();
    fillBest();
  }

  shares = initial.shares || {};
  workers = initial.workers ?? null;
  merge(initial.sweeps);
  since = initial.now - 5000;
  render();
  fillBest();
  SS.drawn();
  SS.setLive(true, "live");
  SS.poll(step, 2000);
})();
